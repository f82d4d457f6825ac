#include "zen/schemes/zen_merge.h"

#include <algorithm>
#include <cstring>
#include <functional>

namespace zen {

void MergeSumRows(std::span<const RowsView> parts, int64_t width, std::vector<int64_t>& out_ids,
                  std::vector<float>& out_values, MergeScratch& scratch) {
  const size_t w = static_cast<size_t>(width);
  size_t total = 0;
  for (const RowsView& p : parts) total += p.ids.size();
  out_ids.resize(total);
  out_values.resize(total * w);
  size_t out = 0;
  // Min-heap of (next key, part) over the parts that still have rows.
  auto& heads = scratch.heads;
  auto& next = scratch.next;
  heads.clear();
  next.assign(parts.size(), 0);
  const auto later = std::greater<std::pair<int64_t, size_t>>();
  for (size_t p = 0; p < parts.size(); ++p) {
    if (!parts[p].ids.empty()) heads.emplace_back(parts[p].ids[0], p);
  }
  std::make_heap(heads.begin(), heads.end(), later);
  while (!heads.empty()) {
    std::pop_heap(heads.begin(), heads.end(), later);
    const auto [id, p] = heads.back();
    heads.pop_back();
    const size_t i = next[p]++;
    const float* src = parts[p].values.data() + i * w;
    if (out > 0 && out_ids[out - 1] == id) {
      float* dst = out_values.data() + (out - 1) * w;
      for (size_t k = 0; k < w; ++k) dst[k] += src[k];
    } else {
      out_ids[out] = id;
      std::memcpy(out_values.data() + out * w, src, w * sizeof(float));
      ++out;
    }
    if (next[p] < parts[p].ids.size()) {
      heads.emplace_back(parts[p].ids[next[p]], p);
      std::push_heap(heads.begin(), heads.end(), later);
    }
  }
  out_ids.resize(out);
  out_values.resize(out * w);
}

void MergeSumRows(std::span<const RowsView> parts, int64_t width, std::vector<int64_t>& out_ids,
                  std::vector<float>& out_values) {
  MergeScratch scratch;
  MergeSumRows(parts, width, out_ids, out_values, scratch);
}

}  // namespace zen
