// The synthetic generator: O(non-zeros) memory at any row count (2^31 and
// 2^40 rows at a few non-zeros), and the same law as weighted sampling
// without replacement by explicit keys over every row (the reference here,
// written out independently), for Zipf skew and uniform.
#include "zen/workload/synthetic.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

namespace zen {
namespace {

void ExpectValid(const SparseTensor& t, int64_t rows, int64_t nnz) {
  EXPECT_EQ(t.rows(), rows);
  ASSERT_EQ(static_cast<int64_t>(t.nnz()), nnz);
  for (size_t i = 0; i < t.ids().size(); ++i) {
    EXPECT_GE(t.ids()[i], 0);
    EXPECT_LT(t.ids()[i], rows);
    if (i > 0) {
      EXPECT_LT(t.ids()[i - 1], t.ids()[i]);
    }
  }
}

TEST(SyntheticTest, HugeRowCountsTakeMemoryInProportionToTheNonZeros) {
  for (const char* text : {"zipf:rows=2147483648,width=64,density=2e-9",
                           "zipf:rows=1099511627776,width=64,density=4.5e-12,skew=1.1",
                           "zipf:rows=1099511627776,width=8,density=4.5e-12,skew=0"}) {
    SCOPED_TRACE(text);
    const SyntheticSpec s = ParseSyntheticSpec(text);
    const int64_t nnz = std::llround(s.density * static_cast<double>(s.rows));
    EXPECT_LT(SyntheticPeakBytes(s), uint64_t{64} << 10);
    const std::vector<SparseTensor> ranks = GenerateSynthetic(s, 4);
    for (const SparseTensor& t : ranks) ExpectValid(t, s.rows, nnz);
    EXPECT_NE(ranks[0].ids()[0], ranks[1].ids()[0]);  // ranks differ
    // A pure function of (spec, rank).
    EXPECT_EQ(GenerateSyntheticRank(s, 2).ids()[0], ranks[2].ids()[0]);
  }
}

// The reference: every row r gets the key Exp(1) / (r + 1)^-skew, the nnz
// smallest win.
std::vector<int64_t> ReferenceSample(int64_t rows, int64_t nnz, double skew, std::mt19937_64& rng) {
  std::exponential_distribution<double> exp1(1.0);
  std::vector<std::pair<double, int64_t>> keys;
  for (int64_t r = 0; r < rows; ++r)
    keys.emplace_back(exp1(rng) * std::pow(static_cast<double>(r + 1), skew), r);
  std::nth_element(keys.begin(), keys.begin() + nnz, keys.end());
  std::vector<int64_t> out;
  for (int64_t i = 0; i < nnz; ++i) out.push_back(keys[static_cast<size_t>(i)].second);
  return out;
}

// Rows drawn in buckets [0, 1), [1, 2), [2, 4), ... [2^k, 2^(k+1)), over many
// seeds: the generator against the reference, each bucket within 4 standard
// deviations of a binomial count (and 8% where the counts are large).
TEST(SyntheticTest, SameLawAsExplicitKeysOverEveryRowForZipfAndUniform) {
  const int64_t rows = 50000, nnz = 40;
  for (double skew : {0.0, 0.8, 1.1, 2.0}) {
    SCOPED_TRACE(skew);
    const int trials = 300;
    std::vector<double> got(18, 0), want(18, 0);
    const auto bucket = [](int64_t r) { return r == 0 ? 0 : 1 + static_cast<int>(std::log2(r)); };
    std::mt19937_64 rng(7);
    for (int t = 0; t < trials; ++t) {
      SyntheticSpec s;
      s.rows = rows;
      s.width = 1;
      s.density = static_cast<double>(nnz) / rows;
      s.skew = skew;
      s.seed = static_cast<uint64_t>(t) + 1;
      const SparseTensor x = GenerateSyntheticRank(s, 0);
      ExpectValid(x, rows, nnz);
      for (int64_t id : x.ids()) got[static_cast<size_t>(bucket(id))] += 1;
      for (int64_t id : ReferenceSample(rows, nnz, skew, rng))
        want[static_cast<size_t>(bucket(id))] += 1;
    }
    for (size_t b = 0; b < got.size(); ++b) {
      const double p = want[b] / (trials * static_cast<double>(nnz));
      const double sd = std::sqrt(trials * static_cast<double>(nnz) * p * (1 - p) * 2) + 1;
      EXPECT_NEAR(got[b], want[b], 4 * sd + 0.08 * want[b]) << "bucket " << b;
    }
    if (skew == 0) {
      // Uniform: the last bucket [32768, 50000) holds 17232 / 50000 of the rows.
      EXPECT_NEAR(got[16] / (trials * nnz), 17232.0 / 50000, 0.02);
    }
  }
}

}  // namespace
}  // namespace zen
