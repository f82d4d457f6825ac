// libFuzzer target: zen::DecodeCoo and zen::ViewCoo (zen/schemes/wire.h),
// the readers of the COO messages of agsparse, sparse_ps and sparcml. Input: CooCase
// parameters, then the message.
#include <algorithm>
#include <cstring>

#include "fuzz/fuzz_cases.h"
#include "zen/schemes/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  zen::fuzz::Input in(data, size);
  const zen::fuzz::CooCase c = zen::fuzz::CooCase::Read(in);
  const std::span<const std::byte> msg = in.Rest();  // at any alignment
  // ViewCoo (agsparse's in-place reader) on an aligned copy must accept
  // exactly what DecodeCoo accepts, with the same rows.
  const zen::ByteBuffer aligned(msg.begin(), msg.end());
  bool view_ok = false;
  zen::CooView view;
  try {
    view = zen::ViewCoo(aligned, c.rows, c.width, zen::Where{0, "fuzz"}, c.sender);
    view_ok = true;
  } catch (const zen::FormatError&) {
  }
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
    if (!view_ok || view.ids.size() != t.ids().size() ||
        !std::equal(view.ids.begin(), view.ids.end(), t.ids().begin()) ||
        view.values.size() != t.values().size() ||
        (!view.values.empty() &&
         std::memcmp(view.values.data(), t.values().data(), view.values.size_bytes()) != 0)) {
      zen::fuzz::Fail("ViewCoo disagrees with DecodeCoo on an accepted message");
    }
  } catch (const zen::FormatError&) {
    if (view_ok) zen::fuzz::Fail("ViewCoo accepted a message DecodeCoo rejects");
  }
  return 0;
}
