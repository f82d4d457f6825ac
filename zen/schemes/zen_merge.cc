#include "zen/schemes/zen_merge.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "zen/core/partition.h"

namespace zen {


size_t MergedCount(std::span<const RowsView> parts, MergeScratch& scratch) {
  size_t count = 0;
  int64_t last = -1;
  bool any = false;
  ForEachMerged(parts, scratch, [&](int64_t id, size_t, size_t) {
    if (!any || id != last) ++count;
    any = true;
    last = id;
  });
  return count;
}

size_t MergeSumRowsInto(std::span<const RowsView> parts, int64_t width, int64_t* out_ids,
                        float* out_values, MergeScratch& scratch) {
  const size_t w = static_cast<size_t>(width);
  size_t out = 0;
  ForEachMerged(parts, scratch, [&](int64_t id, size_t p, size_t i) {
    const float* src = parts[p].values.data() + i * w;
    if (out > 0 && out_ids[out - 1] == id) {
      float* dst = out_values + (out - 1) * w;
      for (size_t k = 0; k < w; ++k) dst[k] += src[k];
    } else {
      out_ids[out] = id;
      CopyRow(out_values + out * w, src, width);
      ++out;
    }
  });
  return out;
}

void MergeSumRows(std::span<const RowsView> parts, int64_t width, std::vector<int64_t>& out_ids,
                  std::vector<float>& out_values, MergeScratch& scratch) {
  size_t total = 0;
  for (const RowsView& p : parts) total += p.ids.size();
  out_ids.resize(total);
  out_values.resize(total * static_cast<size_t>(width));
  const size_t count = MergeSumRowsInto(parts, width, out_ids.data(), out_values.data(), scratch);
  out_ids.resize(count);
  out_values.resize(count * static_cast<size_t>(width));
}

void MergeSumRows(std::span<const RowsView> parts, int64_t width, std::vector<int64_t>& out_ids,
                  std::vector<float>& out_values) {
  MergeScratch scratch;
  MergeSumRows(parts, width, out_ids, out_values, scratch);
}

}  // namespace zen
