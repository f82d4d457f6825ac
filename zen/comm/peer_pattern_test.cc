#include "zen/comm/peer_pattern.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "zen/core/error.h"

namespace zen {
namespace {

constexpr int kMaxWorld = 16;

TEST(PeerPatternTest, PositiveModHandlesNegatives) {
  EXPECT_EQ(PositiveMod(-1, 5), 4);
  EXPECT_EQ(PositiveMod(-5, 5), 0);
  EXPECT_EQ(PositiveMod(-6, 5), 4);
  EXPECT_EQ(PositiveMod(7, 5), 2);
  EXPECT_EQ(PositiveMod(0, 1), 0);
}

TEST(PeerPatternTest, AllToAllMatchesFormula) {
  for (int n = 1; n <= kMaxWorld; ++n) {
    for (int r = 0; r < n; ++r) {
      for (int s = 1; s < n; ++s) {
        EXPECT_EQ(AllToAllSendPeer(r, n, s), (r + s) % n);
        EXPECT_EQ(AllToAllRecvPeer(r, n, s), (r - s + n) % n);
      }
    }
  }
}

TEST(PeerPatternTest, AllToAllEachStepIsAPermutationAndSendsMatchReceives) {
  for (int n = 1; n <= kMaxWorld; ++n) {
    for (int s = 1; s < n; ++s) {
      std::set<int> targets;
      std::set<int> sources;
      for (int r = 0; r < n; ++r) {
        const int to = AllToAllSendPeer(r, n, s);
        EXPECT_NE(to, r) << "n=" << n << " step=" << s;
        targets.insert(to);
        sources.insert(AllToAllRecvPeer(r, n, s));
        // The receiver of r's message expects it from r in the same step.
        EXPECT_EQ(AllToAllRecvPeer(to, n, s), r) << "n=" << n << " step=" << s;
      }
      EXPECT_EQ(targets.size(), static_cast<size_t>(n)) << "incast in step " << s;
      EXPECT_EQ(sources.size(), static_cast<size_t>(n));
    }
  }
}

TEST(PeerPatternTest, AllToAllEveryOrderedPairExactlyOnce) {
  for (int n = 1; n <= kMaxWorld; ++n) {
    std::vector<std::vector<int>> sends(n, std::vector<int>(n, 0));
    std::vector<std::vector<int>> recvs(n, std::vector<int>(n, 0));
    for (int r = 0; r < n; ++r) {
      for (int s = 1; s < n; ++s) {
        ++sends[r][AllToAllSendPeer(r, n, s)];
        ++recvs[r][AllToAllRecvPeer(r, n, s)];
      }
    }
    for (int a = 0; a < n; ++a) {
      for (int b = 0; b < n; ++b) {
        EXPECT_EQ(sends[a][b], a == b ? 0 : 1) << "n=" << n << " " << a << "->" << b;
        EXPECT_EQ(recvs[a][b], a == b ? 0 : 1) << "n=" << n << " " << a << "<-" << b;
      }
    }
  }
}

TEST(PeerPatternTest, AllToAllRejectsBadSteps) {
  EXPECT_THROW(AllToAllSendPeer(0, 4, 0), InvalidArgument);
  EXPECT_THROW(AllToAllSendPeer(0, 4, 4), InvalidArgument);
  EXPECT_THROW(AllToAllRecvPeer(4, 4, 1), InvalidArgument);
  EXPECT_THROW(AllToAllRecvPeer(0, 0, 1), InvalidArgument);
}

TEST(PeerPatternTest, RingNeighboursAreInverse) {
  for (int n = 1; n <= kMaxWorld; ++n) {
    for (int r = 0; r < n; ++r) {
      const RingNeighbours nb = Ring(r, n);
      EXPECT_EQ(nb.next, (r + 1) % n);
      EXPECT_EQ(nb.prev, (r + n - 1) % n);
      EXPECT_EQ(Ring(nb.next, n).prev, r);
    }
  }
}

// Simulates the ring reduce-scatter symbolically: each rank holds, per chunk,
// the set of ranks whose contribution it has summed. The pattern is right if
// every message carries the chunk the receiver expects, nothing is added twice,
// and in the end rank r holds all n contributions of its owned chunk.
TEST(PeerPatternTest, RingReduceScatterReducesEveryChunkOnce) {
  for (int n = 1; n <= kMaxWorld; ++n) {
    std::vector<std::vector<std::set<int>>> have(n, std::vector<std::set<int>>(n));
    for (int r = 0; r < n; ++r) {
      for (int c = 0; c < n; ++c) have[r][c] = {r};
    }
    for (int s = 0; s + 1 < n; ++s) {
      auto before = have;
      for (int r = 0; r < n; ++r) {
        const int c = RingReduceScatterSendChunk(r, n, s);
        EXPECT_EQ(c, ((r - s) % n + n) % n);
        const int to = Ring(r, n).next;
        ASSERT_EQ(RingReduceScatterRecvChunk(to, n, s), c) << "n=" << n << " step " << s;
        for (int src : before[r][c]) {
          EXPECT_TRUE(have[to][c].insert(src).second) << "double count, n=" << n;
        }
      }
    }
    for (int r = 0; r < n; ++r) {
      const int own = RingOwnedChunk(r, n);
      EXPECT_EQ(have[r][own].size(), static_cast<size_t>(n)) << "n=" << n << " rank " << r;
    }
    std::set<int> owned;
    for (int r = 0; r < n; ++r) owned.insert(RingOwnedChunk(r, n));
    EXPECT_EQ(owned.size(), static_cast<size_t>(n)) << "every chunk has one owner";
  }
}

// After the reduce-scatter rank r holds chunk (r + 1) mod n; the allgather must
// only forward chunks the sender already holds and leave every rank with all.
TEST(PeerPatternTest, RingAllGatherDeliversEveryChunkToEveryRank) {
  for (int n = 1; n <= kMaxWorld; ++n) {
    std::vector<std::set<int>> have(n);
    for (int r = 0; r < n; ++r) have[r] = {RingOwnedChunk(r, n)};
    for (int s = 0; s + 1 < n; ++s) {
      auto before = have;
      for (int r = 0; r < n; ++r) {
        const int c = RingAllGatherSendChunk(r, n, s);
        EXPECT_TRUE(before[r].count(c))
            << "rank " << r << " forwards chunk " << c << " it lacks, n=" << n;
        const int to = Ring(r, n).next;
        ASSERT_EQ(RingAllGatherRecvChunk(to, n, s), c);
        EXPECT_TRUE(have[to].insert(c).second) << "chunk received twice, n=" << n;
      }
    }
    for (int r = 0; r < n; ++r) EXPECT_EQ(have[r].size(), static_cast<size_t>(n)) << "n=" << n;
  }
}

TEST(PeerPatternTest, LargestPowerOfTwo) {
  const std::vector<int> want = {1, 2, 2, 4, 4, 4, 4, 8, 8, 8, 8, 8, 8, 8, 8, 16};
  for (int n = 1; n <= kMaxWorld; ++n) EXPECT_EQ(LargestPowerOfTwoAtMost(n), want[n - 1]) << n;
  EXPECT_EQ(LargestPowerOfTwoAtMost(1 << 30), 1 << 30);
  EXPECT_THROW(LargestPowerOfTwoAtMost(0), InvalidArgument);
}

// Symbolic recursive doubling: fold-in, rounds, fold-out. Every rank must end
// with the contributions of all n ranks, each exactly once, and partners must
// agree on each other in every round.
TEST(PeerPatternTest, RecursiveDoublingCombinesAllRanksOnce) {
  for (int n = 1; n <= kMaxWorld; ++n) {
    std::vector<RecursiveDoublingPlan> plans;
    for (int r = 0; r < n; ++r) plans.push_back(RecursiveDoubling(r, n));
    const int p = plans[0].pow2;
    std::vector<std::multiset<int>> have(n);
    for (int r = 0; r < n; ++r) have[r] = {r};
    // Fold-in.
    for (int r = p; r < n; ++r) {
      ASSERT_TRUE(plans[r].is_extra);
      EXPECT_TRUE(plans[r].partners.empty());
      const int to = plans[r].fold_partner;
      ASSERT_GE(to, 0);
      ASSERT_LT(to, p);
      EXPECT_EQ(plans[to].fold_partner, r);
      have[to].insert(have[r].begin(), have[r].end());
    }
    int rounds = 0;
    for (int d = 1; d < p; d *= 2) ++rounds;
    for (int k = 0; k < rounds; ++k) {
      auto before = have;
      for (int r = 0; r < p; ++r) {
        ASSERT_EQ(plans[r].partners.size(), static_cast<size_t>(rounds));
        const int q = plans[r].partners[k];
        ASSERT_GE(q, 0);
        ASSERT_LT(q, p);
        EXPECT_EQ(plans[q].partners[k], r) << "n=" << n << " round " << k;
        have[r].insert(before[q].begin(), before[q].end());
      }
    }
    // Fold-out.
    for (int r = p; r < n; ++r) have[r] = have[plans[r].fold_partner];
    for (int r = 0; r < n; ++r) {
      std::multiset<int> want;
      for (int q = 0; q < n; ++q) want.insert(q);
      EXPECT_EQ(have[r], want) << "n=" << n << " rank " << r;
      if (r < p) {
        EXPECT_FALSE(plans[r].is_extra);
        EXPECT_EQ(plans[r].fold_partner, r < n - p ? r + p : -1);
      }
    }
  }
}

// Round k: r hears from r - 2^k. By induction r has heard from 2^(k+1) ranks
// (itself and its predecessors); after all rounds, from everyone.
TEST(PeerPatternTest, DisseminationReachesEveryRank) {
  for (int n = 1; n <= kMaxWorld; ++n) {
    std::vector<std::set<int>> heard(n);
    for (int r = 0; r < n; ++r) heard[r] = {r};
    const std::vector<int> dist = DisseminationDistances(n);
    for (int d : dist) {
      auto before = heard;
      for (int r = 0; r < n; ++r) {
        const int from = ((r - d) % n + n) % n;
        heard[r].insert(before[from].begin(), before[from].end());
      }
    }
    for (int r = 0; r < n; ++r) EXPECT_EQ(heard[r].size(), static_cast<size_t>(n)) << n;
    size_t want_rounds = 0;
    while ((1 << want_rounds) < n) ++want_rounds;
    EXPECT_EQ(dist.size(), want_rounds) << "n=" << n;
  }
}

TEST(PeerPatternTest, BalancedChunksCoverRowsContiguouslyAndEvenly) {
  const std::vector<int64_t> row_counts = {0, 1, 2, 7, 15, 16, 17, 100, 1001};
  for (int n = 1; n <= kMaxWorld; ++n) {
    for (int64_t rows : row_counts) {
      const std::vector<int64_t> bounds = BalancedChunkBounds(rows, n);
      ASSERT_EQ(bounds.size(), static_cast<size_t>(n) + 1);
      EXPECT_EQ(bounds.front(), 0);
      EXPECT_EQ(bounds.back(), rows);
      int64_t lo = rows, hi = 0;
      for (int i = 0; i < n; ++i) {
        const RowRange c = BalancedChunk(rows, n, i);
        EXPECT_EQ(c.begin, bounds[i]);
        EXPECT_EQ(c.end, bounds[i + 1]);
        EXPECT_GE(c.size(), 0);
        lo = std::min(lo, c.size());
        hi = std::max(hi, c.size());
        for (int64_t row = c.begin; row < c.end; ++row) {
          ASSERT_EQ(BalancedChunkOf(rows, n, row), i) << "rows=" << rows << " n=" << n;
        }
      }
      EXPECT_LE(hi - lo, 1) << "rows=" << rows << " n=" << n;
    }
  }
}

TEST(PeerPatternTest, BalancedChunksBeyond32Bits) {
  const int64_t rows = (int64_t{1} << 40) + 5;
  const int n = 7;
  const std::vector<int64_t> bounds = BalancedChunkBounds(rows, n);
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(BalancedChunkOf(rows, n, bounds[i]), i);
    EXPECT_EQ(BalancedChunkOf(rows, n, bounds[i + 1] - 1), i);
    const int64_t size = bounds[i + 1] - bounds[i];
    EXPECT_TRUE(size == rows / n || size == rows / n + 1);
  }
  EXPECT_EQ(bounds.back(), rows);
}

TEST(PeerPatternTest, BalancedChunksRejectBadInput) {
  EXPECT_THROW(BalancedChunk(-1, 2, 0), InvalidArgument);
  EXPECT_THROW(BalancedChunk(10, 2, 2), InvalidArgument);
  EXPECT_THROW(BalancedChunkOf(10, 2, 10), InvalidArgument);
  EXPECT_THROW(BalancedChunkOf(10, 2, -1), InvalidArgument);
}

}  // namespace
}  // namespace zen
