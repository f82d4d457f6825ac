// The value-type list (dtype.h) and the core kernels on the 16-bit dtypes:
// each sum is checked against values written out here from the formats'
// definitions (bfloat16: the top 16 bits of a float32, rounded to nearest
// even; float16: IEEE binary16), not against the kernels themselves.
#include "zen/core/dtype.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "zen/core/float_scan.h"
#include "zen/core/merge_rows.h"
#include "zen/core/reduce.h"
#include "zen/core/sparse_tensor.h"

namespace zen {
namespace {

Bfloat16 Bf(uint16_t bits) { return Bfloat16{bits}; }
Float16 Fp(uint16_t bits) { return Float16{bits}; }

TEST(DType, EveryListedTypeHasItsCodeNameAndSize) {
  EXPECT_EQ(static_cast<int>(DType::kFloat32), 1);
  EXPECT_EQ(static_cast<int>(DType::kFloat64), 2);
  EXPECT_EQ(static_cast<int>(DType::kBfloat16), 3);
  EXPECT_EQ(static_cast<int>(DType::kFloat16), 4);
  EXPECT_STREQ(DTypeName(DType::kBfloat16), "bfloat16");
  EXPECT_STREQ(DTypeName(DType::kFloat16), "float16");
  EXPECT_STREQ(DTypeName(static_cast<DType>(9)), "an unknown dtype");
  EXPECT_EQ(DTypeSize(DType::kBfloat16), 2u);
  EXPECT_EQ(DTypeSize(DType::kFloat16), 2u);
  EXPECT_EQ(DTypeSize(DType::kFloat64), 8u);
  EXPECT_EQ(DTypeSize(static_cast<DType>(9)), 0u);
  static_assert(DTypeOf<float> == DType::kFloat32);
  static_assert(DTypeOf<Bfloat16> == DType::kBfloat16);
  static_assert(DTypeOf<Float16> == DType::kFloat16);
  static_assert(std::is_same_v<AccumOf<Bfloat16>, float>);
  static_assert(std::is_same_v<AccumOf<double>, double>);
}

TEST(DType, WithValueTypeDispatchesEveryDtypeAndRefusesOtherCodes) {
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kBfloat16, DType::kFloat16}) {
    EXPECT_EQ(WithValueType(d, []<typename T>() { return DTypeOf<T>; }), d);
  }
  EXPECT_THROW(WithValueType(static_cast<DType>(0), []<typename T>() { return 0; }),
               InvalidArgument);
}

TEST(DType, DTypeSetHasWhatItHolds) {
  constexpr DTypeSet s{DType::kFloat32, DType::kBfloat16};
  static_assert(s.Has(DType::kBfloat16) && !s.Has(DType::kFloat16));
  EXPECT_EQ(s.Names(), "float32, bfloat16");
  EXPECT_EQ(DTypeSet::All().Names(), "float32, float64, bfloat16, float16");
  EXPECT_TRUE(DTypeSet{}.empty());
  EXPECT_FALSE(DTypeSet::All().Has(static_cast<DType>(200)));
}

TEST(DType, PerValueTypeKeepsOneObjectPerType) {
  PerValueType<std::vector> v;
  v.Of<Bfloat16>().push_back(Bf(1));
  v.Of<double>().push_back(2.0);
  EXPECT_EQ(v.Of<Bfloat16>().size(), 1u);
  EXPECT_EQ(v.Of<Float16>().size(), 0u);
  EXPECT_EQ(v.Of<double>()[0], 2.0);
}

// 1 + 2^-8 is halfway between two bfloat16 values (1 and 1 + 2^-7): it
// rounds to the even one, 1. Two additions of 2^-8 in float then one
// rounding give 1 + 2^-7 (0x3f81), while rounding after each addition
// keeps 1 (0x3f80).
TEST(DType, AddIntoRoundsEachCallAndNarrowIntoOnce) {
  const Bfloat16 one = Bf(0x3f80), tiny = Bf(0x3b80);  // 1, 2^-8
  std::vector<Bfloat16> acc = {one};
  const std::vector<Bfloat16> add = {tiny};
  for (int i = 0; i < 2; ++i) AddInto(std::span<Bfloat16>(acc), std::span<const Bfloat16>(add));
  EXPECT_EQ(acc[0].bits, 0x3f80);
  std::vector<float> wide = {1.0f};
  for (int i = 0; i < 2; ++i) AddWidenedInto<Bfloat16>(wide, add);
  std::vector<Bfloat16> once(1);
  NarrowInto<Bfloat16>(once, wide);
  EXPECT_EQ(once[0].bits, 0x3f81);
  // float16: 2048 + 1 is halfway (2048 and 2050): even is 2048 (0x6800).
  std::vector<Float16> h = {Fp(0x6800)};
  const std::vector<Float16> h1 = {Fp(0x3c00)};
  AddInto(std::span<Float16>(h), std::span<const Float16>(h1));
  EXPECT_EQ(h[0].bits, 0x6800);
  EXPECT_THROW(AddInto(std::span<Float16>(h), std::span<const Float16>()), InvalidArgument);
}

// Three parts share key 4 (1, 2^-8 and 2^-8): summed in float and rounded
// once -> 1 + 2^-7 (rounded after each addition it would stay 1); key 2
// (one part) copied as it is.
TEST(DType, MergeSumRowsIntoRoundsOnce) {
  const std::vector<int64_t> a_ids = {2, 4}, b_ids = {4}, c_ids = {4};
  const std::vector<Bfloat16> a = {Bf(0x4040), Bf(0x3f80)}, b = {Bf(0x3b80)}, c = {Bf(0x3b80)};
  const std::vector<RowsOf<Bfloat16>> parts = {{a_ids, a}, {b_ids, b}, {c_ids, c}};
  MergeScratch scratch;
  EXPECT_EQ(MergedCount(std::span<const RowsOf<Bfloat16>>(parts), scratch), 2u);
  std::vector<int64_t> ids(2);
  std::vector<Bfloat16> values(2);
  EXPECT_EQ(MergeSumRowsInto(std::span<const RowsOf<Bfloat16>>(parts), 1, ids.data(),
                             values.data(), scratch),
            2u);
  EXPECT_EQ(ids, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(values[0].bits, 0x4040);  // 3
  EXPECT_EQ(values[1].bits, 0x3f81);
}

TEST(DType, SumAllAndMergeSumOf16BitTensorsRoundOnce) {
  const auto t = [](std::vector<uint16_t> bits) {
    std::vector<Bfloat16> v;
    for (uint16_t b : bits) v.push_back(Bf(b));
    return SparseTensor::FromSorted(8, 1, {1}, std::move(v), "t");
  };
  const std::vector<SparseTensor> parts = {t({0x3f80}), t({0x3b80}), t({0x3b80})};
  const SparseTensor sum = SumAll(parts);
  ASSERT_EQ(sum.dtype(), DType::kBfloat16);
  EXPECT_EQ(sum.values<Bfloat16>()[0].bits, 0x3f81);
  // Two parts: one addition, 1 + 2^-8 -> 1 (ties to even).
  EXPECT_EQ(MergeSum(parts[0], parts[1]).values<Bfloat16>()[0].bits, 0x3f80);
}

// A 16-bit value is zero when its widened value is: +0 and -0 (0x8000).
TEST(DType, ZeroRowScanOn16BitValues) {
  const std::vector<Float16> dense = {Fp(0x0000), Fp(0x8000), Fp(0x0001), Fp(0x0000),
                                      Fp(0x8000), Fp(0x8000), Fp(0x7e00), Fp(0x0000)};
  EXPECT_FALSE(RowIsNonZero(dense.data(), 2));
  EXPECT_TRUE(RowIsNonZero(dense.data() + 2, 2));   // the smallest subnormal
  EXPECT_FALSE(RowIsNonZero(dense.data() + 4, 2));
  EXPECT_TRUE(RowIsNonZero(dense.data() + 6, 2));   // NaN
  std::vector<int64_t> rows;
  ForEachNonZeroRow(dense.data(), 2, 0, 4, [&](int64_t r) { rows.push_back(r); });
  EXPECT_EQ(rows, (std::vector<int64_t>{1, 3}));
}

TEST(DType, SparseTensorHolds16BitValues) {
  const std::vector<Bfloat16> dense = {Bf(0), Bf(0), Bf(0x3f80), Bf(0x8000), Bf(0x8000), Bf(0)};
  const SparseTensor t = SparseTensor::FromDense(std::span<const Bfloat16>(dense), 3, 2, "e");
  EXPECT_EQ(t.dtype(), DType::kBfloat16);
  EXPECT_EQ(t.row_bytes(), 4u);
  EXPECT_EQ(t.value_bytes().size(), 4u);
  EXPECT_EQ(std::vector<int64_t>(t.ids().begin(), t.ids().end()), std::vector<int64_t>{1});
  EXPECT_EQ(t.ToDense<Bfloat16>()[2].bits, 0x3f80);
  EXPECT_THROW(t.values<float>(), InvalidArgument);
  EXPECT_THROW(t.values<Float16>(), InvalidArgument);
  // Duplicates summed (one rounding per pair): 1 + 2 = 3.
  const SparseTensor c = SparseTensor::FromCoo<Bfloat16>(
      4, 1, {2, 2}, {Bf(0x3f80), Bf(0x4000)}, Duplicates::kSum, "c");
  EXPECT_EQ(c.values<Bfloat16>()[0].bits, 0x4040);
  // A view reads the caller's values; owning copies them.
  const std::vector<int64_t> ids = {0};
  const std::vector<Float16> v = {Fp(0x3c00)};
  SparseTensor view = SparseTensor::View<Float16>(4, 1, ids, v, "v");
  EXPECT_EQ(view.values<Float16>().data(), v.data());
  view.OwnRows();
  EXPECT_NE(view.values<Float16>().data(), v.data());
  EXPECT_EQ(view.values<Float16>()[0].bits, 0x3c00);
  EXPECT_EQ(SparseTensor::Empty(3, 2, "z", DType::kFloat16).dtype(), DType::kFloat16);
}

}  // namespace
}  // namespace zen
