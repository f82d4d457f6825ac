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

// dst[i] += src[i]; sizes must match. One kernel per value type
// (ZEN_FOR_EACH_VALUE_TYPE): float32 and float64 sum in their own
// precision; bfloat16 and float16 widen both to float, add, and round the
// sum once into dst (so a chain of AddInto calls rounds at each call).
#define ZEN_ADD_INTO(T, ...) void AddInto(std::span<T> dst, std::span<const T> src);
ZEN_FOR_EACH_VALUE_TYPE(ZEN_ADD_INTO)
#undef ZEN_ADD_INTO

// acc[i] += src[i] widened to AccumOf<T> (float for the 16-bit types; for
// float and double this is AddInto), and dst[i] = acc[i] rounded to T: a
// sum of many terms accumulated in float and rounded once when stored.
template <typename T>
void AddWidenedInto(std::span<AccumOf<T>> acc, std::span<const T> src);
template <typename T>
void NarrowInto(std::span<T> dst, std::span<const AccumOf<T>> acc);

// a + b; the result has the union of both row sets. Shapes and dtypes must
// match.
SparseTensor MergeSum(const SparseTensor& a, const SparseTensor& b);

// MergeSum on caller memory: rows (a_ids, a_values) + (b_ids, b_values),
// each sorted by unique id, `width` values per row, written to out_ids /
// out_values, which must have room for a_ids.size() + b_ids.size() rows;
// returns the union's row count. A row in both is a's row + b's row (Add:
// rounded once).
#define ZEN_MERGE_SUM_INTO(T, ...)                                                           \
  size_t MergeSumInto(std::span<const int64_t> a_ids, std::span<const T> a_values,           \
                      std::span<const int64_t> b_ids, std::span<const T> b_values,           \
                      int64_t width, int64_t* out_ids, T* out_values);
ZEN_FOR_EACH_VALUE_TYPE(ZEN_MERGE_SUM_INTO)
#undef ZEN_MERGE_SUM_INTO

// Sum of any number of tensors of one shape and dtype (at least one),
// accumulated in AccumOf<T> and rounded once per value.
SparseTensor SumAll(std::span<const SparseTensor> parts);

// Sorted union of the row ids of all parts.
std::vector<int64_t> UnionIds(std::span<const SparseTensor> parts);

}  // namespace zen
