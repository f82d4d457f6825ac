// Size arithmetic near int64 limits (issue 13, item 2): every rows x width
// product is checked, so a shape whose dense form has more than 2^63 - 1
// elements (or more than 2^64 bytes) is an InvalidArgument naming the
// tensor, never a wrapped size that reads past a buffer, a std::bad_alloc or
// a std::length_error. The reference itself must work for rows 2^62 with a
// few ids (memory proportional to the non-zeros).
#include <gtest/gtest.h>

#include <limits>
#include <new>
#include <stdexcept>
#include <string>

#include "zen/core/error.h"
#include "zen/core/reduce.h"
#include "zen/testing/reference.h"
#include "zen/core/sparse_tensor.h"

namespace zen {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kHuge = (int64_t{1} << 62) + 1;  // x 4 wraps size_t to 4

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// f() must throw InvalidArgument whose message names `tensor` and says
// "overflows"; bad_alloc / length_error are failures.
template <typename F>
void ExpectOverflow(F&& f, const std::string& tensor) {
  try {
    f();
    ADD_FAILURE() << "accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(Has(e.what(), "tensor '" + tensor + "'")) << e.what();
    EXPECT_TRUE(Has(e.what(), "overflows")) << e.what();
  } catch (const std::bad_alloc& e) {
    ADD_FAILURE() << "std::bad_alloc escaped: " << e.what();
  } catch (const std::length_error& e) {
    ADD_FAILURE() << "std::length_error escaped: " << e.what();
  }
}

// Before the fix: FromDense compared the buffer with a wrapped rows x width
// (2^64 + 4 -> 4 floats), accepted it and read 2^62 rows past it (SIGSEGV).
TEST(ReliabilityOverflowTest, FromDenseWithAWrappingShapeIsRejected) {
  std::vector<float> four = {1, 2, 3, 4};
  ExpectOverflow([&] { SparseTensor::FromDense(four, kHuge, 4, "emb"); }, "emb");
  ExpectOverflow([&] { SparseTensor::FromDense(four, 4, kHuge, "emb"); }, "emb");
  ExpectOverflow([&] { SparseTensor::FromDense(four, kMax, kMax, "emb"); }, "emb");
  // (2^62 + 1) x 1 elements fit int64 but their bytes do not fit size_t.
  ExpectOverflow([&] { SparseTensor::FromDense(four, kHuge, 1, "emb"); }, "emb");
}

TEST(ReliabilityOverflowTest, ShapesWhoseElementCountOverflowsAreRejected) {
  ExpectOverflow([] { SparseTensor::Empty(kHuge, 4, "emb"); }, "emb");
  ExpectOverflow([] { SparseTensor::FromCoo(kHuge, 4, {0}, {1, 2, 3, 4}, Duplicates::kReject,
                                            "emb"); }, "emb");
  ExpectOverflow([] { SparseTensor::FromSorted(kMax, 2, {}, {}, "emb"); }, "emb");
  ExpectOverflow([] { SparseTensor::FromSorted(2, kMax, {}, {}, "emb"); }, "emb");
  // The largest shapes that fit are fine while sparse.
  const SparseTensor t = SparseTensor::FromCoo(kMax, 1, {0, kMax - 1}, {1, 2});
  EXPECT_EQ(t.nnz(), 2u);
  const SparseTensor u = SparseTensor::FromSorted(kMax / 3, 3, {kMax / 3 - 1}, {1, 2, 3});
  EXPECT_EQ(u.row(0)[2], 3.0f);
}

// nnz x width that wraps size_t must not pass as a matching value count:
// 4 ids x width 2^62 wrapped to 0 floats, so an empty values vector was
// accepted and FromCoo then copied 2^62 floats per row out of it.
TEST(ReliabilityOverflowTest, ValueCountIsCheckedWithoutWrapping) {
  ExpectOverflow([] { SparseTensor::FromCoo(1, int64_t{1} << 62, {0, 0, 0, 0}, {},
                                            Duplicates::kSum, "emb"); }, "emb");
  ExpectOverflow([] { SparseTensor::FromSorted(4, int64_t{1} << 61, {0, 1, 2, 3, 4, 5, 6, 7}, {},
                                               "emb"); }, "emb");
}

// Before the fix: ToDense() of a shape whose dense form cannot exist threw
// std::length_error (vector::_M_fill_insert) or std::bad_alloc.
TEST(ReliabilityOverflowTest, ToDenseOfAHugeShapeIsAZenError) {
  const SparseTensor t = SparseTensor::FromCoo(kMax, 1, {5}, {1.0f}, Duplicates::kReject, "emb");
  ExpectOverflow([&] { (void)t.ToDense(); }, "emb");
  std::vector<float> small(8);
  ExpectOverflow([&] { t.ToDense(small); }, "emb");
  // Fits size_t but no memory holds it (2^50 x 4 bytes): InvalidArgument
  // naming the tensor and the bytes, not std::bad_alloc.
  const SparseTensor big = SparseTensor::FromCoo(int64_t{1} << 50, 1, {5}, {1.0f},
                                                 Duplicates::kReject, "emb");
  try {
    (void)big.ToDense();
    ADD_FAILURE() << "4 PiB allocated";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(Has(e.what(), "tensor 'emb'")) << e.what();
    EXPECT_TRUE(Has(e.what(), "4503599627370496 bytes")) << e.what();
  }
}

TEST(ReliabilityOverflowTest, DenseElementsNeverWraps) {
  EXPECT_EQ(DenseElements(1000, 64), 64000u);
  EXPECT_EQ(DenseElements(int64_t{1} << 60, 2), size_t{1} << 61);
  ExpectOverflow([] { DenseElements(kHuge, 4, "t"); }, "t");
  ExpectOverflow([] { DenseElements(int64_t{1} << 62, 1, "t"); }, "t");  // 2^64 bytes
  EXPECT_THROW(DenseElements(-1, 4, "t"), InvalidArgument);
}

// The reference must check rows 2^61 x width 2 with a few ids without rows
// x width doubles (before: vector::_M_fill_insert / bad_alloc).
TEST(ReliabilityOverflowTest, ReferenceIsProportionalToTheNonZeros) {
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

// The sparse reference agrees with a dense scatter done here, by hand.
TEST(ReliabilityOverflowTest, SparseReferenceMatchesADenseScatter) {
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

}  // namespace
}  // namespace zen
