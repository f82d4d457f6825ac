// Hostile sizes from a peer, against every registered scheme: rank 0 runs
// the real scheme; its only peer is a script that answers each receive with
// what rank 0 sent under that tag, except that every size, count or header
// (an 8-byte message after the metadata exchange) and every length a framed
// message announces (RecvUpTo) is a lie. The scheme must
// raise zen::FormatError before allocating what the peer announced (a
// regression test: the collectives used to resize to any announced size).
// Arbitrary corruption of every message is the job of fuzz/peer_fuzz.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <new>
#include <utility>

#include "zen/comm/collectives.h"
#include "zen/core/error.h"
#include "zen/schemes/registry.h"
#include "zen/testing/scripted_communicator.h"
#include "zen/workload/synthetic.h"

namespace zen {
namespace {

using testing::Announce;
using testing::Script;
using testing::ScriptedComm;

ByteBuffer Mirror(std::deque<ByteBuffer>& sent) {
  if (sent.empty()) throw TransportError(Where{0}, "scripted peer has nothing to answer");
  ByteBuffer b = std::move(sent.front());
  sent.pop_front();
  return b;
}

ByteBuffer Int64Bytes(int64_t v) {
  ByteBuffer b(sizeof(v));
  std::memcpy(b.data(), &v, sizeof(v));
  return b;
}

SparseTensor Input() {
  SyntheticSpec spec;
  spec.rows = 3000;
  spec.width = 3;
  spec.density = 0.05;
  spec.seed = 7;
  return GenerateSyntheticRank(spec, 0);
}

class HostilePeerTest : public ::testing::TestWithParam<std::string> {};

// Every 8-byte answer after the metadata exchange (sizes, counts, headers)
// announces `announced`; the scheme must reject it before allocating.
void ExpectRejected(const std::string& scheme, int64_t announced) {
  // The ring's chunk sizes are known locally (a wrong size is the
  // transport's FormatError); it receives no announced size to lie about.
  if (scheme == "dense") GTEST_SKIP() << "dense ring receives no announced sizes";
  const SparseTensor local = Input();
  int lies = 0;
  ScriptedComm comm([&](Tag tag, size_t size, std::deque<ByteBuffer>& sent) {
    ByteBuffer b = Mirror(sent);
    if (tag != kControlTag && size == sizeof(int64_t)) {
      ++lies;
      return Int64Bytes(announced);
    }
    return b;
  }, [&](Tag tag, int64_t truth) {
    if (tag == kControlTag) return truth;
    ++lies;
    return announced;
  });
  auto s = BuiltinSchemes().Create(scheme);
  try {
    s->Sync(comm, local);
    ADD_FAILURE() << scheme << " accepted an announced size of " << announced << " (" << lies
                  << " lies)";
  } catch (const FormatError& e) {
    EXPECT_GT(lies, 0);
    EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
  } catch (const std::bad_alloc& e) {
    ADD_FAILURE() << scheme << " tried to allocate " << announced
                  << " announced bytes: " << e.what();
  } catch (const std::length_error& e) {
    ADD_FAILURE() << scheme << " tried to allocate " << announced
                  << " announced bytes: " << e.what();
  }
}

TEST_P(HostilePeerTest, HugeAnnouncedSizeIsFormatError) {
  ExpectRejected(GetParam(), int64_t{1} << 44);
}
TEST_P(HostilePeerTest, NegativeAnnouncedSizeIsFormatError) { ExpectRejected(GetParam(), -24); }
TEST_P(HostilePeerTest, OneRowTooManyIsFormatError) {
  // More rows than the tensor has: 3001 rows of width 3 in COO.
  ExpectRejected(GetParam(), 3001 * (8 + 3 * 4) + 32);
}

// Found by fuzz/peer_fuzz.cc (an ASan heap-buffer-overflow): the dense
// ring OR-reduces a row-presence bitmap, and bits a peer sets past `rows` in
// its last word became ids outside the tensor, read from beyond the dense
// buffer. Rows 3018 (48 words, tail of 10 bits) split evenly over 2 ranks.
TEST(HostilePeerDenseTest, PresenceBitsPastTheRowsAreFormatError) {
  SyntheticSpec spec;
  spec.rows = 64 * 47 + 10;
  spec.width = 3;
  spec.density = 0.05;
  const SparseTensor local = GenerateSyntheticRank(spec, 0);
  const size_t bitmap_chunk = 24 * sizeof(uint64_t);
  ScriptedComm comm([&](Tag, size_t size, std::deque<ByteBuffer>& sent) {
    ByteBuffer b = Mirror(sent);
    if (size == bitmap_chunk) std::fill(b.end() - 8, b.end(), std::byte{0xff});
    return b;
  });
  auto s = BuiltinSchemes().Create("dense");
  try {
    s->Sync(comm, local);
    ADD_FAILURE() << "a presence bitmap with rows past the tensor was accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("3018"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, HostilePeerTest, ::testing::ValuesIn(BuiltinSchemes().ids()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace zen
