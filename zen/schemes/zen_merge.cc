#include "zen/schemes/zen_merge.h"

#include <cstring>
#include <functional>
#include <queue>
#include <utility>

namespace zen {

void MergeSumRows(std::span<const RowsView> parts, int64_t width, std::vector<int64_t>& out_ids,
                  std::vector<float>& out_values) {
  const size_t w = static_cast<size_t>(width);
  size_t total = 0;
  for (const RowsView& p : parts) total += p.ids.size();
  out_ids.clear();
  out_ids.reserve(total);
  out_values.clear();
  out_values.reserve(total * w);
  // (next id, part) of every part that still has rows.
  using Head = std::pair<int64_t, size_t>;
  std::priority_queue<Head, std::vector<Head>, std::greater<Head>> heads;
  std::vector<size_t> next(parts.size(), 0);
  for (size_t p = 0; p < parts.size(); ++p) {
    if (!parts[p].ids.empty()) heads.emplace(parts[p].ids[0], p);
  }
  while (!heads.empty()) {
    const auto [id, p] = heads.top();
    heads.pop();
    const size_t i = next[p]++;
    const float* src = parts[p].values.data() + i * w;
    if (!out_ids.empty() && out_ids.back() == id) {
      float* dst = out_values.data() + (out_ids.size() - 1) * w;
      for (size_t k = 0; k < w; ++k) dst[k] += src[k];
    } else {
      out_ids.push_back(id);
      out_values.insert(out_values.end(), src, src + w);
    }
    if (next[p] < parts[p].ids.size()) heads.emplace(parts[p].ids[next[p]], p);
  }
}

}  // namespace zen
