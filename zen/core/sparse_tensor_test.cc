#include "zen/core/sparse_tensor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <new>
#include <stdexcept>
#include <string>

#include "zen/core/error.h"

namespace zen {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(SparseTensor, FromCooSortsUnsortedInput) {
  auto t = SparseTensor::FromCoo(10, 2, {7, 3, 5}, {70, 71, 30, 31, 50, 51});
  EXPECT_THAT(t.ids(), ElementsAre(3, 5, 7));
  EXPECT_THAT(t.values(), ElementsAre(30, 31, 50, 51, 70, 71));
}

TEST(SparseTensor, DuplicatesAreSummedWhenAsked) {
  auto t = SparseTensor::FromCoo(10, 2, {7, 3, 7}, {1, 2, 3, 4, 10, 20}, Duplicates::kSum);
  EXPECT_THAT(t.ids(), ElementsAre(3, 7));
  EXPECT_THAT(t.values(), ElementsAre(3, 4, 11, 22));
}

TEST(SparseTensor, DuplicatesAreRejectedByDefaultNamingIdAndPositions) {
  try {
    SparseTensor::FromCoo(10, 1, {4, 2, 4}, {1, 2, 3}, Duplicates::kReject, "emb");
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("tensor 'emb'"));
    EXPECT_THAT(e.what(), HasSubstr("duplicate id 4 at positions 0 and 2"));
  }
}

TEST(SparseTensor, IdOutsideRangeNamesIdAndPosition) {
  try {
    SparseTensor::FromCoo(8000, 1, {1, 9000}, {1, 2}, Duplicates::kReject, "emb.weight");
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("id 9000 at position 1 is outside [0, 8000)"));
  }
  EXPECT_THROW(SparseTensor::FromCoo(10, 1, {-1}, {1}), InvalidArgument);
}

TEST(SparseTensor, ShapeAndLengthAreValidated) {
  EXPECT_THROW(SparseTensor::Empty(0, 1), InvalidArgument);
  EXPECT_THROW(SparseTensor::Empty(5, 0), InvalidArgument);
  EXPECT_THROW(SparseTensor::FromCoo(10, 2, {1}, {1, 2, 3}), InvalidArgument);
  EXPECT_THROW(SparseTensor::FromSorted(10, 1, {3, 2}, {1, 2}), InvalidArgument);
  EXPECT_THROW(SparseTensor::FromSorted(10, 1, {2, 2}, {1, 2}), InvalidArgument);
  EXPECT_THROW(SparseTensor::FromDense(std::vector<float>(5), 2, 3), InvalidArgument);
  // FromSortedUnchecked trusts the ids' order, not the shape or the lengths.
  EXPECT_THROW(SparseTensor::FromSortedUnchecked(0, 1, {}, {}), InvalidArgument);
  EXPECT_THROW(SparseTensor::FromSortedUnchecked(10, 2, {1}, {1, 2, 3}), InvalidArgument);
  EXPECT_EQ(SparseTensor::FromSortedUnchecked(10, 2, {1, 7}, {1, 2, 3, 4}, "t"),
            SparseTensor::FromSorted(10, 2, {1, 7}, {1, 2, 3, 4}, "t"));
}

TEST(SparseTensor, DenseRoundTripSkipsZeroRows) {
  const std::vector<float> dense = {0, 0, 1, 0, 0, 0, 0, -2};
  auto t = SparseTensor::FromDense(dense, 4, 2);
  EXPECT_THAT(t.ids(), ElementsAre(1, 3));
  EXPECT_EQ(t.ToDense(), dense);
  EXPECT_DOUBLE_EQ(t.density(), 0.5);
}

TEST(SparseTensor, ElementSparseWidthOne) {
  auto t = SparseTensor::FromDense(std::vector<float>{0, 3, 0, 4}, 4, 1);
  EXPECT_THAT(t.ids(), ElementsAre(1, 3));
  EXPECT_THAT(t.row(1), ElementsAre(4));
}

TEST(SparseTensor, RowsAboveTwoToThe31) {
  const int64_t rows = int64_t{3} << 31;  // 6.4e9 rows, never densified
  auto t = SparseTensor::FromCoo(rows, 1, {rows - 1, int64_t{1} << 32, 5}, {1, 2, 3});
  EXPECT_THAT(t.ids(), ElementsAre(5, int64_t{1} << 32, rows - 1));
  EXPECT_EQ(t.rows(), rows);
  EXPECT_THROW(SparseTensor::FromCoo(rows, 1, {rows}, {1}), InvalidArgument);
}

TEST(SparseTensor, ValuesLargerThanTwoGiB) {
  // 9 rows of 2^26 floats = 2.25 GiB of values: offsets exceed 2^31 bytes.
  const int64_t width = int64_t{1} << 26;
  const size_t nnz = 9;
  std::vector<float> values(nnz * static_cast<size_t>(width), 1.0f);
  values.back() = 7.0f;
  std::vector<int64_t> ids(nnz);
  for (size_t i = 0; i < nnz; ++i) ids[i] = static_cast<int64_t>(i * 2);
  auto t = SparseTensor::FromSorted(100, width, std::move(ids), std::move(values));
  EXPECT_GT(t.values().size_bytes(), size_t{1} << 31);
  EXPECT_EQ(t.row(8).back(), 7.0f);
  EXPECT_EQ(t.row(8).size(), static_cast<size_t>(width));
}


TEST(SparseTensor, ViewReadsTheCallersMemoryWithoutACopy) {
  const std::vector<int64_t> ids = {2, 5, 9};
  const std::vector<float> values = {20, 21, 50, 51, 90, 91};
  const auto t = SparseTensor::View(10, 2, ids, values, "emb");
  EXPECT_TRUE(t.is_view());
  EXPECT_EQ(t.ids().data(), ids.data());
  EXPECT_EQ(t.values().data(), values.data());
  EXPECT_EQ(t.nnz(), 3u);
  EXPECT_THAT(t.row(1), ElementsAre(50, 51));
  EXPECT_DOUBLE_EQ(t.density(), 0.3);
  std::vector<float> dense(20, -1.0f);
  t.ToDense(dense);
  EXPECT_EQ(dense, SparseTensor::FromSorted(10, 2, ids, values).ToDense());
  // Equal to the owning tensor of the same rows; a copy views the same memory.
  EXPECT_EQ(t, SparseTensor::FromSorted(10, 2, ids, values, "emb"));
  EXPECT_NE(t, SparseTensor::FromSorted(10, 2, ids, {20, 21, 50, 51, 90, 92}, "emb"));
  const SparseTensor copy = t;
  EXPECT_TRUE(copy.is_view());
  EXPECT_EQ(copy.ids().data(), ids.data());
}

TEST(SparseTensor, ViewIsValidatedLikeFromSorted) {
  const std::vector<float> v = {1, 2};
  auto expect_error = [](auto&& make, const std::string& part) {
    try {
      make();
      FAIL() << "no exception, expected: " << part;
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr(part));
    }
  };
  const std::vector<int64_t> unsorted = {3, 2}, repeated = {2, 2}, outside = {1, 12};
  expect_error([&] { SparseTensor::View(10, 1, unsorted, v, "emb"); },
               "id 2 at position 1 follows 3");
  expect_error([&] { SparseTensor::View(10, 1, repeated, v, "emb"); }, "not sorted and unique");
  expect_error([&] { SparseTensor::View(10, 1, outside, v, "emb"); },
               "id 12 at position 1 is outside [0, 10)");
  expect_error([&] { SparseTensor::View(10, 3, std::vector<int64_t>{1}, v, "emb"); },
               "values has 2 floats, expected 1 ids x width 3 = 3");
  expect_error([&] { SparseTensor::View(0, 1, {}, {}, "emb"); }, "rows must be >= 1");
}

TEST(SparseTensor, AViewCopiesItsRowsBeforeTheyAreWrittenOrTaken) {
  std::vector<int64_t> ids = {1, 4};
  std::vector<float> values = {10, 40};
  auto t = SparseTensor::View(5, 1, ids, values);
  t.mutable_values()[0] = 99;  // the tensor's own copy, not the caller's
  EXPECT_FALSE(t.is_view());
  EXPECT_EQ(values[0], 10);
  EXPECT_THAT(t.values(), ElementsAre(99, 40));
  auto u = SparseTensor::View(5, 1, ids, values);
  std::vector<int64_t> taken_ids = std::move(u).TakeIds();
  std::vector<float> taken_values = std::move(u).TakeValues();
  EXPECT_THAT(taken_ids, ElementsAre(1, 4));
  EXPECT_THAT(taken_values, ElementsAre(10, 40));
  EXPECT_THAT(ids, ElementsAre(1, 4));  // still the caller's
  auto w = SparseTensor::View(5, 1, ids, values);
  w.OwnRows();
  ids[0] = 3;  // the caller's memory changes; the tensor keeps its copy
  EXPECT_THAT(w.ids(), ElementsAre(1, 4));
}

TEST(SparseTensor, ViewOrCooViewsSortedIdsAndCoalescesOthers) {
  const std::vector<int64_t> sorted = {1, 4, 6}, unsorted = {6, 1, 6};
  const std::vector<float> v = {1, 2, 3, 4, 5, 6};
  const auto view = SparseTensor::ViewOrCoo(10, 2, sorted, v, "emb");
  EXPECT_TRUE(view.is_view());
  EXPECT_EQ(view.ids().data(), sorted.data());
  const auto summed = SparseTensor::ViewOrCoo(10, 2, unsorted, v, "emb");
  EXPECT_FALSE(summed.is_view());
  EXPECT_THAT(summed.ids(), ElementsAre(1, 6));
  EXPECT_THAT(summed.values(), ElementsAre(3, 4, 6, 8));
  const std::vector<int64_t> outside = {1, 12};
  try {
    SparseTensor::ViewOrCoo(10, 1, outside, std::vector<float>{1, 2}, "emb");
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("id 12 at position 1 is outside [0, 10)"));
  }
}

// A float64 tensor carries its dtype: its values are read as double (as
// float they are InvalidArgument naming both dtypes), its rows are 8 bytes a
// value, and every factory keeps the values as they are (no float32 pass).
TEST(SparseTensor, Float64ValuesKeepTheirDtypeAndPrecision) {
  const double tiny = 1e-300, big = 1e300;
  const auto t = SparseTensor::FromCoo(10, 2, {7, 3, 7}, std::vector<double>{1e10, big, tiny, 2,
                                                                            1, 0},
                                       Duplicates::kSum, "emb");
  EXPECT_EQ(t.dtype(), DType::kFloat64);
  EXPECT_EQ(t.row_bytes(), 16u);
  EXPECT_EQ(t.value_bytes().size(), 4 * sizeof(double));
  EXPECT_THAT(t.ids(), ElementsAre(3, 7));
  EXPECT_THAT(t.values<double>(), ElementsAre(tiny, 2, 1e10 + 1, big));
  EXPECT_THAT(t.row<double>(1), ElementsAre(1e10 + 1, big));
  try {
    (void)t.values();
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("values of dtype float64 read as float32"));
  }
  const std::vector<double> dense = t.ToDense<double>();
  EXPECT_EQ(dense[6], tiny);
  EXPECT_EQ(dense[15], big);
  const auto back = SparseTensor::FromDense<double>(dense, 10, 2, "emb");
  EXPECT_EQ(back, t);
  const std::vector<int64_t> ids = {3, 7};
  const std::vector<double> values(t.values<double>().begin(), t.values<double>().end());
  const auto view = SparseTensor::View<double>(10, 2, ids, values, "emb");
  EXPECT_TRUE(view.is_view());
  EXPECT_EQ(view, t);
  auto owned = view;
  owned.OwnRows();
  EXPECT_FALSE(owned.is_view());
  EXPECT_EQ(owned, t);
  EXPECT_EQ(std::move(owned).TakeValues<double>(), values);
  // The same ids and numbers as float32 are another tensor.
  const auto f32 = SparseTensor::FromSorted(10, 1, {3}, {2.0f}, "x");
  const auto f64 = SparseTensor::FromSorted(10, 1, {3}, std::vector<double>{2.0}, "x");
  EXPECT_FALSE(f32 == f64);
  EXPECT_EQ(SparseTensor::Empty(10, 2, "e", DType::kFloat64).dtype(), DType::kFloat64);
}

// ---- Size arithmetic near int64 limits (issue 13, item 2) ----
// Every rows x width product is checked, so a shape whose dense form has
// more than 2^63 - 1 elements (or more than 2^64 bytes) is an
// InvalidArgument naming the tensor, never a wrapped size that reads past a
// buffer, a std::bad_alloc or a std::length_error.

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
TEST(SparseTensorOverflow, FromDenseWithAWrappingShapeIsRejected) {
  std::vector<float> four = {1, 2, 3, 4};
  ExpectOverflow([&] { SparseTensor::FromDense(four, kHuge, 4, "emb"); }, "emb");
  ExpectOverflow([&] { SparseTensor::FromDense(four, 4, kHuge, "emb"); }, "emb");
  ExpectOverflow([&] { SparseTensor::FromDense(four, kMax, kMax, "emb"); }, "emb");
  // (2^62 + 1) x 1 elements fit int64 but their bytes do not fit size_t.
  ExpectOverflow([&] { SparseTensor::FromDense(four, kHuge, 1, "emb"); }, "emb");
}

TEST(SparseTensorOverflow, ShapesWhoseElementCountOverflowsAreRejected) {
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
TEST(SparseTensorOverflow, ValueCountIsCheckedWithoutWrapping) {
  ExpectOverflow([] { SparseTensor::FromCoo(1, int64_t{1} << 62, {0, 0, 0, 0}, {},
                                            Duplicates::kSum, "emb"); }, "emb");
  ExpectOverflow([] { SparseTensor::FromSorted(4, int64_t{1} << 61, {0, 1, 2, 3, 4, 5, 6, 7}, {},
                                               "emb"); }, "emb");
}

// Before the fix: ToDense() of a shape whose dense form cannot exist threw
// std::length_error (vector::_M_fill_insert) or std::bad_alloc.
TEST(SparseTensorOverflow, ToDenseOfAHugeShapeIsAZenError) {
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

TEST(SparseTensorOverflow, DenseElementsNeverWraps) {
  EXPECT_EQ(DenseElements(1000, 64), 64000u);
  EXPECT_EQ(DenseElements(int64_t{1} << 60, 2), size_t{1} << 61);
  ExpectOverflow([] { DenseElements(kHuge, 4, "t"); }, "t");
  ExpectOverflow([] { DenseElements(int64_t{1} << 62, 1, "t"); }, "t");  // 2^64 bytes
  EXPECT_THROW(DenseElements(-1, 4, "t"), InvalidArgument);
}

}  // namespace
}  // namespace zen
