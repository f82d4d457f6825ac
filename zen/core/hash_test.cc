#include "zen/core/hash.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "zen/core/error.h"

namespace zen {
namespace {

// Independent slow evaluation of the polynomial: sum c_i x^i mod p with
// 128-bit '%' instead of the Mersenne shortcut.
uint64_t SlowPoly(const std::vector<uint64_t>& c, uint64_t x) {
  unsigned __int128 acc = 0, pow = 1;
  for (uint64_t ci : c) {
    acc = (acc + static_cast<unsigned __int128>(ci) * pow) % kHashPrime;
    pow = (pow * x) % kHashPrime;
  }
  return static_cast<uint64_t>(acc);
}

// Recovers the coefficients of a degree-(k-1) hash from k values (Lagrange
// would do; for a line two points suffice: h(0) = c0, h(1) - h(0) = c1).
TEST(UniversalHash, LineMatchesSlowEvaluation) {
  for (uint64_t seed : {0ULL, 1ULL, 42ULL, 0xdeadbeefULL}) {
    const UniversalHash h(seed, 2);
    const uint64_t c0 = h.Raw(0);
    const uint64_t c1 = (h.Raw(1) + kHashPrime - c0) % kHashPrime;
    EXPECT_NE(c1, 0u);
    std::mt19937_64 rng(seed);
    for (int i = 0; i < 1000; ++i) {
      const uint64_t x = rng() % kHashPrime;
      EXPECT_EQ(h.Raw(x), SlowPoly({c0, c1}, x)) << "x=" << x;
    }
  }
}

TEST(UniversalHash, CubicIsAPolynomialOfDegreeThree) {
  // Fourth finite difference of a cubic is zero; third is constant.
  const UniversalHash h(7, 4);
  auto diff = [&](uint64_t x, int order) {
    // sum_{j} (-1)^(order-j) C(order, j) h(x + j) mod p
    static const int64_t binom[5][5] = {{1}, {1, 1}, {1, 2, 1}, {1, 3, 3, 1}, {1, 4, 6, 4, 1}};
    unsigned __int128 acc = 0;
    for (int j = 0; j <= order; ++j) {
      const uint64_t v = h.Raw(x + static_cast<uint64_t>(j));
      const unsigned __int128 term =
          static_cast<unsigned __int128>(v) * binom[order][j] % kHashPrime;
      acc = ((order - j) % 2 == 0) ? (acc + term) % kHashPrime
                                   : (acc + kHashPrime - term) % kHashPrime;
    }
    return static_cast<uint64_t>(acc);
  };
  for (uint64_t x : {0ULL, 10ULL, 123456789ULL}) {
    EXPECT_EQ(diff(x, 4), 0u);
    EXPECT_EQ(diff(x, 3), diff(0, 3));
    EXPECT_NE(diff(x, 3), 0u);  // leading coefficient non-zero
  }
}

TEST(UniversalHash, DeterministicPerSeedAndDifferentAcrossSeeds) {
  const UniversalHash a(99, 4), b(99, 4), c(100, 4);
  int same = 0;
  for (uint64_t x = 0; x < 1000; ++x) {
    EXPECT_EQ(a(x, 8), b(x, 8));
    same += a(x, 1000) == c(x, 1000);
  }
  EXPECT_LT(same, 20);  // ~1 expected
  EXPECT_EQ(a, b);
  EXPECT_FALSE(a == c);
}

TEST(UniversalHash, ValuesStayInRange) {
  std::mt19937_64 rng(3);
  for (uint64_t range : {1ULL, 2ULL, 3ULL, 7ULL, 8ULL, 1000ULL, 1ULL << 40}) {
    const UniversalHash h(range, 4);
    for (int i = 0; i < 2000; ++i) {
      const uint64_t x = rng() % kHashPrime;
      EXPECT_LT(h(x, range), range);
      EXPECT_LT(h.Raw(x), kHashPrime);
    }
    EXPECT_LT(h(kHashPrime - 1, range), range);
  }
}

TEST(UniversalHash, RejectsBadIndependence) {
  EXPECT_THROW(UniversalHash(1, 1), InvalidArgument);
  EXPECT_THROW(UniversalHash(1, 5), InvalidArgument);
  EXPECT_THROW(ServerHash(1, 0), InvalidArgument);
}

// max bin / mean bin of the keys under h0 with n servers.
double Imbalance(const ServerHash& h, const std::vector<int64_t>& keys) {
  std::vector<int64_t> bins(static_cast<size_t>(h.servers()), 0);
  for (int64_t k : keys) ++bins[static_cast<size_t>(h(k))];
  const double mean = static_cast<double>(keys.size()) / h.servers();
  return static_cast<double>(*std::max_element(bins.begin(), bins.end())) / mean;
}

TEST(ServerHash, BalancesStructuredKeySets) {
  std::vector<std::vector<int64_t>> sets(4);
  for (int64_t i = 0; i < 100000; ++i) {
    sets[0].push_back(i);                           // contiguous
    sets[1].push_back(i * 1024);                    // strided by a power of two
    sets[2].push_back(i * 8);                       // multiples of n
    sets[3].push_back((int64_t{1} << 40) + i * 7);  // far from zero
  }
  for (uint64_t seed : {1ULL, 2ULL, 3ULL}) {
    for (int n : {2, 3, 8, 16}) {
      const ServerHash h(seed, n);
      for (size_t s = 0; s < sets.size(); ++s) {
        // 100000 / n keys per bin: 5 sigma is < 3% for n = 16.
        EXPECT_LT(Imbalance(h, sets[s]), 1.04) << "seed " << seed << " n " << n << " set " << s;
      }
    }
  }
}

TEST(UniversalHash, PairwiseCollisionRateIsOneOverRange) {
  // Over random seeds, two fixed distinct keys collide with probability
  // ~1/range; 20000 trials at range 64 expect 312 (sigma ~17.5).
  constexpr uint64_t kRange = 64;
  int collisions = 0;
  for (uint64_t seed = 0; seed < 20000; ++seed) {
    const UniversalHash h(DeriveSeed(11, seed), 2);
    collisions += h(12345, kRange) == h(12346, kRange);
  }
  EXPECT_GT(collisions, 220);
  EXPECT_LT(collisions, 410);
}

TEST(DeriveSeed, DistinctMembers) {
  std::set<uint64_t> seen;
  for (uint64_t i = 0; i < 1000; ++i) seen.insert(DeriveSeed(5, i));
  EXPECT_EQ(seen.size(), 1000u);
}

// The published FNV-1a 64 test vectors (Fowler, Noll, Vo; draft-eastlake-fnv)
// from the published offset basis; the default basis is zen's.
TEST(Fnv1a, MatchesPublishedVectors) {
  constexpr uint64_t kPublished = 0xcbf29ce484222325ULL;
  EXPECT_EQ(Fnv1a("", kPublished), 0xcbf29ce484222325ULL);
  EXPECT_EQ(Fnv1a("a", kPublished), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(Fnv1a("foobar", kPublished), 0x85944171f73967e8ULL);
  EXPECT_EQ(Fnv1a(""), 1469598103934665603ULL);
  EXPECT_EQ(Fnv1a("bar", Fnv1a("foo")), Fnv1a("foobar"));  // continues from h
}

}  // namespace
}  // namespace zen
