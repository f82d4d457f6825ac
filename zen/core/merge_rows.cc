#include "zen/core/merge_rows.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "zen/core/reduce.h"

namespace zen {

namespace {

template <typename T>
size_t MergedCountT(std::span<const RowsOf<T>> parts, MergeScratch& scratch) {
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

template <typename T>
size_t MergeSumRowsIntoT(std::span<const RowsOf<T>> parts, int64_t width, int64_t* out_ids,
                         T* out_values, MergeScratch& scratch) {
  const size_t w = static_cast<size_t>(width);
  size_t out = 0;
  if constexpr (std::is_same_v<AccumOf<T>, T>) {
    ForEachMerged(parts, scratch, [&](int64_t id, size_t p, size_t i) {
      const T* src = parts[p].values.data() + i * w;
      if (out > 0 && out_ids[out - 1] == id) {
        T* dst = out_values + (out - 1) * w;
        for (size_t k = 0; k < w; ++k) dst[k] += src[k];
      } else {
        out_ids[out] = id;
        if constexpr (std::is_same_v<T, float>) {
          CopyRow(out_values + out * w, src, width);
        } else {
          std::memcpy(out_values + out * w, src, w * sizeof(T));
        }
        ++out;
      }
    });
  } else {
    // The row of the current key is summed in float (scratch.row_sum) while
    // a second part adds to it, and rounded into out_values once, when the
    // next key starts. `summing`: the current row has more than one part.
    std::vector<float>& sum = scratch.row_sum;
    sum.resize(w);
    bool summing = false;
    const auto finish = [&] {
      if (summing) NarrowInto<T>(std::span<T>(out_values + (out - 1) * w, w), sum);
      summing = false;
    };
    ForEachMerged(parts, scratch, [&](int64_t id, size_t p, size_t i) {
      const T* src = parts[p].values.data() + i * w;
      if (out > 0 && out_ids[out - 1] == id) {
        if (!summing) {
          const T* first = out_values + (out - 1) * w;
          for (size_t k = 0; k < w; ++k) sum[k] = Widen(first[k]);
          summing = true;
        }
        AddWidenedInto<T>(sum, std::span<const T>(src, w));
      } else {
        finish();
        out_ids[out] = id;
        std::memcpy(out_values + out * w, src, w * sizeof(T));
        ++out;
      }
    });
    finish();
  }
  return out;
}

}  // namespace

// The kernels of every value type (dtype.h).
#define ZEN_MERGE_ROWS(T, ...)                                                                 \
  size_t MergedCount(std::span<const RowsOf<T>> parts, MergeScratch& scratch) {                \
    return MergedCountT(parts, scratch);                                                       \
  }                                                                                            \
  size_t MergeSumRowsInto(std::span<const RowsOf<T>> parts, int64_t width, int64_t* out_ids,  \
                          T* out_values, MergeScratch& scratch) {                              \
    return MergeSumRowsIntoT(parts, width, out_ids, out_values, scratch);                      \
  }
ZEN_FOR_EACH_VALUE_TYPE(ZEN_MERGE_ROWS)
#undef ZEN_MERGE_ROWS

}  // namespace zen
