// SparseReference against the independent DenseReference (zen/core/reduce.h):
// the same verdict on exact, perturbed, incomplete and over-complete results,
// and memory proportional to the non-zeros (a table of 2^40 rows).
#include "tools/zen/bench_reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "zen/core/error.h"
#include "zen/core/reduce.h"
#include "zen/testing/reference.h"

namespace zen::cli {
namespace {

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

void ExpectSame(const Agreement& a, const Agreement& b) {
  EXPECT_EQ(a.rows_mismatch, b.rows_mismatch);
  if (std::isnan(b.max_rel_error)) {
    EXPECT_TRUE(std::isnan(a.max_rel_error));
  } else if (std::isinf(b.max_rel_error)) {
    EXPECT_EQ(a.max_rel_error, b.max_rel_error);
  } else {
    EXPECT_NEAR(a.max_rel_error, b.max_rel_error, 1e-12 + 1e-9 * b.max_rel_error);
  }
}

// A result built by hand from (id, values) rows.
SparseTensor Result(int64_t rows, int64_t width, std::vector<int64_t> ids, std::vector<float> vals) {
  return SparseTensor::FromCoo(rows, width, std::move(ids), std::move(vals));
}

TEST(SparseReference, AgreesWithDenseReference) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(seed);
    const int64_t rows = 50 + seed * 7, width = 1 + seed % 4;
    const auto inputs = RandomInputs(1 + static_cast<int>(seed % 5), rows, width, 3 + static_cast<int>(seed), seed);
    const SparseReference sparse(inputs);
    const DenseReference dense(inputs);
    ASSERT_EQ(sparse.present_rows(), dense.present_rows());

    SparseTensor exact = SumAll(inputs);
    ExpectSame(sparse.Compare(exact), dense.Compare(exact));
    EXPECT_EQ(sparse.Compare(exact).rows_mismatch, 0);
    EXPECT_LE(sparse.Compare(exact).max_rel_error, 1e-6);

    std::vector<int64_t> ids(exact.ids().begin(), exact.ids().end());
    std::vector<float> vals(exact.values().begin(), exact.values().end());
    // One value off.
    auto off = vals;
    off[vals.size() / 2] += 0.5f;
    ExpectSame(sparse.Compare(Result(rows, width, ids, off)), dense.Compare(Result(rows, width, ids, off)));
    // One row missing.
    auto fewer_ids = ids;
    auto fewer_vals = vals;
    fewer_ids.erase(fewer_ids.begin());
    fewer_vals.erase(fewer_vals.begin(), fewer_vals.begin() + width);
    const auto fewer = Result(rows, width, fewer_ids, fewer_vals);
    ExpectSame(sparse.Compare(fewer), dense.Compare(fewer));
    EXPECT_EQ(sparse.Compare(fewer).rows_mismatch, 1);
    // One row too many (an id no rank has).
    for (int64_t extra = 0; extra < rows; ++extra) {
      if (std::binary_search(ids.begin(), ids.end(), extra)) continue;
      auto more_ids = ids;
      auto more_vals = vals;
      more_ids.push_back(extra);
      more_vals.insert(more_vals.end(), static_cast<size_t>(width), 0.25f);
      const auto more = Result(rows, width, more_ids, more_vals);
      ExpectSame(sparse.Compare(more), dense.Compare(more));
      EXPECT_EQ(sparse.Compare(more).rows_mismatch, 1);
      break;
    }
    // A NaN, an infinity.
    auto nan = vals;
    nan[0] = NAN;
    ExpectSame(sparse.Compare(Result(rows, width, ids, nan)), dense.Compare(Result(rows, width, ids, nan)));
    auto inf = vals;
    inf[0] = INFINITY;
    ExpectSame(sparse.Compare(Result(rows, width, ids, inf)), dense.Compare(Result(rows, width, ids, inf)));
    // Another shape; an empty result.
    const SparseTensor wrong = SparseTensor::FromCoo(rows + 1, width, {}, {});
    ExpectSame(sparse.Compare(wrong), dense.Compare(wrong));
    const SparseTensor empty = SparseTensor::FromCoo(rows, width, {}, {});
    ExpectSame(sparse.Compare(empty), dense.Compare(empty));
  }
}

// The dense form (zen bench --output dense): the same verdict as
// DenseReference::CompareDense on exact, perturbed, missing, extra, NaN
// and wrongly sized results.
TEST(SparseReference, DenseResultsAgreeWithDenseReference) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(seed);
    const int64_t rows = 50 + seed * 7, width = 1 + seed % 4;
    const auto inputs = RandomInputs(1 + static_cast<int>(seed % 5), rows, width, 3 + static_cast<int>(seed), seed);
    const SparseReference sparse(inputs);
    const DenseReference dense(inputs);
    const std::vector<float> exact = SumAll(inputs).ToDense();
    ExpectSame(sparse.CompareDense(exact), dense.CompareDense(exact));
    EXPECT_EQ(sparse.CompareDense(exact).rows_mismatch, 0);
    EXPECT_LE(sparse.CompareDense(exact).max_rel_error, 1e-6);
    const size_t w = static_cast<size_t>(width);
    const int64_t first = SumAll(inputs).ids()[0];
    auto off = exact;
    off[static_cast<size_t>(first) * w] += 0.5f;
    ExpectSame(sparse.CompareDense(off), dense.CompareDense(off));
    auto missing = exact;  // a present row zeroed
    std::fill_n(missing.begin() + static_cast<std::ptrdiff_t>(first * width), width, 0.0f);
    ExpectSame(sparse.CompareDense(missing), dense.CompareDense(missing));
    for (int64_t extra = 0; extra < rows; ++extra) {  // a row no rank has, non-zero
      if (exact[static_cast<size_t>(extra) * w] != 0.0f) continue;
      const auto ids = SumAll(inputs).ids();
      if (std::binary_search(ids.begin(), ids.end(), extra)) continue;
      auto more = exact;
      more[static_cast<size_t>(extra) * w] = 0.25f;
      ExpectSame(sparse.CompareDense(more), dense.CompareDense(more));
      EXPECT_EQ(sparse.CompareDense(more).rows_mismatch, 1);
      break;
    }
    auto nan = exact;
    nan[static_cast<size_t>(first) * w] = NAN;
    ExpectSame(sparse.CompareDense(nan), dense.CompareDense(nan));
    const std::vector<float> shorter(exact.size() - 1);
    ExpectSame(sparse.CompareDense(shorter), dense.CompareDense(shorter));
  }
}

TEST(SparseReference, MemoryFollowsNonZerosNotRows) {
  // 2^40 rows: a dense reference would need 2^40 x 4 doubles (32 TiB).
  const int64_t rows = int64_t{1} << 40;
  const std::vector<SparseTensor> inputs = {
      SparseTensor::FromCoo(rows, 4, {0, rows - 1}, {1, 2, 3, 4, 5, 6, 7, 8}),
      SparseTensor::FromCoo(rows, 4, {rows - 1}, {1, 1, 1, 1})};
  const SparseReference ref(inputs);
  EXPECT_EQ(ref.present_rows(), 2);
  const SparseTensor good = SparseTensor::FromCoo(rows, 4, {0, rows - 1}, {1, 2, 3, 4, 6, 7, 8, 9});
  EXPECT_EQ(ref.Compare(good).rows_mismatch, 0);
  EXPECT_EQ(ref.Compare(good).max_rel_error, 0);
  const SparseTensor bad = SparseTensor::FromCoo(rows, 4, {rows - 1}, {6, 7, 8, 9});
  EXPECT_EQ(ref.Compare(bad).rows_mismatch, 1);
  EXPECT_NEAR(ref.Compare(bad).max_rel_error, 4.0 / 9.0, 1e-12);
}

TEST(SparseReference, ShapesMustAgree) {
  const std::vector<SparseTensor> inputs = {SparseTensor::FromCoo(10, 2, {}, {}),
                                            SparseTensor::FromCoo(11, 2, {}, {})};
  EXPECT_THROW(SparseReference ref(inputs), MismatchError);
}

}  // namespace
}  // namespace zen::cli
