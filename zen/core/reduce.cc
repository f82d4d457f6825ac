#include "zen/core/reduce.h"

#include <algorithm>
#include <cmath>

#include "zen/core/checked.h"
#include "zen/core/error.h"

namespace zen {
namespace {

void CheckSameShape(const SparseTensor& a, const SparseTensor& b) {
  if (a.rows() != b.rows() || a.width() != b.width()) {
    throw InvalidArgument(Where{-1, a.name()}, "shape [", a.rows(), ", ", a.width(),
                          "] does not match [", b.rows(), ", ", b.width(), "]");
  }
}

}  // namespace

void AddInto(std::span<float> dst, std::span<const float> src) {
  if (dst.size() != src.size()) {
    throw InvalidArgument("AddInto: sizes " + std::to_string(dst.size()) + " and " +
                          std::to_string(src.size()) + " differ");
  }
  float* d = dst.data();
  const float* s = src.data();
  for (size_t i = 0, n = dst.size(); i < n; ++i) d[i] += s[i];
}

SparseTensor MergeSum(const SparseTensor& a, const SparseTensor& b) {
  CheckSameShape(a, b);
  const size_t w = static_cast<size_t>(a.width());
  auto ia = a.ids(), ib = b.ids();
  std::vector<int64_t> ids;
  std::vector<float> values;
  ids.reserve(ia.size() + ib.size());
  values.reserve((ia.size() + ib.size()) * w);
  size_t i = 0, j = 0;
  while (i < ia.size() || j < ib.size()) {
    if (j == ib.size() || (i < ia.size() && ia[i] < ib[j])) {
      ids.push_back(ia[i]);
      auto r = a.row(i++);
      values.insert(values.end(), r.begin(), r.end());
    } else if (i == ia.size() || ib[j] < ia[i]) {
      ids.push_back(ib[j]);
      auto r = b.row(j++);
      values.insert(values.end(), r.begin(), r.end());
    } else {
      ids.push_back(ia[i]);
      auto r = a.row(i++);
      values.insert(values.end(), r.begin(), r.end());
      AddInto(std::span<float>(values).last(w), b.row(j++));
    }
  }
  return SparseTensor::FromSorted(a.rows(), a.width(), std::move(ids), std::move(values), a.name());
}

std::vector<int64_t> UnionIds(std::span<const SparseTensor> parts) {
  std::vector<int64_t> ids;
  size_t total = 0;
  for (const auto& p : parts) total += p.nnz();
  ids.reserve(total);
  for (const auto& p : parts) ids.insert(ids.end(), p.ids().begin(), p.ids().end());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

SparseTensor SumAll(std::span<const SparseTensor> parts) {
  if (parts.empty()) throw InvalidArgument("SumAll needs at least one tensor");
  for (const auto& p : parts) CheckSameShape(parts[0], p);
  if (parts.size() == 1) return parts[0];
  if (parts.size() == 2) return MergeSum(parts[0], parts[1]);
  const size_t w = static_cast<size_t>(parts[0].width());
  std::vector<int64_t> ids = UnionIds(parts);
  std::vector<float> values(ids.size() * w, 0.0f);
  for (const auto& p : parts) {
    auto pid = p.ids();
    size_t u = 0;
    for (size_t i = 0; i < pid.size(); ++i) {
      u = static_cast<size_t>(std::lower_bound(ids.begin() + u, ids.end(), pid[i]) - ids.begin());
      AddInto(std::span<float>(values).subspan(u * w, w), p.row(i));
    }
  }
  return SparseTensor::FromSorted(parts[0].rows(), parts[0].width(), std::move(ids),
                                  std::move(values), parts[0].name());
}

}  // namespace zen
