#include "zen/core/merge_rows.h"

#include <algorithm>
#include <cstring>

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

}  // namespace zen
