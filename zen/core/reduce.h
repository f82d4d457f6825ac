// zen/core/reduce.h — summing sparse tensors.
//
// MergeSum / SumAll are the reduction kernels schemes use (sorted-id merges;
// a CUDA backend would replace them behind the same signatures). The
// independent dense reference results are checked against lives in the
// zen_testing library (zen/testing/reference.h).
//
// Usage:
//   SparseTensor sum = zen::SumAll(inputs);                // union of rows
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "zen/core/sparse_tensor.h"

namespace zen {

// dst[i] += src[i]; sizes must match.
void AddInto(std::span<float> dst, std::span<const float> src);

// a + b; the result has the union of both row sets. Shapes must match.
SparseTensor MergeSum(const SparseTensor& a, const SparseTensor& b);

// Sum of any number of tensors of one shape (at least one).
SparseTensor SumAll(std::span<const SparseTensor> parts);

// Sorted union of the row ids of all parts.
std::vector<int64_t> UnionIds(std::span<const SparseTensor> parts);

}  // namespace zen
