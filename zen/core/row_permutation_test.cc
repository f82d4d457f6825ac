#include "zen/core/row_permutation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "zen/core/error.h"
#include "zen/core/row_owner.h"

namespace zen {
namespace {

// Brute force on every small rows value: pi hits every value of [0, rows)
// exactly once, and Inverse undoes it.
TEST(RowPermutation, BijectionWithInverseOnEverySmallRows) {
  for (uint64_t seed : {0ULL, 1ULL, 0xDEADBEEFULL}) {
    for (int64_t rows = 1; rows <= 600; ++rows) {
      const RowPermutation pi(seed, rows);
      std::vector<int> hit(static_cast<size_t>(rows), 0);
      for (int64_t id = 0; id < rows; ++id) {
        const int64_t p = pi(id);
        ASSERT_GE(p, 0);
        ASSERT_LT(p, rows) << "rows " << rows << " id " << id;
        ++hit[static_cast<size_t>(p)];
        ASSERT_EQ(pi.Inverse(p), id) << "rows " << rows;
      }
      for (int h : hit) ASSERT_EQ(h, 1) << "rows " << rows;
    }
  }
}

TEST(RowPermutation, PowersOfTwoAndNeighbours) {
  for (int k = 2; k <= 17; ++k) {
    for (int64_t rows : {(int64_t{1} << k) - 1, int64_t{1} << k, (int64_t{1} << k) + 1}) {
      const RowPermutation pi(k, rows);
      std::vector<uint8_t> hit(static_cast<size_t>(rows), 0);
      for (int64_t id = 0; id < rows; ++id) {
        const int64_t p = pi(id);
        ASSERT_LT(p, rows);
        ASSERT_EQ(hit[static_cast<size_t>(p)]++, 0) << rows;
        ASSERT_EQ(pi.Inverse(p), id);
      }
    }
  }
}

TEST(RowPermutation, HugeRowsRoundTripInConstantMemory) {
  for (int64_t rows : {int64_t{1} << 31, (int64_t{1} << 40) + 7, kMaxPermutedRows}) {
    const RowPermutation pi(42, rows);
    std::mt19937_64 rng(1);
    std::set<int64_t> images;
    for (int i = 0; i < 20000; ++i) {
      const int64_t id = static_cast<int64_t>(rng() % static_cast<uint64_t>(rows));
      const int64_t p = pi(id);
      ASSERT_GE(p, 0);
      ASSERT_LT(p, rows);
      ASSERT_EQ(pi.Inverse(p), id);
    }
    for (int64_t id : {int64_t{0}, int64_t{1}, rows - 1}) {
      ASSERT_EQ(pi.Inverse(pi(id)), id);
      images.insert(pi(id));
    }
    EXPECT_EQ(images.size(), 3u);  // injective on these
  }
  EXPECT_THROW(RowPermutation(1, 0), InvalidArgument);
  EXPECT_THROW(RowPermutation(1, kMaxPermutedRows + 1), InvalidArgument);
}

TEST(RowPermutation, SeedsAgreeAndDiffer) {
  const RowPermutation a(7, 100000), b(7, 100000), c(8, 100000);
  int same = 0;
  for (int64_t id = 0; id < 1000; ++id) {
    ASSERT_EQ(a(id), b(id));
    same += a(id) == c(id) ? 1 : 0;
  }
  EXPECT_LT(same, 5);
  EXPECT_EQ(a, b);
  EXPECT_FALSE(a == c);
}

// Balance of the owner built on it, whatever the skew: per-server push
// bytes (every occurrence) and pull rows (the union), max / mean. Zipf(1.1)
// ids over 20,000 rows, 8 ranks x 400 rows each (the trace analyzer's
// workload, whose bound for ZEN's hash is 1.15), plus contiguous and
// strided id sets.
double MaxOverMean(const std::map<int, double>& m, int n) {
  double mx = 0, total = 0;
  for (int s = 0; s < n; ++s) {
    const auto it = m.find(s);
    const double v = it == m.end() ? 0 : it->second;
    mx = std::max(mx, v);
    total += v;
  }
  return mx / (total / n);
}

TEST(RowPermutation, OwnerBalancesZipfContiguousAndStridedIds) {
  const int n = 8;
  const int64_t rows = 20000;
  std::mt19937_64 rng(3);
  // Zipf(1.1) by inverse CDF over ranks 1..rows, rank r -> id r - 1.
  std::vector<double> cdf(static_cast<size_t>(rows));
  double z = 0;
  for (int64_t r = 0; r < rows; ++r) cdf[static_cast<size_t>(r)] = z += std::pow(r + 1.0, -1.1);
  std::uniform_real_distribution<double> u(0, z);
  for (uint64_t seed : {77ULL, 5ULL, 0x5EEDULL}) {
    const RowOwner owner = RowOwner::Permuted(seed, rows, n);
    std::map<int, double> push, pull;
    std::set<int64_t> all;
    for (int rank = 0; rank < n; ++rank) {
      std::set<int64_t> mine;
      while (mine.size() < 400) {
        mine.insert(std::lower_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin());
      }
      for (int64_t id : mine) push[owner(id)] += 16 * 4 + 8, all.insert(id);
    }
    for (int64_t id : all) pull[owner(id)] += 1;
    EXPECT_LT(MaxOverMean(push, n), 1.15) << "seed " << seed;
    EXPECT_LT(MaxOverMean(pull, n), 1.15) << "seed " << seed;
    // The first 10% of ids, and every 8th id: near-even too.
    std::map<int, double> head, strided;
    for (int64_t id = 0; id < rows / 10; ++id) head[owner(id)] += 1;
    for (int64_t id = 0; id < rows; id += 8) strided[owner(id)] += 1;
    EXPECT_LT(MaxOverMean(head, n), 1.15);
    EXPECT_LT(MaxOverMean(strided, n), 1.15);
  }
}

}  // namespace
}  // namespace zen

namespace zen {
namespace {

// The batched network (AVX2 or not, whichever this CPU runs) equals
// operator() and Inverse row by row, keeps the bits below the key, and handles counts that are not
// a multiple of its group of 16 words.
TEST(RowPermutation, BatchedForwardAndInverseEqualTheScalarOnesAndKeepTheLowBits) {
  std::mt19937_64 rng(7);
  // Row counts just above a power of two (half the network's results walk
  // their cycle), between (714,120: a third), and at one; counts across the
  // batched path's blocks of 1024 words and its groups of sixteen.
  for (const int64_t rows : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{1000}, int64_t{4096},
                             int64_t{4097}, int64_t{714120}, (int64_t{1} << 20) + 1,
                             int64_t{4100000}, (int64_t{1} << 32) - 5, int64_t{1} << 32}) {
    const RowPermutation pi(rng(), rows);
    for (const size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{15},
                               size_t{16}, size_t{17}, size_t{1001}, size_t{1024}, size_t{1040},
                               size_t{3077}}) {
      std::vector<uint64_t> words(count);
      for (uint64_t& w : words) {
        w = (rng() % static_cast<uint64_t>(rows)) << 32 | (rng() & 0xffffffffu);
      }
      std::vector<uint64_t> got = words, fwd = words;
      pi.InverseInPlace(got, 32);
      pi.ForwardInPlace(fwd, 32);
      for (size_t i = 0; i < count; ++i) {
        const auto key = static_cast<int64_t>(words[i] >> 32);
        ASSERT_EQ(static_cast<int64_t>(got[i] >> 32), pi.Inverse(key)) << "rows " << rows;
        ASSERT_EQ(static_cast<int64_t>(fwd[i] >> 32), pi(key)) << "rows " << rows;
        ASSERT_EQ(got[i] & 0xffffffffu, words[i] & 0xffffffffu);
        ASSERT_EQ(fwd[i] & 0xffffffffu, words[i] & 0xffffffffu);
      }
    }
  }
  // shift 0: whole words are keys, up to the largest rows.
  const RowPermutation big(99, kMaxPermutedRows);
  std::vector<uint64_t> keys(333);
  for (uint64_t& k : keys) k = rng() % static_cast<uint64_t>(kMaxPermutedRows);
  std::vector<uint64_t> got = keys;
  big.InverseInPlace(got, 0);
  std::vector<uint64_t> back = got;
  big.ForwardInPlace(back, 0);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(static_cast<int64_t>(got[i]), big.Inverse(static_cast<int64_t>(keys[i])));
    ASSERT_EQ(big(static_cast<int64_t>(got[i])), static_cast<int64_t>(keys[i]));
    ASSERT_EQ(back[i], keys[i]);
  }
}

}  // namespace
}  // namespace zen
