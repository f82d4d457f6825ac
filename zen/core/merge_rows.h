// zen/core/merge_rows.h — the n-way sorted merge ZEN's servers (and agsparse) aggregate
// with.
//
// Each part is a list of rows with strictly ascending keys (domain
// positions in ZEN); the result has the union of the keys, ascending, and
// the sum of the rows that share a key. O(total rows x log parts)
// comparisons plus one pass over the values. Out vectors and the scratch
// keep their capacity, so steady-state calls do not allocate.
//
// Usage:
//   std::vector<zen::RowsView> parts = {{keys_a, values_a}, {keys_b, values_b}};
//   zen::MergeScratch scratch;
//   std::vector<int64_t> keys(zen::MergedCount(parts, scratch));
//   std::vector<float> values(keys.size() * width);
//   zen::MergeSumRowsInto(parts, width, keys.data(), values.data(), scratch);
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "zen/core/dtype.h"

namespace zen {

template <typename T>
struct RowsOf {
  std::span<const int64_t> ids;  // keys, strictly ascending
  std::span<const T> values;     // ids.size() x width
};
using RowsView = RowsOf<float>;

struct MergeScratch {
  std::vector<std::pair<int64_t, size_t>> heads;
  std::vector<size_t> next;
  std::vector<float> row_sum;  // the 16-bit types: the row being summed, in float
};

// Calls fn(key, part, row) for every row of every part in ascending key
// order (ties in part order).
// `parts`: a span or vector of RowsOf<T>.
template <typename Parts, typename Fn>
void ForEachMerged(const Parts& parts, MergeScratch& scratch, Fn&& fn) {
  auto& heads = scratch.heads;
  auto& next = scratch.next;
  heads.clear();
  next.assign(parts.size(), 0);
  const auto later = [](const std::pair<int64_t, size_t>& a, const std::pair<int64_t, size_t>& b) {
    return a > b;
  };
  for (size_t p = 0; p < parts.size(); ++p) {
    if (!parts[p].ids.empty()) heads.emplace_back(parts[p].ids[0], p);
  }
  std::make_heap(heads.begin(), heads.end(), later);
  while (!heads.empty()) {
    std::pop_heap(heads.begin(), heads.end(), later);
    const auto [id, p] = heads.back();
    heads.pop_back();
    fn(id, p, next[p]++);
    if (next[p] < parts[p].ids.size()) {
      heads.emplace_back(parts[p].ids[next[p]], p);
      std::push_heap(heads.begin(), heads.end(), later);
    }
  }
}

// MergedCount: the number of distinct keys over all parts (a keys-only
// merge).
// MergeSumRowsInto: merges into caller memory of MergedCount entries
// (out_ids) and MergedCount x width values (out_values: e.g. the values
// region of an outgoing message, so the sum is written where it is sent
// from); returns that count. The rows of one key are summed in part order
// in AccumOf<T> and rounded to T once (bfloat16, float16: in float).
// One kernel per value type (ZEN_FOR_EACH_VALUE_TYPE).
#define ZEN_MERGE_ROWS(T, ...)                                                                 \
  size_t MergedCount(std::span<const RowsOf<T>> parts, MergeScratch& scratch);                 \
  size_t MergeSumRowsInto(std::span<const RowsOf<T>> parts, int64_t width, int64_t* out_ids,  \
                          T* out_values, MergeScratch& scratch);
ZEN_FOR_EACH_VALUE_TYPE(ZEN_MERGE_ROWS)
#undef ZEN_MERGE_ROWS

// Copies one row of width floats. Rows of up to 16 floats are copied
// inline in 16-byte pieces (the last one overlapping), not by a call to
// memcpy: a call per row of a narrow tensor (width 4: 16 bytes) costs more
// than the copy.
inline void CopyRow(float* dst, const float* src, int64_t width) {
  const size_t w = static_cast<size_t>(width);
  if (w >= 4 && w <= 16) {
    for (size_t k = 0; k + 4 < w; k += 4) std::memcpy(dst + k, src + k, 4 * sizeof(float));
    std::memcpy(dst + w - 4, src + w - 4, 4 * sizeof(float));
  } else if (w < 4) {  // width >= 1
    dst[0] = src[0];
    if (w > 1) dst[1] = src[1];
    if (w > 2) dst[2] = src[2];
  } else {
    std::memcpy(dst, src, w * sizeof(float));
  }
}
// One row of another value type (float64, the 16-bit types): a memcpy of
// its bytes.
template <typename T>
inline void CopyRow(T* dst, const T* src, int64_t width) {
  std::memcpy(dst, src, static_cast<size_t>(width) * sizeof(T));
}

}  // namespace zen
