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
#include "zen/workload/synthetic.h"

namespace zen {
namespace {

// Bytes of one answer; `tag`, `size` and `sent` (what rank 0 sent under the
// tag, oldest first) let the script decide.
using Script = std::function<ByteBuffer(Tag tag, size_t size, std::deque<ByteBuffer>& sent)>;

class DoneRequest final : public Request {
 public:
  void Wait() override {}
};

class ScriptedRecv final : public Request {
 public:
  explicit ScriptedRecv(std::function<void()> fill) : fill_(std::move(fill)) {}
  void Wait() override {
    if (fill_) std::exchange(fill_, nullptr)();
  }

 private:
  std::function<void()> fill_;
};

// The length a framed message announces (RecvUpTo), given its true one.
using Announce = std::function<int64_t(Tag tag, int64_t true_size)>;

// Rank 0 of a world of two whose peer is a script.
class ScriptedComm final : public Communicator {
 public:
  explicit ScriptedComm(Script script, Announce announce = [](Tag, int64_t n) { return n; })
      : Communicator(0, 2, std::chrono::milliseconds(1000)),
        script_(std::move(script)),
        announce_(std::move(announce)) {}

  std::unique_ptr<Request> Send(int peer, Tag tag, std::span<const std::byte> data) override {
    CheckPeer(peer);
    sent_[tag].emplace_back(data.begin(), data.end());
    return std::make_unique<DoneRequest>();
  }

  std::unique_ptr<Request> Recv(int peer, Tag tag, std::span<std::byte> data) override {
    CheckPeer(peer);
    return std::make_unique<ScriptedRecv>([this, tag, data] {
      const ByteBuffer reply = script_(tag, data.size(), sent_[tag]);
      if (reply.size() != data.size()) {
        throw FormatError(Where{rank()}, "scripted peer answers ", reply.size(), " bytes, receive ",
                          "expects ", data.size());
      }
      std::copy(reply.begin(), reply.end(), data.begin());
    });
  }

  // Models a framed transport: the length comes first and is checked
  // against the bound before anything is allocated for it.
  std::unique_ptr<Request> RecvUpTo(int peer, Tag tag, ByteBuffer& out,
                                    int64_t max_bytes) override {
    CheckPeer(peer);
    return std::make_unique<ScriptedRecv>([this, tag, &out, max_bytes] {
      std::deque<ByteBuffer>& sent = sent_[tag];
      const int64_t truth = sent.empty() ? 0 : static_cast<int64_t>(sent.front().size());
      const int64_t announced = announce_(tag, truth);
      if (announced < 0 || announced > max_bytes) {
        throw FormatError(Where{rank()}, "scripted peer announces ", announced,
                          " bytes under tag ", tag, ", more than the ", max_bytes,
                          " bytes this receive can hold");
      }
      ByteBuffer reply = script_(tag, static_cast<size_t>(announced), sent);
      if (static_cast<int64_t>(reply.size()) != announced) {
        throw FormatError(Where{rank()}, "scripted peer answers ", reply.size(), " bytes, ",
                          "announced ", announced);
      }
      out = std::move(reply);
    });
  }

 private:
  Script script_;
  Announce announce_;
  std::map<Tag, std::deque<ByteBuffer>> sent_;
};

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
