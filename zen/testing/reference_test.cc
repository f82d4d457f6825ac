// DenseReference, the check every scheme's result (and `zen bench`'s) is
// compared with: against a dense double scatter done here by hand, on exact,
// perturbed, incomplete, over-complete, NaN / Inf and wrongly shaped
// results, sparse and dense; memory proportional to the non-zeros (tables of
// 2^40 and 2^61 rows).
#include "zen/testing/reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "zen/core/error.h"
#include "zen/core/reduce.h"

namespace zen {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<SparseTensor> RandomInputs(int ranks, int64_t rows, int64_t width, int nnz, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> id(0, rows - 1);
  std::uniform_real_distribution<float> v(-1, 1);
  std::vector<SparseTensor> out;
  for (int r = 0; r < ranks; ++r) {
    std::vector<int64_t> ids;
    std::vector<float> vals;
    for (int i = 0; i < nnz; ++i) {
      ids.push_back(id(rng));
      for (int64_t j = 0; j < width; ++j) vals.push_back(v(rng));
    }
    out.push_back(SparseTensor::FromCoo(rows, width, ids, vals, Duplicates::kSum));
  }
  return out;
}

// The expected verdict, computed here over dense [rows x width] arrays (the
// tests' shapes are small): the inputs scattered and summed in double, in
// input order; an element's error is |got - want|, except that NaN matches
// only NaN and an infinity only the same infinity; a row is mismatched when
// it is present in exactly one of result and sum (dense results: when it is
// absent from the sum but non-zero in the result).
class ByHand {
 public:
  explicit ByHand(const std::vector<SparseTensor>& inputs)
      : rows_(static_cast<size_t>(inputs[0].rows())), w_(static_cast<size_t>(inputs[0].width())) {
    sum_.assign(rows_ * w_, 0.0);
    present_.assign(rows_, false);
    for (const SparseTensor& t : inputs) {
      for (size_t i = 0; i < t.nnz(); ++i) {
        const auto r = static_cast<size_t>(t.ids()[i]);
        present_[r] = true;
        for (size_t j = 0; j < w_; ++j) sum_[r * w_ + j] += t.values()[i * w_ + j];
      }
    }
    for (double v : sum_) {
      if (std::isfinite(v)) max_abs_ = std::max(max_abs_, std::fabs(v));
    }
  }

  int64_t present_rows() const { return std::count(present_.begin(), present_.end(), true); }

  Agreement Sparse(const SparseTensor& got) const {
    std::vector<double> dense(rows_ * w_, 0.0);
    std::vector<bool> has(rows_, false);
    for (size_t i = 0; i < got.nnz(); ++i) {
      const auto r = static_cast<size_t>(got.ids()[i]);
      has[r] = true;
      for (size_t j = 0; j < w_; ++j) dense[r * w_ + j] = got.values()[i * w_ + j];
    }
    Agreement a;
    double err = 0;
    for (size_t r = 0; r < rows_; ++r) {
      if (has[r] != present_[r]) ++a.rows_mismatch;
      for (size_t j = 0; j < w_; ++j) err = std::max(err, Error(dense[r * w_ + j], sum_[r * w_ + j]));
    }
    a.max_rel_error = max_abs_ > 0 ? err / max_abs_ : err;
    return a;
  }

  Agreement Dense(const std::vector<float>& got) const {
    Agreement a;
    double err = 0;
    for (size_t r = 0; r < rows_; ++r) {
      bool nonzero = false;
      for (size_t j = 0; j < w_; ++j) {
        nonzero = nonzero || got[r * w_ + j] != 0.0f;
        err = std::max(err, Error(got[r * w_ + j], sum_[r * w_ + j]));
      }
      if (nonzero && !present_[r]) ++a.rows_mismatch;
    }
    a.max_rel_error = max_abs_ > 0 ? err / max_abs_ : err;
    return a;
  }

 private:
  static double Error(double got, double want) {
    if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want) ? 0 : INFINITY;
    if (std::isinf(got) || std::isinf(want)) return got == want ? 0 : INFINITY;
    return std::fabs(got - want);
  }

  size_t rows_, w_;
  std::vector<double> sum_;
  std::vector<bool> present_;
  double max_abs_ = 0;
};

void ExpectSame(const Agreement& got, const Agreement& want) {
  EXPECT_EQ(got.rows_mismatch, want.rows_mismatch);
  if (std::isnan(want.max_rel_error)) {
    EXPECT_TRUE(std::isnan(got.max_rel_error));
  } else if (std::isinf(want.max_rel_error)) {
    EXPECT_EQ(got.max_rel_error, want.max_rel_error);
  } else {
    EXPECT_NEAR(got.max_rel_error, want.max_rel_error, 1e-12 + 1e-9 * want.max_rel_error);
  }
}

// A result built by hand from (id, values) rows.
SparseTensor Result(int64_t rows, int64_t width, std::vector<int64_t> ids, std::vector<float> vals) {
  return SparseTensor::FromCoo(rows, width, std::move(ids), std::move(vals));
}

TEST(DenseReference, DetectsMissingExtraAndWrongRows) {
  std::vector<SparseTensor> in = {SparseTensor::FromCoo(10, 1, {1, 4}, {1, 2}),
                                  SparseTensor::FromCoo(10, 1, {4}, {-2})};
  const DenseReference ref(in);
  EXPECT_EQ(ref.present_rows(), 2);
  EXPECT_EQ(ref.Compare(SumAll(in)).rows_mismatch, 0);
  EXPECT_EQ(ref.Compare(SumAll(in)).max_rel_error, 0);
  // Row 4 cancelled to zero but must still be present.
  EXPECT_EQ(ref.Compare(SparseTensor::FromCoo(10, 1, {1}, {1})).rows_mismatch, 1);
  // An invented row.
  EXPECT_EQ(ref.Compare(SparseTensor::FromCoo(10, 1, {1, 4, 7}, {1, 0, 0})).rows_mismatch, 1);
  // A wrong value: relative to max |ref| = 1.
  EXPECT_NEAR(ref.Compare(SparseTensor::FromCoo(10, 1, {1, 4}, {1.5, 0})).max_rel_error, 0.5, 1e-9);
}

TEST(DenseReference, CompareDenseCountsRowsThatShouldBeZero) {
  std::vector<SparseTensor> in = {SparseTensor::FromCoo(4, 1, {1}, {3})};
  const DenseReference ref(in);
  EXPECT_EQ(ref.CompareDense(std::vector<float>{0, 3, 0, 0}).rows_mismatch, 0);
  EXPECT_EQ(ref.CompareDense(std::vector<float>{0, 3, 1, 0}).rows_mismatch, 1);
}

// Random inputs of 1 to 5 ranks: the same verdict as the dense scatter on
// exact, perturbed, incomplete and over-complete results, NaN, infinity,
// another shape and an empty result.
TEST(DenseReference, AgreesWithADenseScatter) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(seed);
    const int64_t rows = 50 + seed * 7, width = 1 + seed % 4;
    const auto inputs = RandomInputs(1 + static_cast<int>(seed % 5), rows, width, 3 + static_cast<int>(seed), seed);
    const DenseReference ref(inputs);
    const ByHand hand(inputs);
    ASSERT_EQ(ref.present_rows(), hand.present_rows());

    SparseTensor exact = SumAll(inputs);
    ExpectSame(ref.Compare(exact), hand.Sparse(exact));
    EXPECT_EQ(ref.Compare(exact).rows_mismatch, 0);
    EXPECT_LE(ref.Compare(exact).max_rel_error, 1e-6);

    std::vector<int64_t> ids(exact.ids().begin(), exact.ids().end());
    std::vector<float> vals(exact.values().begin(), exact.values().end());
    // One value off.
    auto off = vals;
    off[vals.size() / 2] += 0.5f;
    ExpectSame(ref.Compare(Result(rows, width, ids, off)), hand.Sparse(Result(rows, width, ids, off)));
    // One row missing.
    auto fewer_ids = ids;
    auto fewer_vals = vals;
    fewer_ids.erase(fewer_ids.begin());
    fewer_vals.erase(fewer_vals.begin(), fewer_vals.begin() + width);
    const auto fewer = Result(rows, width, fewer_ids, fewer_vals);
    ExpectSame(ref.Compare(fewer), hand.Sparse(fewer));
    EXPECT_EQ(ref.Compare(fewer).rows_mismatch, 1);
    // One row too many (an id no rank has).
    for (int64_t extra = 0; extra < rows; ++extra) {
      if (std::binary_search(ids.begin(), ids.end(), extra)) continue;
      auto more_ids = ids;
      auto more_vals = vals;
      more_ids.push_back(extra);
      more_vals.insert(more_vals.end(), static_cast<size_t>(width), 0.25f);
      const auto more = Result(rows, width, more_ids, more_vals);
      ExpectSame(ref.Compare(more), hand.Sparse(more));
      EXPECT_EQ(ref.Compare(more).rows_mismatch, 1);
      break;
    }
    // A NaN, an infinity.
    auto nan = vals;
    nan[0] = NAN;
    ExpectSame(ref.Compare(Result(rows, width, ids, nan)), hand.Sparse(Result(rows, width, ids, nan)));
    auto inf = vals;
    inf[0] = INFINITY;
    ExpectSame(ref.Compare(Result(rows, width, ids, inf)), hand.Sparse(Result(rows, width, ids, inf)));
    // Another shape: every row mismatched, an infinite error.
    const SparseTensor wrong = SparseTensor::FromCoo(rows + 1, width, {}, {});
    EXPECT_EQ(ref.Compare(wrong).rows_mismatch, hand.present_rows());
    EXPECT_EQ(ref.Compare(wrong).max_rel_error, INFINITY);
    // An empty result.
    const SparseTensor empty = SparseTensor::FromCoo(rows, width, {}, {});
    ExpectSame(ref.Compare(empty), hand.Sparse(empty));
  }
}

// The dense form (zen bench --output dense): the same verdict as the dense
// scatter on exact, perturbed, missing, extra, NaN and wrongly sized results.
TEST(DenseReference, DenseResultsAgreeWithADenseScatter) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(seed);
    const int64_t rows = 50 + seed * 7, width = 1 + seed % 4;
    const auto inputs = RandomInputs(1 + static_cast<int>(seed % 5), rows, width, 3 + static_cast<int>(seed), seed);
    const DenseReference ref(inputs);
    const ByHand hand(inputs);
    const std::vector<float> exact = SumAll(inputs).ToDense();
    ExpectSame(ref.CompareDense(exact), hand.Dense(exact));
    EXPECT_EQ(ref.CompareDense(exact).rows_mismatch, 0);
    EXPECT_LE(ref.CompareDense(exact).max_rel_error, 1e-6);
    const size_t w = static_cast<size_t>(width);
    const int64_t first = SumAll(inputs).ids()[0];
    auto off = exact;
    off[static_cast<size_t>(first) * w] += 0.5f;
    ExpectSame(ref.CompareDense(off), hand.Dense(off));
    auto missing = exact;  // a present row zeroed
    std::fill_n(missing.begin() + static_cast<std::ptrdiff_t>(first * width), width, 0.0f);
    ExpectSame(ref.CompareDense(missing), hand.Dense(missing));
    for (int64_t extra = 0; extra < rows; ++extra) {  // a row no rank has, non-zero
      if (exact[static_cast<size_t>(extra) * w] != 0.0f) continue;
      const auto ids = SumAll(inputs).ids();
      if (std::binary_search(ids.begin(), ids.end(), extra)) continue;
      auto more = exact;
      more[static_cast<size_t>(extra) * w] = 0.25f;
      ExpectSame(ref.CompareDense(more), hand.Dense(more));
      EXPECT_EQ(ref.CompareDense(more).rows_mismatch, 1);
      break;
    }
    auto nan = exact;
    nan[static_cast<size_t>(first) * w] = NAN;
    ExpectSame(ref.CompareDense(nan), hand.Dense(nan));
    // A buffer of another size: every present row mismatched, an infinite error.
    const std::vector<float> shorter(exact.size() - 1);
    EXPECT_EQ(ref.CompareDense(shorter).rows_mismatch, hand.present_rows());
    EXPECT_EQ(ref.CompareDense(shorter).max_rel_error, INFINITY);
  }
}

// A fixed case against a dense scatter written out here.
TEST(DenseReference, MatchesADenseScatter) {
  const int64_t rows = 50, width = 3;
  std::vector<SparseTensor> inputs;
  std::vector<double> dense(rows * width, 0.0);
  std::vector<bool> present(rows, false);
  for (int k = 0; k < 4; ++k) {
    std::vector<int64_t> ids;
    std::vector<float> values;
    for (int64_t r = k; r < rows; r += 3 + k) {
      ids.push_back(r);
      present[r] = true;
      for (int64_t j = 0; j < width; ++j) {
        values.push_back(static_cast<float>(r * 0.5 - j + k));
        dense[r * width + j] += r * 0.5 - j + k;
      }
    }
    inputs.push_back(SparseTensor::FromCoo(rows, width, ids, values));
  }
  const DenseReference ref(inputs);
  std::vector<int64_t> ids;
  std::vector<float> values;
  std::vector<float> as_dense(rows * width, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    if (!present[r]) continue;
    ids.push_back(r);
    for (int64_t j = 0; j < width; ++j) {
      values.push_back(static_cast<float>(dense[r * width + j]));
      as_dense[r * width + j] = static_cast<float>(dense[r * width + j]);
    }
  }
  EXPECT_EQ(ref.present_rows(), static_cast<int64_t>(ids.size()));
  const Agreement a = ref.Compare(SparseTensor::FromSorted(rows, width, ids, values));
  EXPECT_EQ(a.rows_mismatch, 0);
  EXPECT_LE(a.max_rel_error, 1e-6);
  const Agreement d = ref.CompareDense(as_dense);
  EXPECT_EQ(d.rows_mismatch, 0);
  EXPECT_LE(d.max_rel_error, 1e-6);
  as_dense[1 * width] = 5.0f;  // row 1 is absent in every input
  EXPECT_EQ(ref.CompareDense(as_dense).rows_mismatch, present[1] ? 0 : 1);
}

// Rows 2^61 x width 2 with a few ids are checked without rows x width
// doubles (issue 13: a dense table died of vector::_M_fill_insert /
// bad_alloc).
TEST(DenseReference, ReferenceIsProportionalToTheNonZeros) {
  const int64_t rows = int64_t{1} << 61;
  const std::vector<SparseTensor> inputs = {
      SparseTensor::FromCoo(rows, 2, {0, rows - 1}, {1, 2, 3, 4}),
      SparseTensor::FromCoo(rows, 2, {rows - 1, 7}, {10, 20, 30, 40})};
  const DenseReference ref(inputs);
  EXPECT_EQ(ref.present_rows(), 3);
  const SparseTensor right = SparseTensor::FromCoo(rows, 2, {0, 7, rows - 1}, {1, 2, 30, 40, 13, 24});
  EXPECT_EQ(ref.Compare(right).rows_mismatch, 0);
  EXPECT_LE(ref.Compare(right).max_rel_error, 1e-12);
  // A lost row, an invented row and a wrong value are each seen.
  const SparseTensor lost = SparseTensor::FromCoo(rows, 2, {0, 7}, {1, 2, 30, 40});
  EXPECT_EQ(ref.Compare(lost).rows_mismatch, 1);
  EXPECT_GT(ref.Compare(lost).max_rel_error, 0.5);
  const SparseTensor invented =
      SparseTensor::FromCoo(rows, 2, {0, 7, 9, rows - 1}, {1, 2, 30, 40, 0, 0, 13, 24});
  EXPECT_EQ(ref.Compare(invented).rows_mismatch, 1);
  const SparseTensor wrong = SparseTensor::FromCoo(rows, 2, {0, 7, rows - 1}, {1, 2, 30, 40, 13, 25});
  EXPECT_EQ(ref.Compare(wrong).rows_mismatch, 0);
  EXPECT_NEAR(ref.Compare(wrong).max_rel_error, 1.0 / 40, 1e-12);
  // A dense result of a huge shape cannot exist: a mismatch, not a crash.
  std::vector<float> four(4);
  EXPECT_EQ(ref.CompareDense(four).rows_mismatch, 3);
}

TEST(DenseReference, MemoryFollowsNonZerosNotRows) {
  // 2^40 rows: a dense table would need 2^40 x 4 doubles (32 TiB).
  const int64_t rows = int64_t{1} << 40;
  const std::vector<SparseTensor> inputs = {
      SparseTensor::FromCoo(rows, 4, {0, rows - 1}, {1, 2, 3, 4, 5, 6, 7, 8}),
      SparseTensor::FromCoo(rows, 4, {rows - 1}, {1, 1, 1, 1})};
  const DenseReference ref(inputs);
  EXPECT_EQ(ref.present_rows(), 2);
  const SparseTensor good = SparseTensor::FromCoo(rows, 4, {0, rows - 1}, {1, 2, 3, 4, 6, 7, 8, 9});
  EXPECT_EQ(ref.Compare(good).rows_mismatch, 0);
  EXPECT_EQ(ref.Compare(good).max_rel_error, 0);
  const SparseTensor bad = SparseTensor::FromCoo(rows, 4, {rows - 1}, {6, 7, 8, 9});
  EXPECT_EQ(ref.Compare(bad).rows_mismatch, 1);
  EXPECT_NEAR(ref.Compare(bad).max_rel_error, 4.0 / 9.0, 1e-12);
}

TEST(DenseReference, ShapesMustAgree) {
  const std::vector<SparseTensor> inputs = {SparseTensor::FromCoo(10, 2, {}, {}),
                                            SparseTensor::FromCoo(11, 2, {}, {})};
  EXPECT_THROW(DenseReference ref(inputs), MismatchError);
}

// The reference must see NaN and Inf: every NaN/Inf propagation test of the
// schemes relies on it telling a NaN from a finite value.
SparseTensor Row(int64_t id, float a, float b) { return SparseTensor::FromCoo(4, 2, {id}, {a, b}); }

TEST(DenseReference, NaNWhereTheSumIsFiniteIsAnError) {
  const std::vector<SparseTensor> inputs = {Row(1, 1, 2), Row(1, 3, 4)};
  const DenseReference ref(inputs);
  const Agreement a = ref.Compare(Row(1, kNaN, 6));
  EXPECT_FALSE(a.max_rel_error <= 1e-5) << a.max_rel_error;
  std::vector<float> dense = Row(1, 4, kNaN).ToDense();
  EXPECT_FALSE(ref.CompareDense(dense).max_rel_error <= 1e-5);
}

TEST(DenseReference, FiniteWhereTheSumIsNaNIsAnError) {
  const std::vector<SparseTensor> inputs = {Row(2, kNaN, 2), Row(2, 3, 4)};
  const DenseReference ref(inputs);
  EXPECT_FALSE(ref.Compare(Row(2, 3, 6)).max_rel_error <= 1e-5);
  EXPECT_LE(ref.Compare(Row(2, kNaN, 6)).max_rel_error, 1e-5);
  // A missing row whose sum is NaN is an error in value as well as in rows.
  const Agreement missing = ref.Compare(SparseTensor::Empty(4, 2));
  EXPECT_EQ(missing.rows_mismatch, 1);
  EXPECT_FALSE(missing.max_rel_error <= 1e-5);
}

TEST(DenseReference, InfinitiesMustMatchInSign) {
  const std::vector<SparseTensor> inputs = {Row(0, kInf, 1), Row(0, 1, -kInf), Row(3, kInf, 0),
                                            Row(3, -kInf, 0)};
  const DenseReference ref(inputs);
  const SparseTensor right = SparseTensor::FromCoo(4, 2, {0, 3}, {kInf, -kInf, kNaN, 0});
  EXPECT_LE(ref.Compare(right).max_rel_error, 1e-5);
  EXPECT_EQ(ref.Compare(right).rows_mismatch, 0);
  const SparseTensor wrong_sign = SparseTensor::FromCoo(4, 2, {0, 3}, {-kInf, -kInf, kNaN, 0});
  EXPECT_FALSE(ref.Compare(wrong_sign).max_rel_error <= 1e-5);
  const SparseTensor inf_for_nan = SparseTensor::FromCoo(4, 2, {0, 3}, {kInf, -kInf, kInf, 0});
  EXPECT_FALSE(ref.Compare(inf_for_nan).max_rel_error <= 1e-5);
  EXPECT_LE(ref.CompareDense(right.ToDense()).max_rel_error, 1e-5);
}

}  // namespace
}  // namespace zen
