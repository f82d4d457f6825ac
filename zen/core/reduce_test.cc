#include "zen/core/reduce.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "zen/core/error.h"

namespace zen {
namespace {

using ::testing::ElementsAre;

SparseTensor Random(int64_t rows, int64_t width, double density, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> v(-1, 1);
  std::bernoulli_distribution keep(density);
  std::vector<int64_t> ids;
  std::vector<float> values;
  for (int64_t r = 0; r < rows; ++r) {
    if (!keep(rng)) continue;
    ids.push_back(r);
    for (int64_t j = 0; j < width; ++j) values.push_back(v(rng));
  }
  return SparseTensor::FromSorted(rows, width, std::move(ids), std::move(values));
}

TEST(Reduce, MergeSumIsTheUnionWithSummedOverlap) {
  auto a = SparseTensor::FromCoo(10, 1, {1, 4}, {1, 2});
  auto b = SparseTensor::FromCoo(10, 1, {4, 9}, {-2, 5});
  auto s = MergeSum(a, b);
  EXPECT_THAT(s.ids(), ElementsAre(1, 4, 9));
  EXPECT_THAT(s.values(), ElementsAre(1, 0, 5));  // row 4 cancels but stays present
}

TEST(Reduce, SumAllMatchesDenseSum) {
  std::vector<SparseTensor> parts;
  for (uint32_t s = 0; s < 7; ++s) parts.push_back(Random(500, 3, 0.1 + 0.1 * s, s));
  const SparseTensor sum = SumAll(parts);
  std::vector<double> dense(500 * 3, 0);
  for (const auto& p : parts) {
    const auto d = p.ToDense();
    for (size_t i = 0; i < d.size(); ++i) dense[i] += d[i];
  }
  const auto got = sum.ToDense();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], dense[i], 1e-5);
  EXPECT_EQ(sum.ids().size(), UnionIds(parts).size());
}

TEST(Reduce, ShapeMismatchIsRejected) {
  EXPECT_THROW(MergeSum(SparseTensor::Empty(10, 1), SparseTensor::Empty(10, 2)), InvalidArgument);
  EXPECT_THROW(SumAll(std::span<const SparseTensor>{}), InvalidArgument);
}

// float64 tensors are summed in float64: 1e10 + 1 - 1e10 is 1 (0 in
// float32); shapes and dtypes must match.
TEST(SumAll, Float64SumsInFloat64) {
  const auto a = SparseTensor::FromSorted(10, 1, {2, 4}, std::vector<double>{1e10, 1e300});
  const auto b = SparseTensor::FromSorted(10, 1, {2, 5}, std::vector<double>{1, 1e-300});
  const auto c = SparseTensor::FromSorted(10, 1, {2}, std::vector<double>{-1e10});
  const std::vector<SparseTensor> parts = {a, b, c};
  const SparseTensor sum = SumAll(parts);
  EXPECT_EQ(sum.dtype(), DType::kFloat64);
  EXPECT_THAT(sum.ids(), ElementsAre(2, 4, 5));
  EXPECT_THAT(sum.values<double>(), ElementsAre(1.0, 1e300, 1e-300));
  const SparseTensor two = MergeSum(a, b);
  EXPECT_THAT(two.values<double>(), ElementsAre(1e10 + 1, 1e300, 1e-300));
  EXPECT_THROW(MergeSum(a, SparseTensor::FromSorted(10, 1, {2}, {1.0f})), InvalidArgument);
}

}  // namespace
}  // namespace zen
