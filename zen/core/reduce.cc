#include "zen/core/reduce.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "zen/core/checked.h"
#include "zen/core/error.h"

namespace zen {
namespace {

void CheckSameShape(const SparseTensor& a, const SparseTensor& b) {
  if (a.rows() != b.rows() || a.width() != b.width()) {
    throw InvalidArgument(Where{-1, a.name()}, "shape [", a.rows(), ", ", a.width(),
                          "] does not match [", b.rows(), ", ", b.width(), "]");
  }
  if (a.dtype() != b.dtype()) {
    throw InvalidArgument(Where{-1, a.name()}, "dtype ", DTypeName(a.dtype()), " does not match ",
                          DTypeName(b.dtype()));
  }
}

template <typename T>
void AddIntoT(std::span<T> dst, std::span<const T> src) {
  if (dst.size() != src.size()) {
    throw InvalidArgument("AddInto: sizes " + std::to_string(dst.size()) + " and " +
                          std::to_string(src.size()) + " differ");
  }
  T* d = dst.data();
  const T* s = src.data();
  if constexpr (std::is_same_v<AccumOf<T>, T>) {
    for (size_t i = 0, n = dst.size(); i < n; ++i) d[i] += s[i];
  } else {
    for (size_t i = 0, n = dst.size(); i < n; ++i) d[i] = Add(d[i], s[i]);
  }
}

template <typename T>
size_t MergeSumIntoT(std::span<const int64_t> ia, std::span<const T> va,
                     std::span<const int64_t> ib, std::span<const T> vb, int64_t width,
                     int64_t* out_ids, T* out_values) {
  const size_t w = static_cast<size_t>(width);
  size_t i = 0, j = 0, k = 0;
  for (; i < ia.size() || j < ib.size(); ++k) {
    T* dst = out_values + k * w;
    if (j == ib.size() || (i < ia.size() && ia[i] < ib[j])) {
      out_ids[k] = ia[i];
      std::copy_n(va.data() + i++ * w, w, dst);
    } else if (i == ia.size() || ib[j] < ia[i]) {
      out_ids[k] = ib[j];
      std::copy_n(vb.data() + j++ * w, w, dst);
    } else {
      out_ids[k] = ia[i];
      const T* x = va.data() + i++ * w;
      const T* y = vb.data() + j++ * w;
      for (size_t c = 0; c < w; ++c) dst[c] = Add(x[c], y[c]);
    }
  }
  return k;
}

}  // namespace

template <typename T>
void AddWidenedInto(std::span<AccumOf<T>> acc, std::span<const T> src) {
  if constexpr (std::is_same_v<AccumOf<T>, T>) {
    AddIntoT<T>(acc, src);
  } else {
    if (acc.size() != src.size()) {
      throw InvalidArgument("AddWidenedInto: sizes " + std::to_string(acc.size()) + " and " +
                            std::to_string(src.size()) + " differ");
    }
    for (size_t i = 0, n = acc.size(); i < n; ++i) acc[i] += Widen(src[i]);
  }
}

template <typename T>
void NarrowInto(std::span<T> dst, std::span<const AccumOf<T>> acc) {
  if (dst.size() != acc.size()) {
    throw InvalidArgument("NarrowInto: sizes " + std::to_string(dst.size()) + " and " +
                          std::to_string(acc.size()) + " differ");
  }
  for (size_t i = 0, n = dst.size(); i < n; ++i) dst[i] = Narrow<T>(acc[i]);
}

// The kernels of every value type (dtype.h).
#define ZEN_REDUCE_KERNELS(T, ...)                                                          \
  void AddInto(std::span<T> dst, std::span<const T> src) { AddIntoT(dst, src); }           \
  size_t MergeSumInto(std::span<const int64_t> ia, std::span<const T> va,                  \
                      std::span<const int64_t> ib, std::span<const T> vb, int64_t width,   \
                      int64_t* out_ids, T* out_values) {                                   \
    return MergeSumIntoT(ia, va, ib, vb, width, out_ids, out_values);                      \
  }                                                                                         \
  template void AddWidenedInto<T>(std::span<AccumOf<T>>, std::span<const T>);              \
  template void NarrowInto<T>(std::span<T>, std::span<const AccumOf<T>>);
ZEN_FOR_EACH_VALUE_TYPE(ZEN_REDUCE_KERNELS)
#undef ZEN_REDUCE_KERNELS

SparseTensor MergeSum(const SparseTensor& a, const SparseTensor& b) {
  CheckSameShape(a, b);
  return WithValueType(a.dtype(), [&]<typename T>() {
    const size_t w = static_cast<size_t>(a.width());
    std::vector<int64_t> ids(a.nnz() + b.nnz());
    std::vector<T> values(ids.size() * w);
    const size_t n = MergeSumInto(a.ids(), a.values<T>(), b.ids(), b.values<T>(), a.width(),
                                  ids.data(), values.data());
    ids.resize(n);
    values.resize(n * w);
    return SparseTensor::FromSorted(a.rows(), a.width(), std::move(ids), std::move(values),
                                    a.name());
  });
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
  return WithValueType(parts[0].dtype(), [&]<typename T>() {
    const size_t w = static_cast<size_t>(parts[0].width());
    std::vector<int64_t> ids = UnionIds(parts);
    std::vector<AccumOf<T>> sums(ids.size() * w, AccumOf<T>{0});
    for (const auto& p : parts) {
      auto pid = p.ids();
      size_t u = 0;
      for (size_t i = 0; i < pid.size(); ++i) {
        u = static_cast<size_t>(std::lower_bound(ids.begin() + u, ids.end(), pid[i]) -
                                ids.begin());
        AddWidenedInto<T>(std::span<AccumOf<T>>(sums).subspan(u * w, w), p.row<T>(i));
      }
    }
    std::vector<T> values;
    if constexpr (std::is_same_v<AccumOf<T>, T>) {
      values = std::move(sums);
    } else {
      values.resize(sums.size());
      NarrowInto<T>(values, sums);
    }
    return SparseTensor::FromSorted(parts[0].rows(), parts[0].width(), std::move(ids),
                                    std::move(values), parts[0].name());
  });
}

}  // namespace zen
