// The dense reference must see NaN and Inf: every NaN/Inf propagation test
// of the schemes relies on DenseReference telling a NaN from a finite value.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "zen/core/reduce.h"
#include "zen/testing/reference.h"

namespace zen {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

SparseTensor Row(int64_t id, float a, float b) { return SparseTensor::FromCoo(4, 2, {id}, {a, b}); }

TEST(ReliabilityReferenceTest, NaNWhereTheSumIsFiniteIsAnError) {
  const std::vector<SparseTensor> inputs = {Row(1, 1, 2), Row(1, 3, 4)};
  const DenseReference ref(inputs);
  const Agreement a = ref.Compare(Row(1, kNaN, 6));
  EXPECT_FALSE(a.max_rel_error <= 1e-5) << a.max_rel_error;
  std::vector<float> dense = Row(1, 4, kNaN).ToDense();
  EXPECT_FALSE(ref.CompareDense(dense).max_rel_error <= 1e-5);
}

TEST(ReliabilityReferenceTest, FiniteWhereTheSumIsNaNIsAnError) {
  const std::vector<SparseTensor> inputs = {Row(2, kNaN, 2), Row(2, 3, 4)};
  const DenseReference ref(inputs);
  EXPECT_FALSE(ref.Compare(Row(2, 3, 6)).max_rel_error <= 1e-5);
  EXPECT_LE(ref.Compare(Row(2, kNaN, 6)).max_rel_error, 1e-5);
  // A missing row whose sum is NaN is an error in value as well as in rows.
  const Agreement missing = ref.Compare(SparseTensor::Empty(4, 2));
  EXPECT_EQ(missing.rows_mismatch, 1);
  EXPECT_FALSE(missing.max_rel_error <= 1e-5);
}

TEST(ReliabilityReferenceTest, InfinitiesMustMatchInSign) {
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
