// The synthetic generator: O(non-zeros) memory at any row count (2^31 and
// 2^40 rows at a few non-zeros), and the same law as weighted sampling
// without replacement by explicit keys over every row (the reference here,
// written out independently), for Zipf skew and uniform; specs with numbers
// beyond int64 and generators beyond memory are zen errors.
#include "zen/workload/synthetic.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <new>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "zen/core/error.h"

namespace zen {
namespace {

using ::testing::HasSubstr;

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

// ---- Spec numbers and shapes near int64 limits (issue 13, item 2): every
// failure is a zen error naming what is wrong; never a wrapped size, UB,
// std::bad_alloc or std::length_error.

template <typename F>
std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  } catch (const std::bad_alloc& e) {
    return std::string("escaped std::bad_alloc: ") + e.what();
  } catch (const std::length_error& e) {
    return std::string("escaped std::length_error: ") + e.what();
  }
  return "";
}

// Before: rows=1e300 and rows=inf went through static_cast<int64_t>(double),
// which is undefined behaviour (UBSan: "outside the range of representable
// values"); the result was whatever the CPU gave (INT64_MIN on x86).
TEST(SyntheticTest, SyntheticNumbersBeyondInt64AreRejected) {
  for (const char* spec : {"zipf:rows=1e300", "zipf:rows=inf", "zipf:rows=-inf",
                           "zipf:rows=9.3e18", "zipf:width=1e19", "zipf:seed=1e20",
                           "zipf:rows=nan"}) {
    EXPECT_THAT(ErrorOf([&] { ParseSyntheticSpec(spec); }), HasSubstr("synthetic")) << spec;
  }
  EXPECT_THAT(ErrorOf([] { ParseSyntheticSpec("zipf:rows=1e300"); }),
              HasSubstr("rows=1e300 is outside the int64 range"));
  // 2^62 x 4 elements: beyond int64.
  EXPECT_THAT(ErrorOf([] { ParseSyntheticSpec("zipf:rows=4611686018427387904,width=4"); }),
              HasSubstr("overflows int64"));
  // The largest values that fit are accepted by the parser.
  EXPECT_EQ(ParseSyntheticSpec("zipf:rows=9223372036854775807,width=1").rows,
            std::numeric_limits<int64_t>::max());
  EXPECT_EQ(ParseSyntheticSpec("zipf:rows=4e18,width=2").rows, int64_t{4000000000000000000});
}

// Before: seed=-1 parsed to 2^64 - 1, which ToString printed and the parser
// then rejected (from_chars into int64 overflowed, the double path cast
// 1.8e19 to int64: UB). Every printed spec parses back to the same spec.
TEST(SyntheticTest, SyntheticSpecsRoundTripThroughToString) {
  for (const char* text : {"zipf:seed=-1", "zipf:seed=18446744073709551615",
                           "zipf:rows=9223372036854775807,width=1,seed=9223372036854775808"}) {
    const SyntheticSpec s = ParseSyntheticSpec(text);
    const SyntheticSpec back = ParseSyntheticSpec(ToString(s));
    EXPECT_EQ(back.seed, s.seed) << text;
    EXPECT_EQ(back.rows, s.rows) << text;
  }
  EXPECT_EQ(ParseSyntheticSpec("zipf:seed=-1").seed, std::numeric_limits<uint64_t>::max());
}

// Generating a spec that cannot fit in memory is a zen error naming rank
// and spec, not std::bad_alloc (rows 2^62 need 2^66 bytes of sampling keys;
// density 1 of 2^62 rows needs 2^65 bytes of ids); and llround(density x
// rows) is never asked for 2^63.
TEST(SyntheticTest, SyntheticGeneratorOutOfMemoryIsAZenError) {
  SyntheticSpec s;
  // Sampling needs memory in proportion to the rows drawn (not to rows):
  // 2^62 x 1e-3 of them cannot fit.
  s.rows = int64_t{1} << 62;
  s.width = 1;
  s.density = 1e-3;
  std::string e = ErrorOf([&] { GenerateSyntheticRank(s, 3); });
  EXPECT_THAT(e, HasSubstr("rank 3, tensor 'synthetic'"));
  EXPECT_THAT(e, HasSubstr("sampling keys"));
  s.density = 1;
  s.rows = std::numeric_limits<int64_t>::max();
  e = ErrorOf([&] { GenerateSyntheticRank(s, 0); });
  EXPECT_THAT(e, HasSubstr("rank 0, tensor 'synthetic'"));
  EXPECT_THAT(e, HasSubstr("ids of every row"));
}

}  // namespace
}  // namespace zen
