// libFuzzer target: the framing of zen's TCP store (ServeTcpStoreRequests,
// rendezvous.h), i.e. what rank 0's store thread does with the bytes any
// local process sends to its port. Input: a byte that picks the reply limit
// (1 KiB << (b % 16)) and whether the connection has already sent the job's
// secret (b & 0x80), a byte that splits the rest into two reads, then the
// bytes a client sends. The two reads are served like the server does:
// requests split across reads wait for their rest, replies stop at the limit
// and the requests left wait for the next round.
// Checked: the bytes consumed never exceed those buffered; one round never
// buffers more than the limit plus one reply (a value of at most 16 MiB);
// nothing crashes, leaks or throws.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

#include "zen/comm/tcp_store.h"

namespace {

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "store fuzz: %s\n", what);
  std::abort();
}

constexpr size_t kMaxReply = 1 + 4 + (size_t{16} << 20);

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t limit = size_t{1024} << (data[0] % 16);
  bool hello_done = (data[0] & 0x80) != 0;
  const char* bytes = reinterpret_cast<const char*>(data + 2);
  const size_t n = size - 2;
  const size_t split = std::min<size_t>(data[1], n);
  auto table = zen::NewTcpStoreTable();
  std::vector<char> buffered;
  std::vector<char> out;
  for (const std::span<const char> read : {std::span<const char>(bytes, split),
                                           std::span<const char>(bytes + split, n - split)}) {
    buffered.insert(buffered.end(), read.begin(), read.end());
    for (;;) {
      out.clear();  // the replies were sent
      const zen::TcpStoreFraming r =
          zen::ServeTcpStoreRequests(*table, buffered, out, limit, hello_done, "fuzz-secret");
      if (r.consumed > buffered.size()) Fail("consumed more than was buffered");
      if (out.size() > limit + kMaxReply) Fail("replies past the limit");
      if (!r.ok) return 0;  // the server drops the client
      buffered.erase(buffered.begin(), buffered.begin() + static_cast<std::ptrdiff_t>(r.consumed));
      if (r.consumed == 0) break;  // the rest is an incomplete request
    }
  }
  return 0;
}
