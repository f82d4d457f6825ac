#include "zen/comm/collectives.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "zen/testing/ranks.h"
#include "zen/core/error.h"

namespace zen {
namespace {

using testing::Backend;
using testing::RunRanks;

// Deterministic bytes of the message src -> dst (dst = -1: one for all).
ByteBuffer Pattern(int src, int dst, int64_t size) {
  ByteBuffer b(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) {
    b[static_cast<size_t>(i)] = static_cast<std::byte>((src * 131 + (dst + 1) * 31 + i * 7) & 0xff);
  }
  return b;
}

// Sizes differ per pair so that a mixed-up peer order cannot pass.
int64_t PairSize(int64_t payload, int src, int dst) {
  return payload == 0 ? 0 : payload + (src * 7 + dst * 3) % 5;
}

// Broadcast sends each message's size ahead of it as one int64.
constexpr uint64_t kCountBytes = sizeof(int64_t);

using Param = std::tuple<Backend, int, int64_t>;

class CollectivesTest : public ::testing::TestWithParam<Param> {
 protected:
  Backend backend() const { return std::get<0>(GetParam()); }
  int world() const { return std::get<1>(GetParam()); }
  int64_t payload() const { return std::get<2>(GetParam()); }
};

TEST_P(CollectivesTest, AllToAllVDeliversAndCountsExactBytes) {
  const int64_t payload = this->payload();
  RunRanks(backend(), world(), [&](Communicator& comm) {
    const int r = comm.rank(), n = comm.size();
    std::vector<ByteBuffer> out(n);
    for (int p = 0; p < n; ++p) out[p] = Pattern(r, p, PairSize(payload, r, p));
    comm.ResetCounters();
    const std::vector<ByteBuffer> got = AllToAllV(comm, out, kAnyBytes);
    ASSERT_EQ(got.size(), static_cast<size_t>(n));
    uint64_t want_sent = 0, want_recv = 0;
    for (int p = 0; p < n; ++p) {
      EXPECT_EQ(got[p], Pattern(p, r, PairSize(payload, p, r))) << "from rank " << p;
      if (p == r) continue;
      // One message per peer: sizes travel in the transport's frames, which
      // the counters leave out.
      const uint64_t sent = static_cast<uint64_t>(PairSize(payload, r, p));
      const uint64_t recv = static_cast<uint64_t>(PairSize(payload, p, r));
      EXPECT_EQ(comm.counters().sent(p), sent);
      EXPECT_EQ(comm.counters().recv(p), recv);
      want_sent += sent;
      want_recv += recv;
    }
    EXPECT_EQ(comm.counters().sent(r), 0u);
    EXPECT_EQ(comm.counters().total_sent(), want_sent);
    EXPECT_EQ(comm.counters().total_recv(), want_recv);
    EXPECT_EQ(comm.counters().messages_sent(), static_cast<uint64_t>(n - 1));
  });
}

// The two halves (ZEN's form): what each peer sent arrives, only the
// payload is counted, and over Gloo a second call of the same sizes reuses
// the receive buffers (their storage does not move; the in-process
// transport hands over the sender's copy instead).
TEST_P(CollectivesTest, PostFinishAllToAllVDeliversAndReusesBuffers) {
  const int64_t payload = this->payload();
  RunRanks(backend(), world(), [&](Communicator& comm) {
    const int r = comm.rank(), n = comm.size();
    std::vector<ByteBuffer> out(n);
    for (int p = 0; p < n; ++p) out[p] = Pattern(r, p, PairSize(payload, r, p));
    std::vector<ByteBuffer> got;
    RequestList requests;
    std::vector<const std::byte*> first(n, nullptr);
    for (int round = 0; round < 2; ++round) {
      comm.ResetCounters();
      const Tag tag = PostAllToAllV(comm, got, kAnyBytes, requests);
      FinishAllToAllV(comm, tag, out, requests);
      ASSERT_EQ(got.size(), static_cast<size_t>(n));
      uint64_t want_sent = 0;
      for (int p = 0; p < n; ++p) {
        if (p == r) continue;  // out[rank] is the caller's own
        EXPECT_EQ(got[p], Pattern(p, r, PairSize(payload, p, r))) << "from rank " << p;
        want_sent += static_cast<uint64_t>(PairSize(payload, r, p));
        if (round == 0) first[p] = got[p].data();
        if (round == 1 && payload > 0 && backend() == Backend::kGlooTcp) {
          EXPECT_EQ(got[p].data(), first[p]) << "rank " << p;
        }
      }
      EXPECT_EQ(comm.counters().total_sent(), want_sent);
      EXPECT_EQ(comm.counters().messages_sent(), static_cast<uint64_t>(n - 1));
      EXPECT_TRUE(requests.empty());
    }
  });
}

TEST_P(CollectivesTest, AllGatherIntGathersEveryRanksValue) {
  const int64_t payload = this->payload();
  RunRanks(backend(), world(), [&](Communicator& comm) {
    const int r = comm.rank(), n = comm.size();
    const std::vector<int64_t> all = AllGatherInt(comm, -1000 * r - payload - (int64_t{1} << 40));
    ASSERT_EQ(all.size(), static_cast<size_t>(n));
    for (int p = 0; p < n; ++p) EXPECT_EQ(all[p], -1000 * p - payload - (int64_t{1} << 40));
  });
}

TEST_P(CollectivesTest, AllGatherVDeliversAndCounts) {
  const int64_t payload = this->payload();
  RunRanks(backend(), world(), [&](Communicator& comm) {
    const int r = comm.rank(), n = comm.size();
    const ByteBuffer mine = Pattern(r, -1, PairSize(payload, r, 0));
    comm.ResetCounters();
    const std::vector<ByteBuffer> got = AllGatherV(comm, mine, kAnyBytes);
    ASSERT_EQ(got.size(), static_cast<size_t>(n));
    for (int p = 0; p < n; ++p) EXPECT_EQ(got[p], Pattern(p, -1, PairSize(payload, p, 0)));
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      EXPECT_EQ(comm.counters().sent(p), mine.size());
      EXPECT_EQ(comm.counters().recv(p), static_cast<uint64_t>(PairSize(payload, p, 0)));
    }
    EXPECT_EQ(comm.counters().messages_sent(), static_cast<uint64_t>(n - 1));
  });
}

// The Each forms hand every peer's message on once, complete, in the order
// the peers send (step s: from (r - s) mod n), and deliver what the plain
// forms deliver.
TEST_P(CollectivesTest, EachFormsHandOnEveryMessageOnceInStepOrder) {
  const int64_t payload = this->payload();
  RunRanks(backend(), world(), [&](Communicator& comm) {
    const int r = comm.rank(), n = comm.size();
    std::vector<int> want_order;
    for (int s = 1; s < n; ++s) want_order.push_back((r - s + n) % n);
    std::vector<ByteBuffer> per_peer(n), got;
    for (int p = 0; p < n; ++p) per_peer[p] = Pattern(r, p, PairSize(payload, r, p));
    RequestList requests;
    std::vector<int> order;
    Tag tag = PostAllToAllV(comm, got, kAnyBytes, requests);
    FinishAllToAllVEach(comm, tag, per_peer, requests, [&](int peer) {
      order.push_back(peer);
      EXPECT_EQ(got[peer], Pattern(peer, r, PairSize(payload, peer, r))) << "from rank " << peer;
    });
    EXPECT_EQ(order, want_order);
    EXPECT_TRUE(requests.empty());

    const ByteBuffer mine = Pattern(r, -1, PairSize(payload, r, 0));
    order.clear();
    tag = PostAllGatherV(comm, got, kAnyBytes, requests);
    FinishAllGatherVEach(comm, tag, mine, requests, [&](int peer) {
      order.push_back(peer);
      EXPECT_EQ(got[peer], Pattern(peer, -1, PairSize(payload, peer, 0))) << "from rank " << peer;
    });
    EXPECT_EQ(order, want_order);
    EXPECT_TRUE(requests.empty());
  });
}

// The spans form: peer p gets a window of one buffer that leaves p's own
// part out (the bytes after it, then those before it, in a buffer holding
// the parts twice), handed on in step order; the counters count exactly
// the windows' bytes, one message per peer.
TEST_P(CollectivesTest, SpansFormSendsEachPeerItsWindowOfOneBuffer) {
  const int64_t payload = this->payload();
  RunRanks(backend(), world(), [&](Communicator& comm) {
    const int r = comm.rank(), n = comm.size();
    // Rank src's parts, PairSize(payload, src, p) + 1 bytes each: part p
    // starts at starts[p] of [part 0 .. part n-1, part 0 .. part n-1].
    auto buffer_of = [&](int src) {
      ByteBuffer all;
      std::vector<size_t> starts;
      for (int copy = 0; copy < 2; ++copy) {
        for (int p = 0; p < n; ++p) {
          starts.push_back(all.size());
          const ByteBuffer part = Pattern(src, p, PairSize(payload, src, p) + 1);
          all.insert(all.end(), part.begin(), part.end());
        }
      }
      return std::make_pair(all, starts);
    };
    // Peer p's window: parts p+1 .. n-1, then 0 .. p-1 (the second copy).
    auto window = [&](const ByteBuffer& all, const std::vector<size_t>& starts, int p) {
      const size_t from = starts[static_cast<size_t>(p) + 1];
      const size_t to = starts[static_cast<size_t>(p + n)];
      return std::span<const std::byte>(all).subspan(from, to - from);
    };
    const auto [mine, starts] = buffer_of(r);
    std::vector<int> want_order;
    for (int s = 1; s < n; ++s) want_order.push_back((r - s + n) % n);
    std::vector<ByteBuffer> got;
    RequestList requests;
    std::vector<int> order;
    comm.ResetCounters();
    const Tag tag = PostAllToAllV(comm, got, kAnyBytes, requests);
    uint64_t want_sent = 0;
    FinishAllToAllVSpansEach(
        comm, tag,
        [&](int p) {
          const std::span<const std::byte> w = window(mine, starts, p);
          want_sent += w.size();
          return w;
        },
        requests,
        [&](int peer) {
          order.push_back(peer);
          const auto [theirs, at] = buffer_of(peer);
          const std::span<const std::byte> w = window(theirs, at, r);
          EXPECT_EQ(got[peer], ByteBuffer(w.begin(), w.end())) << "from rank " << peer;
        });
    EXPECT_EQ(order, want_order);
    EXPECT_TRUE(requests.empty());
    if (n == 1) return;
    EXPECT_EQ(comm.counters().total_sent(), want_sent);
    EXPECT_EQ(comm.counters().messages_sent(), static_cast<uint64_t>(n - 1));
  });
}

// A callback that throws: the error propagates after the remaining requests
// completed (the list is empty), and the communicator stays usable.
TEST_P(CollectivesTest, EachFormsPropagateACallbackErrorAfterSettling) {
  if (world() == 1) GTEST_SKIP() << "no peer, no callback";
  const int64_t payload = this->payload();
  RunRanks(backend(), world(), [&](Communicator& comm) {
    const int r = comm.rank(), n = comm.size();
    const ByteBuffer mine = Pattern(r, -1, PairSize(payload, r, 0));
    std::vector<ByteBuffer> got;
    RequestList requests;
    int calls = 0;
    const Tag tag = PostAllGatherV(comm, got, kAnyBytes, requests);
    EXPECT_THROW(FinishAllGatherVEach(comm, tag, mine, requests,
                                      [&](int) {
                                        ++calls;
                                        throw FormatError("refused");
                                      }),
                 FormatError);
    EXPECT_EQ(calls, 1);
    EXPECT_TRUE(requests.empty());
    // Every message of the round arrived (the settled receives).
    for (int p = 0; p < n; ++p) {
      if (p != r) {
        EXPECT_EQ(got[p], Pattern(p, -1, PairSize(payload, p, 0))) << "from rank " << p;
      }
    }
    const std::vector<ByteBuffer> again = AllGatherV(comm, mine, kAnyBytes);
    for (int p = 0; p < n; ++p) EXPECT_EQ(again[p], Pattern(p, -1, PairSize(payload, p, 0)));
  });
}

TEST_P(CollectivesTest, BroadcastFromEveryRoot) {
  const int64_t payload = this->payload();
  RunRanks(backend(), world(), [&](Communicator& comm) {
    const int r = comm.rank(), n = comm.size();
    for (int root = 0; root < n; ++root) {
      const ByteBuffer data =
          r == root ? Pattern(root, -2, PairSize(payload, root, 1)) : ByteBuffer{};
      comm.ResetCounters();
      const ByteBuffer got = Broadcast(comm, root, data, kAnyBytes);
      EXPECT_EQ(got, Pattern(root, -2, PairSize(payload, root, 1))) << "root " << root;
      const uint64_t want = r == root ? static_cast<uint64_t>(n - 1) *
                                            (kCountBytes + static_cast<uint64_t>(got.size()))
                                      : 0;
      EXPECT_EQ(comm.counters().total_sent(), want);
    }
  });
}

using NoPayloadParam = std::tuple<Backend, int>;

class CollectivesNoPayloadTest : public ::testing::TestWithParam<NoPayloadParam> {
 protected:
  Backend backend() const { return std::get<0>(GetParam()); }
  int world() const { return std::get<1>(GetParam()); }
};

TEST_P(CollectivesNoPayloadTest, BarrierWaitsForEveryRank) {
  const int n = world();
  std::vector<std::atomic<int>> arrived(static_cast<size_t>(n));
  RunRanks(backend(), n, [&](Communicator& comm) {
    for (int round = 1; round <= 3; ++round) {
      // Stagger arrivals so that an early exit would see a missing rank.
      std::this_thread::sleep_for(std::chrono::milliseconds(3 * ((comm.rank() + round) % n)));
      arrived[comm.rank()].store(round);
      Barrier(comm);
      for (int p = 0; p < n; ++p) EXPECT_GE(arrived[p].load(), round) << "rank " << p;
      Barrier(comm);  // nobody starts the next round before all have checked
    }
  });
}

INSTANTIATE_TEST_SUITE_P(All, CollectivesNoPayloadTest,
                         ::testing::Combine(::testing::Values(Backend::kInProc, Backend::kGlooTcp),
                                            ::testing::Values(1, 2, 3, 5, 7, 8)),
                         [](const auto& info) {
                           std::string s = testing::BackendName(std::get<0>(info.param)) + "_n" +
                                           std::to_string(std::get<1>(info.param));
                           for (char& c : s) {
                             if (c == '-') c = '_';
                           }
                           return s;
                         });

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  return testing::BackendName(std::get<0>(info.param)) + "_n" +
         std::to_string(std::get<1>(info.param)) + "_b" + std::to_string(std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(All, CollectivesTest,
                         ::testing::Combine(::testing::Values(Backend::kInProc, Backend::kGlooTcp),
                                            ::testing::Values(1, 2, 3, 5, 7, 8),
                                            ::testing::Values(int64_t{0}, int64_t{1}, int64_t{1000},
                                                              int64_t{1} << 20)),
                         [](const auto& info) {
                           std::string s = ParamName(info);
                           for (char& c : s) {
                             if (c == '-') c = '_';
                           }
                           return s;
                         });

TEST(CollectivesWorldOfOneTest, ReturnsOwnDataAndSendsNothing) {
  for (Backend backend : {Backend::kInProc, Backend::kGlooTcp}) {
    for (int64_t payload : {int64_t{0}, int64_t{1000}}) {
      RunRanks(backend, 1, [&](Communicator& comm) {
        const ByteBuffer b = Pattern(0, 0, payload);
        EXPECT_EQ(AllToAllV(comm, std::vector<ByteBuffer>{b}, kAnyBytes)[0], b);
        std::vector<ByteBuffer> got;
        RequestList requests;
        const Tag tag = PostAllToAllV(comm, got, kAnyBytes, requests);
        FinishAllToAllV(comm, tag, std::vector<ByteBuffer>{b}, requests);
        EXPECT_TRUE(requests.empty());
        EXPECT_EQ(AllGatherV(comm, b, kAnyBytes)[0], b);
        EXPECT_EQ(Broadcast(comm, 0, b, kAnyBytes), b);
        EXPECT_EQ(AllGatherInt(comm, 42)[0], 42);
        Barrier(comm);
        EXPECT_EQ(comm.counters().messages_sent(), 0u);
        EXPECT_EQ(comm.counters().total_sent(), 0u);
      });
    }
  }
}

TEST(CollectivesArgsTest, RejectWrongShapes) {
  RunRanks(Backend::kInProc, 2, [&](Communicator& comm) {
    EXPECT_THROW(AllToAllV(comm, std::vector<ByteBuffer>(3), kAnyBytes), InvalidArgument);
    EXPECT_THROW(AllToAllV(comm, std::vector<ByteBuffer>(2), -1), InvalidArgument);
    EXPECT_THROW(Broadcast(comm, 2, {}, kAnyBytes), InvalidArgument);
  });
}

// A peer that sends more than the receiver can hold is caught on receipt.
TEST(CollectivesArgsTest, MessageOverTheBoundIsFormatError) {
  for (Backend b : {Backend::kInProc, Backend::kGlooTcp}) {
    EXPECT_THROW(RunRanks(
                     b, 2,
                     [&](Communicator& comm) {
                       std::vector<ByteBuffer> out(2, ByteBuffer(comm.rank() == 0 ? 10 : 11));
                       AllToAllV(comm, out, 10);
                     },
                     std::chrono::milliseconds(2000)),
                 FormatError)
        << testing::BackendName(b);
  }
}

}  // namespace
}  // namespace zen
