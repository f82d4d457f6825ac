#include "zen/core/radix_sort.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <span>
#include <tuple>

namespace zen {
namespace {

// Reference: std::stable_sort on the same key bits.
std::vector<uint64_t> Reference(std::vector<uint64_t> v, int shift, int bits) {
  const uint64_t mask = ((uint64_t{1} << bits) - 1) << shift;
  std::stable_sort(v.begin(), v.end(), [&](uint64_t a, uint64_t b) { return (a & mask) < (b & mask); });
  return v;
}

TEST(SortWordsByBits, MatchesStableSortOnIdAboveValueWords) {
  std::mt19937_64 rng(7);
  std::vector<uint64_t> scratch;
  // Short lists (the merge-sort fallback: one run, several, a partial last
  // one) and long ones (radix).
  for (const auto& [n, bits] : {std::pair{10, 5}, std::pair{32, 3}, std::pair{33, 3},
                                std::pair{100, 4}, std::pair{700, 6}, std::pair{1000, 20},
                                std::pair{5000, 12}, std::pair{300000, 22},
                                std::pair{100000, 23}, std::pair{100000, 24},
                                std::pair{100000, 25}, std::pair{70000, 32},
                                std::pair{4096, 1}}) {
    std::vector<uint64_t> v(static_cast<size_t>(n));
    const uint64_t bound = uint64_t{1} << bits;
    // Duplicate keys too (stability decides their order).
    for (auto& x : v) x = (rng() % bound) << 32 | (rng() & 0xffffffffu);
    const std::vector<uint64_t> want = Reference(v, 32, bits);
    SortWordsByBits(v, scratch, 32, bits);
    EXPECT_EQ(v, want) << "n " << n << " bits " << bits;
  }
}

TEST(SortWordsByBits, AllKeysEqualAndEmpty) {
  std::vector<uint64_t> scratch, empty;
  SortWordsByBits(empty, scratch, 32, 20);
  std::vector<uint64_t> v(5000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = uint64_t{77} << 32 | (v.size() - i);
  const std::vector<uint64_t> want = v;  // stable: unchanged
  SortWordsByBits(v, scratch, 32, 20);
  EXPECT_EQ(v, want);
}

// Key above an index that increases in input order (zen's row words): the
// order is the stable sort by key, short lists and long ones alike, with
// duplicate keys.
TEST(SortWordsByBits, MatchesStableSortOnKeyAboveIndexWords) {
  std::mt19937_64 rng(11);
  std::vector<uint64_t> scratch;
  for (const auto& [n, bits] : {std::pair{0, 3}, std::pair{1, 3}, std::pair{700, 6},
                                std::pair{1023, 20}, std::pair{1024, 20}, std::pair{50000, 20},
                                std::pair{50000, 4}}) {
    std::vector<uint64_t> v(static_cast<size_t>(n));
    const uint64_t bound = uint64_t{1} << bits;
    for (size_t i = 0; i < v.size(); ++i) v[i] = (rng() % bound) << 32 | i;
    const std::vector<uint64_t> want = Reference(v, 32, bits);
    SortWordsByBits(v, scratch, 32, bits);
    EXPECT_EQ(v, want) << "n " << n << " bits " << bits;
  }
}

// Added in parts of uneven sizes (as pull messages arrive, empty ones too),
// every index emitted once, in the stable sort's order: one, two and three
// passes (22 bits are two digits of 11, 24 two of 12, 25 three of 9), the
// first pass made by Add (a few parts of many words) or by Sort (more parts
// than the bucket starts allow, or a first part of few words), keys of one
// bucket on a digit, duplicates, none.
TEST(IncrementalWordSort, EmitsTheStableSortsOrder) {
  std::mt19937_64 rng(13);
  std::vector<uint64_t> scratch;
  IncrementalWordSort sort;
  for (const size_t parts : {size_t{1}, size_t{8}, size_t{300}}) {
    for (const auto& [n, bits, shift] :
         {std::tuple{0, 20, 32}, std::tuple{1, 20, 32}, std::tuple{2000, 1, 32},
          std::tuple{5000, 12, 32}, std::tuple{5000, 13, 32}, std::tuple{300000, 22, 32},
          std::tuple{100000, 24, 32}, std::tuple{100000, 25, 32}, std::tuple{70000, 32, 32},
          std::tuple{30000, 20, 0}}) {
      std::vector<uint64_t> v(static_cast<size_t>(n));
      const uint64_t bound = uint64_t{1} << bits;
      const uint64_t payload = shift == 0 ? 0 : (uint64_t{1} << shift) - 1;
      for (auto& x : v) x = (rng() % bound) << shift | (rng() & payload);
      const std::vector<uint64_t> want = Reference(v, shift, bits);
      sort.Reset(shift, bits, parts);
      // Parts of random sizes, the last taking the rest.
      for (size_t q = 0, at = 0; q < parts; ++q) {
        const size_t random = static_cast<size_t>(rng() % (2 * n / parts + 2));
        const size_t part = q + 1 == parts ? v.size() - at : std::min(v.size() - at, random);
        sort.Add(std::span<const uint64_t>(v).subspan(at, part));
        at += part;
      }
      ASSERT_EQ(sort.size(), v.size());
      std::vector<uint64_t> got(v.size(), ~uint64_t{0});
      size_t emitted = 0;
      sort.Sort(scratch, [&](size_t i, uint64_t x) {
        ASSERT_LT(i, got.size());
        ASSERT_EQ(got[i], ~uint64_t{0}) << "index " << i << " emitted twice";
        got[i] = x;
        ++emitted;
      });
      EXPECT_EQ(emitted, v.size());
      EXPECT_EQ(got, want) << "n " << n << " bits " << bits << " shift " << shift << " parts "
                           << parts;
    }
  }
  // Every key in one bucket of the low digit, spread on the high one; then
  // every key equal (no pass moves a word: emitted in input order).
  for (const uint64_t step : {uint64_t{1} << 11, uint64_t{0}}) {
    std::vector<uint64_t> v(6000);
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = ((7 + step * (rng() % 1000)) % (uint64_t{1} << 22)) << 32 | i;
    }
    const std::vector<uint64_t> want = Reference(v, 32, 22);
    for (const size_t parts : {size_t{1}, size_t{3}}) {
      sort.Reset(32, 22, parts);
      for (size_t q = 0; q < parts; ++q) {
        sort.Add(std::span<const uint64_t>(v).subspan(q * 2000 * (3 / parts),
                                                      v.size() / parts));
      }
      std::vector<uint64_t> got(v.size());
      sort.Sort(scratch, [&](size_t i, uint64_t x) { got[i] = x; });
      EXPECT_EQ(got, want) << "step " << step << " parts " << parts;
    }
  }
}

// Distinct keys (zen's pulled ids), the case the bitmap ranks: keys of 13
// to 26 bits (every width that sorts by bucket), at densities that give
// buckets of a few words (insertion sorts, some of more than 16: merge
// sorts) and of hundreds (bitmaps), and the same keys with one repeated
// (its bucket merge sorted, stably), in one part and in eight.
TEST(IncrementalWordSort, DistinctKeysRankedByBucket) {
  std::mt19937_64 rng(17);
  std::vector<uint64_t> scratch;
  IncrementalWordSort sort;
  for (const int bits : {13, 16, 22, 24, 26}) {
    const uint64_t bound = uint64_t{1} << bits;
    // One key in 1024, 64 and 4 of the key space.
    for (const uint64_t every : {uint64_t{1024}, uint64_t{64}, uint64_t{4}}) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(bound / every, 600000));
      std::vector<uint64_t> keys;
      for (uint64_t k = 0; k < bound && keys.size() < n; k += 1 + rng() % (bound / n)) {
        keys.push_back(k);
      }
      std::shuffle(keys.begin(), keys.end(), rng);
      for (const bool repeat : {false, true}) {
        std::vector<uint64_t> v(keys.size());
        for (size_t i = 0; i < v.size(); ++i) v[i] = keys[i] << 32 | i;
        if (repeat) v.back() = keys[v.size() / 2] << 32 | (v.size() - 1);
        const std::vector<uint64_t> want = Reference(v, 32, bits);
        for (const size_t parts : {size_t{1}, size_t{8}}) {
          sort.Reset(32, bits, parts);
          for (size_t q = 0; q < parts; ++q) {
            const size_t at = q * v.size() / parts, end = (q + 1) * v.size() / parts;
            sort.Add(std::span<const uint64_t>(v).subspan(at, end - at));
          }
          std::vector<uint64_t> got(v.size(), ~uint64_t{0});
          sort.Sort(scratch, [&](size_t i, uint64_t x) { got[i] = x; });
          EXPECT_EQ(got, want) << "bits " << bits << " n " << v.size() << " repeat " << repeat
                               << " parts " << parts;
        }
      }
    }
  }
}

TEST(IncrementalWordSort, MorePartsThanAnnouncedAreAnError) {
  IncrementalWordSort sort;
  const std::vector<uint64_t> v = {3, 1, 2};
  sort.Reset(0, 4, 2);
  sort.Add(v);
  sort.Add(v);
  EXPECT_THROW(sort.Add(v), InvalidArgument);
}
}  // namespace
}  // namespace zen
