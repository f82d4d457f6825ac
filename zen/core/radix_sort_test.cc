#include "zen/core/radix_sort.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

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
                                std::pair{70000, 32}, std::pair{4096, 1}}) {
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

}  // namespace
}  // namespace zen
