// Size arithmetic near int64 limits (issue 13, item 2): every rows x width
// product is checked, so a shape whose dense form has more than 2^63 - 1
// elements (or more than 2^64 bytes) is an InvalidArgument naming the
// tensor, never a wrapped size that reads past a buffer, a std::bad_alloc or
// a std::length_error.
#include <gtest/gtest.h>

#include <limits>
#include <new>
#include <stdexcept>
#include <string>

#include "zen/core/error.h"
#include "zen/core/reduce.h"
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

}  // namespace
}  // namespace zen
