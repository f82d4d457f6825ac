#include "zen/core/divider.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace zen {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

// The reference is the hardware division.
void ExpectQuotients(uint64_t d, const std::vector<uint64_t>& xs) {
  const Divider by(d);
  for (const uint64_t x : xs) ASSERT_EQ(by.Div(x), x / d) << "x " << x << " d " << d;
}

// x around multiples of d (where an estimate one short would show), and the ends.
std::vector<uint64_t> Edges(uint64_t d) {
  std::vector<uint64_t> xs = {0, 1, 2, kMax, kMax - 1, kMax / 2, kMax / 2 + 1};
  for (const uint64_t k : {uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{1000}, kMax / d / 2,
                           kMax / d - 1, kMax / d}) {
    if (k == 0 || k > kMax / d) continue;
    const uint64_t m = k * d;
    xs.push_back(m);
    xs.push_back(m - 1);
    if (m < kMax) xs.push_back(m + 1);
  }
  return xs;
}

TEST(Divider, SmallDivisorsAndEveryXBelow5000) {
  std::vector<uint64_t> xs;
  for (uint64_t x = 0; x < 5000; ++x) xs.push_back(x);
  for (uint64_t d = 1; d <= 300; ++d) {
    ExpectQuotients(d, xs);
    ExpectQuotients(d, Edges(d));
  }
}

TEST(Divider, PowersOfTwoTheirNeighboursAndRowCounts) {
  for (int b = 0; b < 64; ++b) {
    const uint64_t p = uint64_t{1} << b;
    for (const uint64_t d : {p - 1, p, p + 1}) {
      if (d == 0) continue;
      ExpectQuotients(d, Edges(d));
    }
  }
  // Typical `rows` and `servers`, and the largest row count RowOwner takes.
  for (const uint64_t d : {uint64_t{4100000}, uint64_t{30000}, uint64_t{714120}, uint64_t{7},
                           uint64_t{1} << 62, kMax, kMax - 1}) {
    ExpectQuotients(d, Edges(d));
  }
}

TEST(Divider, RandomDivisorsAndDividends) {
  std::mt19937_64 rng(20261204);
  for (int i = 0; i < 20000; ++i) {
    // Divisors of every magnitude: a random value shifted right by 0-63 bits.
    const uint64_t d = std::max<uint64_t>(1, rng() >> (rng() % 64));
    std::vector<uint64_t> xs;
    for (int j = 0; j < 20; ++j) xs.push_back(rng() >> (rng() % 64));
    ExpectQuotients(d, xs);
  }
}

}  // namespace
}  // namespace zen
