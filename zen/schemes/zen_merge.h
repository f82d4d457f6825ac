// zen/schemes/zen_merge.h — the n-way sorted merge ZEN's servers aggregate
// with (and workers reassemble the disjoint server partitions with).
//
// Each part is a list of rows with strictly ascending ids; the result has
// the union of the ids, ascending, and the sum of the rows that share an id.
// O(total rows x log parts) comparisons plus one pass over the values.
//
// Usage:
//   std::vector<zen::RowsView> parts = {{ids_a, values_a}, {ids_b, values_b}};
//   std::vector<int64_t> ids; std::vector<float> values;
//   zen::MergeSumRows(parts, width, ids, values);
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace zen {

struct RowsView {
  std::span<const int64_t> ids;
  std::span<const float> values;  // ids.size() x width
};

// out_ids / out_values are replaced.
void MergeSumRows(std::span<const RowsView> parts, int64_t width, std::vector<int64_t>& out_ids,
                  std::vector<float>& out_values);

}  // namespace zen
