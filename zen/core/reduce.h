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

// dst[i] += src[i]; sizes must match. One kernel per value type (float32,
// float64: sums in the values' own precision).
void AddInto(std::span<float> dst, std::span<const float> src);
void AddInto(std::span<double> dst, std::span<const double> src);

// a + b; the result has the union of both row sets. Shapes and dtypes must
// match.
SparseTensor MergeSum(const SparseTensor& a, const SparseTensor& b);

// MergeSum on caller memory: rows (a_ids, a_values) + (b_ids, b_values),
// each sorted by unique id, `width` floats per row, written to out_ids /
// out_values, which must have room for a_ids.size() + b_ids.size() rows;
// returns the union's row count. A row in both is a's row + b's row.
size_t MergeSumInto(std::span<const int64_t> a_ids, std::span<const float> a_values,
                    std::span<const int64_t> b_ids, std::span<const float> b_values,
                    int64_t width, int64_t* out_ids, float* out_values);
size_t MergeSumInto(std::span<const int64_t> a_ids, std::span<const double> a_values,
                    std::span<const int64_t> b_ids, std::span<const double> b_values,
                    int64_t width, int64_t* out_ids, double* out_values);

// Sum of any number of tensors of one shape and dtype (at least one).
SparseTensor SumAll(std::span<const SparseTensor> parts);

// Sorted union of the row ids of all parts.
std::vector<int64_t> UnionIds(std::span<const SparseTensor> parts);

}  // namespace zen
