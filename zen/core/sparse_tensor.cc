#include "zen/core/sparse_tensor.h"

#include <algorithm>
#include <new>
#include <numeric>
#include <stdexcept>

#include "zen/core/checked.h"
#include "zen/core/error.h"
#include "zen/core/float_scan.h"

namespace zen {
namespace {

void CheckValueCount(size_t nnz, int64_t width, size_t values, const std::string& name) {
  size_t want = 0;
  if (!TryMul(nnz, static_cast<size_t>(width), want)) {
    throw InvalidArgument(Where{-1, name}, "values: ", nnz, " ids x width ", width,
                          " overflows size_t");
  }
  if (values != want) {
    throw InvalidArgument(Where{-1, name}, "values has ", values, " floats, expected ", nnz,
                          " ids x width ", width, " = ", want);
  }
}

void CheckRange(std::span<const int64_t> ids, int64_t rows, const std::string& name) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= rows) {
      throw InvalidArgument(Where{-1, name}, "id ", ids[i], " at position ", i,
                            " is outside [0, ", rows, ")");
    }
  }
}

}  // namespace

void ValidateShape(int64_t rows, int64_t width, const std::string& name) {
  if (rows < 1) throw InvalidArgument(Where{-1, name}, "rows must be >= 1, got ", rows);
  if (width < 1) throw InvalidArgument(Where{-1, name}, "width must be >= 1, got ", width);
  int64_t elements = 0;
  if (!TryMul(rows, width, elements)) {
    throw InvalidArgument(Where{-1, name}, "rows ", rows, " x width ", width,
                          " overflows int64: the dense shape has more than 2^63 - 1 elements");
  }
}

size_t DenseElements(int64_t rows, int64_t width, std::string_view name) {
  // Negative sizes, and rows x width x 4 beyond int64 / size_t, are rejected.
  CheckedBytes(rows, width, sizeof(float), Where{-1, name}, "dense rows x width x 4 bytes");
  return static_cast<size_t>(rows) * static_cast<size_t>(width);
}

template <typename T>
SparseTensor::SparseTensor(int64_t rows, int64_t width, std::vector<int64_t> ids,
                           std::vector<T> values, std::string name)
    : rows_(rows), width_(width), dtype_(DTypeOf<T>), ids_(std::move(ids)),
      name_(std::move(name)) {
  Store<T>() = std::move(values);
}

SparseTensor SparseTensor::Empty(int64_t rows, int64_t width, std::string name, DType dtype) {
  ValidateShape(rows, width, name);
  return WithValueType(dtype, [&]<typename T>() {
    return SparseTensor(rows, width, {}, std::vector<T>{}, std::move(name));
  });
}

void SparseTensor::ThrowValueType(DType want) const {
  throw InvalidArgument(Where{-1, name_}, "values of dtype ", DTypeName(dtype_), " read as ",
                        DTypeName(want));
}

namespace {

// One pass: every id in range (CheckRange's error for the first that is
// not) and whether each is above its predecessor.
bool InRangeAndSorted(std::span<const int64_t> ids, int64_t rows, const std::string& name) {
  bool sorted = true;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= rows) CheckRange(ids, rows, name);
    sorted &= i == 0 || ids[i] > ids[i - 1];
  }
  return sorted;
}

// Every id in range and above its predecessor (an id out of range is
// reported before an order violation).
void CheckSortedInRange(std::span<const int64_t> ids, int64_t rows, const std::string& name) {
  if (!InRangeAndSorted(ids, rows, name)) {
    for (size_t i = 1; i < ids.size(); ++i) {
      if (ids[i] <= ids[i - 1]) {
        throw InvalidArgument(Where{-1, name}, "ids not sorted and unique: id ", ids[i],
                              " at position ", i, " follows ", ids[i - 1]);
      }
    }
  }
}

}  // namespace

template <typename T>
SparseTensor SparseTensor::FromSorted(int64_t rows, int64_t width, std::vector<int64_t> ids,
                                      std::vector<T> values, std::string name) {
  ValidateShape(rows, width, name);
  CheckValueCount(ids.size(), width, values.size(), name);
  CheckSortedInRange(ids, rows, name);
  return SparseTensor(rows, width, std::move(ids), std::move(values), std::move(name));
}

template <typename T>
SparseTensor SparseTensor::FromSortedUnchecked(int64_t rows, int64_t width,
                                               std::vector<int64_t> ids,
                                               std::vector<T> values, std::string name) {
  ValidateShape(rows, width, name);
  CheckValueCount(ids.size(), width, values.size(), name);
#if !defined(NDEBUG) || defined(ZEN_CHECK_INVARIANTS)
  CheckSortedInRange(ids, rows, name);
#endif
  return SparseTensor(rows, width, std::move(ids), std::move(values), std::move(name));
}

template <typename T>
SparseTensor SparseTensor::View(int64_t rows, int64_t width, std::span<const int64_t> ids,
                                std::span<const T> values, std::string name) {
  ValidateShape(rows, width, name);
  CheckValueCount(ids.size(), width, values.size(), name);
  CheckSortedInRange(ids, rows, name);
  return Viewing(rows, width, ids, values, std::move(name));
}

template <typename T>
SparseTensor SparseTensor::ViewOrCoo(int64_t rows, int64_t width, std::span<const int64_t> ids,
                                     std::span<const T> values, std::string name) {
  ValidateShape(rows, width, name);
  CheckValueCount(ids.size(), width, values.size(), name);
  if (InRangeAndSorted(ids, rows, name)) return Viewing(rows, width, ids, values, std::move(name));
  return Coalesced(rows, width, ids, values, Duplicates::kSum, std::move(name));
}

template <typename T>
SparseTensor SparseTensor::Viewing(int64_t rows, int64_t width, std::span<const int64_t> ids,
                                   std::span<const T> values, std::string name) {
  SparseTensor t(rows, width, {}, std::vector<T>{}, std::move(name));
  t.view_ = true;
  t.view_ids_ = ids;
  t.view_values_ = std::as_bytes(values);
  return t;
}

void SparseTensor::OwnRows() {
  if (!view_) return;
  ids_.assign(view_ids_.begin(), view_ids_.end());
  WithValueType(dtype_, [&]<typename T>() {
    const std::span<const T> v{reinterpret_cast<const T*>(view_values_.data()),
                               view_values_.size() / sizeof(T)};
    Store<T>().assign(v.begin(), v.end());
  });
  view_ = false;
  view_ids_ = {};
  view_values_ = {};
}

bool operator==(const SparseTensor& a, const SparseTensor& b) {
  if (a.rows_ != b.rows_ || a.width_ != b.width_ || a.dtype_ != b.dtype_ || a.name_ != b.name_ ||
      !std::ranges::equal(a.ids(), b.ids())) {
    return false;
  }
  return WithValueType(a.dtype_, [&]<typename T>() {
    return std::ranges::equal(a.values<T>(), b.values<T>());
  });
}

template <typename T>
SparseTensor SparseTensor::FromCoo(int64_t rows, int64_t width, std::vector<int64_t> ids,
                                   std::vector<T> values, Duplicates duplicates,
                                   std::string name) {
  ValidateShape(rows, width, name);
  CheckValueCount(ids.size(), width, values.size(), name);
  if (InRangeAndSorted(ids, rows, name)) {
    return SparseTensor(rows, width, std::move(ids), std::move(values), std::move(name));
  }
  return Coalesced(rows, width, std::span<const int64_t>(ids), std::span<const T>(values),
                   duplicates, std::move(name));
}

template <typename T>
SparseTensor SparseTensor::Coalesced(int64_t rows, int64_t width, std::span<const int64_t> ids,
                                     std::span<const T> values, Duplicates duplicates,
                                     std::string name) {
  std::vector<size_t> order(ids.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ids[a] < ids[b]; });
  const size_t w = static_cast<size_t>(width);
  std::vector<int64_t> out_ids;
  std::vector<T> out_values;
  out_ids.reserve(ids.size());
  out_values.reserve(values.size());
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t src = order[k];
    const T* row = values.data() + src * w;
    if (!out_ids.empty() && out_ids.back() == ids[src]) {
      if (duplicates == Duplicates::kReject) {
        throw InvalidArgument(Where{-1, name}, "duplicate id ", ids[src], " at positions ",
                              order[k - 1], " and ", src);
      }
      T* dst = out_values.data() + (out_ids.size() - 1) * w;
      for (size_t j = 0; j < w; ++j) dst[j] = Add(dst[j], row[j]);
      continue;
    }
    out_ids.push_back(ids[src]);
    out_values.insert(out_values.end(), row, row + w);
  }
  return SparseTensor(rows, width, std::move(out_ids), std::move(out_values), std::move(name));
}

template <typename T>
SparseTensor SparseTensor::FromDense(std::span<const T> dense, int64_t rows, int64_t width,
                                     std::string name) {
  ValidateShape(rows, width, name);
  const size_t elements = DenseElements(rows, width, name);
  const size_t w = static_cast<size_t>(width);
  if (dense.size() != elements) {
    throw InvalidArgument(Where{-1, name}, "dense buffer has ", dense.size(),
                          " floats, expected rows ", rows, " x width ", width);
  }
  std::vector<int64_t> ids;
  std::vector<T> values;
  ForEachNonZeroRow(dense.data(), width, 0, rows, [&](int64_t r) {
    const T* row = dense.data() + static_cast<size_t>(r) * w;
    ids.push_back(r);
    values.insert(values.end(), row, row + w);
  });
  return SparseTensor(rows, width, std::move(ids), std::move(values), std::move(name));
}

double SparseTensor::density() const {
  return rows_ == 0 ? 0.0 : static_cast<double>(nnz()) / static_cast<double>(rows_);
}

template <typename T>
std::vector<T> SparseTensor::ToDense() const {
  const size_t elements = DenseElements(rows_, width_, name_);
  size_t product = 0;  // x 4 fits (DenseElements); x 8 may not
  const std::string bytes = TryMul(elements, sizeof(T), product)
                                ? std::to_string(product)
                                : detail::Concat(elements, " x ", sizeof(T));
  std::vector<T> out;
  try {
    out.resize(elements);
  } catch (const std::bad_alloc&) {
    throw InvalidArgument(Where{-1, name_}, "the dense form of rows ", rows_, " x width ", width_,
                          " needs ", bytes, " bytes: out of memory");
  } catch (const std::length_error&) {
    throw InvalidArgument(Where{-1, name_}, "the dense form of rows ", rows_, " x width ", width_,
                          " needs ", bytes, " bytes: more than a vector holds");
  }
  ToDense<T>(std::span<T>(out));
  return out;
}

template <typename T>
void SparseTensor::ToDense(std::span<T> out) const {
  const size_t elements = DenseElements(rows_, width_, name_);
  const size_t w = static_cast<size_t>(width_);
  if (out.size() != elements) {
    throw InvalidArgument(Where{-1, name_}, "dense output has ", out.size(),
                          " floats, expected rows ", rows_, " x width ", width_);
  }
  std::fill(out.begin(), out.end(), T{0});
  const std::span<const int64_t> ids = this->ids();
  const T* values = this->values<T>().data();
  for (size_t i = 0; i < ids.size(); ++i) {
    std::copy_n(values + i * w, w, out.data() + static_cast<size_t>(ids[i]) * w);
  }
}

// The value types a tensor holds (dtype.h).
#define ZEN_SPARSE_TENSOR_VALUE_TYPE(T, ...)                                                         \
  template SparseTensor SparseTensor::FromCoo<T>(int64_t, int64_t, std::vector<int64_t>,         \
                                                 std::vector<T>, Duplicates, std::string);       \
  template SparseTensor SparseTensor::FromSorted<T>(int64_t, int64_t, std::vector<int64_t>,      \
                                                    std::vector<T>, std::string);                \
  template SparseTensor SparseTensor::FromSortedUnchecked<T>(                                     \
      int64_t, int64_t, std::vector<int64_t>, std::vector<T>, std::string);                       \
  template SparseTensor SparseTensor::View<T>(int64_t, int64_t, std::span<const int64_t>,        \
                                              std::span<const T>, std::string);                  \
  template SparseTensor SparseTensor::ViewOrCoo<T>(int64_t, int64_t, std::span<const int64_t>,   \
                                                   std::span<const T>, std::string);             \
  template SparseTensor SparseTensor::FromDense<T>(std::span<const T>, int64_t, int64_t,         \
                                                   std::string);                                 \
  template std::vector<T> SparseTensor::ToDense<T>() const;                                       \
  template void SparseTensor::ToDense<T>(std::span<T>) const;
ZEN_FOR_EACH_VALUE_TYPE(ZEN_SPARSE_TENSOR_VALUE_TYPE)
#undef ZEN_SPARSE_TENSOR_VALUE_TYPE

}  // namespace zen
