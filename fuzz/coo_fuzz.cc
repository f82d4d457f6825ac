// libFuzzer target: zen::DecodeCoo (zen/schemes/wire.h), the decoder of the
// COO messages of agsparse, sparse_ps and sparcml. Input: CooCase
// parameters, then the message.
#include <cstring>

#include "fuzz/fuzz_cases.h"
#include "zen/schemes/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  zen::fuzz::Input in(data, size);
  const zen::fuzz::CooCase c = zen::fuzz::CooCase::Read(in);
  const std::span<const std::byte> msg = in.Rest();
  try {
    const zen::SparseTensor t =
        zen::DecodeCoo(msg, c.rows, c.width, zen::Where{0, "fuzz"}, c.sender);
    zen::fuzz::CheckTensor(t, c.rows, c.width);
    // Decoding is lossless: encoding the result gives the message back.
    const zen::ByteBuffer again = zen::EncodeCoo(t.ids(), t.values());
    if (again.size() != msg.size() ||
        (!msg.empty() && std::memcmp(again.data(), msg.data(), msg.size()) != 0)) {
      zen::fuzz::Fail("DecodeCoo then EncodeCoo changed the bytes");
    }
  } catch (const zen::FormatError&) {
  }
  return 0;
}
