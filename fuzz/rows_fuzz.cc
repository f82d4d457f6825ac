// libFuzzer target: zen::DecodeRows (zen/core/hash_bitmap.h), the decoder of
// ZEN's push (COO) and pull (hash bitmap or COO) messages. Input: RowsCase
// parameters, then the message.
#include <cstring>
#include <map>
#include <tuple>

#include "fuzz/fuzz_cases.h"
#include "zen/core/hash_bitmap.h"

namespace {

// Domains depend only on the parameters; build each set once per process.
const zen::HashDomains& Domains(const zen::fuzz::RowsCase& c) {
  static std::map<std::tuple<int64_t, int, uint8_t, bool>, std::unique_ptr<zen::HashDomains>> cache;
  auto& slot = cache[{c.rows, c.servers, c.seed, c.hash}];
  if (!slot) {
    const zen::RowOwner owner =
        c.hash ? zen::RowOwner::Hash(c.seed, c.servers) : zen::RowOwner::Range(c.rows, c.servers);
    slot = std::make_unique<zen::HashDomains>(c.rows, owner);
  }
  return *slot;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  zen::fuzz::Input in(data, size);
  const zen::fuzz::RowsCase c = zen::fuzz::RowsCase::Read(in);
  const std::span<const std::byte> msg = in.Rest();
  const zen::HashDomains& domains = Domains(c);
  zen::DecodedRows got;
  try {
    zen::DecodeRows(msg, domains, c.server, c.width, zen::Where{0, "fuzz"}, got);
  } catch (const zen::FormatError&) {
    return 0;
  }
  // Every decoded id is in the server's domain, ascending; values fit.
  const std::span<const int64_t> d = domains.domain(c.server);
  if (got.values.size() != got.ids.size() * static_cast<size_t>(c.width)) {
    zen::fuzz::Fail("values size");
  }
  for (size_t i = 0; i < got.ids.size(); ++i) {
    if (!std::binary_search(d.begin(), d.end(), got.ids[i])) zen::fuzz::Fail("id outside domain");
    if (i > 0 && got.ids[i] <= got.ids[i - 1]) zen::fuzz::Fail("ids not ascending");
  }
  // Lossless: the same encoding gives the message back.
  std::vector<std::byte> again;
  const zen::EncodingChoice choice = got.encoding == zen::RowEncoding::kCoo
                                         ? zen::EncodingChoice::kCoo
                                         : zen::EncodingChoice::kHashBitmap;
  zen::EncodeRows(domains, c.server, c.width, got.ids, got.values, choice, again);
  if (again.size() != msg.size() || std::memcmp(again.data(), msg.data(), msg.size()) != 0) {
    zen::fuzz::Fail("DecodeRows then EncodeRows changed the bytes");
  }
  return 0;
}
