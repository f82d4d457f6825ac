// zen/core/sparse_tensor.h — the row-sparse tensor every scheme consumes and
// produces.
//
// A SparseTensor stands for a dense [rows x width] matrix of which only the
// rows listed in `ids` may be non-zero. ids are sorted, unique int64 in
// [0, rows); values hold nnz x width values of the tensor's dtype (any of
// zen/core/dtype.h's ZEN_FOR_EACH_VALUE_TYPE), row-major, row i of `values` belonging to
// ids[i]. The factories take typed vectors or spans of any value type
// (float: float32; double: float64; Bfloat16, Float16: the 16-bit dtypes);
// values<T>() reads them as T, which must be the tensor's value type; value_bytes() is what moves. width 1 is an element-sparse tensor (top-k gradients);
// width > 1 is an embedding gradient. Sizes are int64/size_t throughout:
// rows above 2^31 and value arrays above 2 GiB work.
//
// A row that is listed is "present" even if all its values are zero: the
// global sum of N tensors has exactly the union of their rows.
//
// Usage:
//   auto t = zen::SparseTensor::FromCoo(/*rows=*/50000, /*width=*/64,
//                                       {7, 3, 7}, values,  // 3 x 64 floats
//                                       zen::Duplicates::kSum);
//   // t.ids() == {3, 7}; row 7 holds the sum of the two rows given for 7.
//   std::vector<float> dense = t.ToDense();   // 50000 x 64
//   auto back = zen::SparseTensor::FromDense(dense, 50000, 64);  // zero rows skipped
//   auto t64 = zen::SparseTensor::FromSorted(10, 1, {2}, std::vector<double>{1e300});
//   std::span<const double> v = t64.values<double>();  // t64.dtype() == DType::kFloat64
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "zen/core/dtype.h"

namespace zen {

// What FromCoo does with an id that appears more than once.
enum class Duplicates {
  kReject,  // InvalidArgument naming the id and both positions.
  kSum,     // rows with the same id are summed (coalesced).
};

class SparseTensor {
 public:
  // An empty 0 x 0 tensor (a placeholder; not a valid sync input).
  SparseTensor() = default;

  // A tensor with no present rows. rows >= 1 and width >= 1.
  static SparseTensor Empty(int64_t rows, int64_t width, std::string name = {},
                            DType dtype = DType::kFloat32);

  // From COO input in any order. Validates the shape (rows, width >= 1,
  // rows x width fits int64), every id against [0, rows) and values.size()
  // == ids.size() * width (checked); sorts; handles duplicates as told.
  // T is any value type (every factory); the float overloads take braced
  // lists. Duplicates summed: Add, rounded once per pair for 16-bit types.
  template <typename T>
  static SparseTensor FromCoo(int64_t rows, int64_t width, std::vector<int64_t> ids,
                              std::vector<T> values, Duplicates duplicates = Duplicates::kReject,
                              std::string name = {});
  static SparseTensor FromCoo(int64_t rows, int64_t width, std::vector<int64_t> ids,
                              std::vector<float> values, Duplicates duplicates = Duplicates::kReject,
                              std::string name = {}) {
    return FromCoo<float>(rows, width, std::move(ids), std::move(values), duplicates,
                          std::move(name));
  }

  // From ids the caller guarantees to be sorted and unique (e.g. produced by
  // a merge). Still checked in O(nnz); a violation is InvalidArgument.
  template <typename T>
  static SparseTensor FromSorted(int64_t rows, int64_t width, std::vector<int64_t> ids,
                                 std::vector<T> values, std::string name = {});
  static SparseTensor FromSorted(int64_t rows, int64_t width, std::vector<int64_t> ids,
                                 std::vector<float> values, std::string name = {}) {
    return FromSorted<float>(rows, width, std::move(ids), std::move(values), std::move(name));
  }
  // FromSorted without its O(nnz) pass over the ids, for producers whose
  // ids are sorted, unique and in range by construction (a scheme's
  // radix-sorted union of disjoint, validated partitions). The shape and the
  // value count are still checked; ids that break the promise are a bug of
  // the producer, caught only in debug and sanitizer builds (NDEBUG unset,
  // or ZEN_CHECK_INVARIANTS: ZEN_SANITIZE and ZEN_TSAN define it).
  template <typename T>
  static SparseTensor FromSortedUnchecked(int64_t rows, int64_t width, std::vector<int64_t> ids,
                                          std::vector<T> values, std::string name = {});
  static SparseTensor FromSortedUnchecked(int64_t rows, int64_t width, std::vector<int64_t> ids,
                                          std::vector<float> values, std::string name = {}) {
    return FromSortedUnchecked<float>(rows, width, std::move(ids), std::move(values),
                                      std::move(name));
  }

  // A tensor over the caller's memory, without a copy: ids sorted and
  // unique in [0, rows), values ids.size() x width floats, both checked in
  // O(nnz) with FromSorted's errors. The memory must stay alive and
  // unchanged while this tensor, or any copy of it, is in use (a copy of a
  // view views the same memory). mutable_values(), TakeIds() and
  // TakeValues() first copy the viewed rows into the tensor's own storage.
  // For input the caller already holds in this form (a coalesced sparse
  // gradient from a DDP bucket): every row is read where it lies.
  template <typename T>
  static SparseTensor View(int64_t rows, int64_t width, std::span<const int64_t> ids,
                           std::span<const T> values, std::string name = {});
  static SparseTensor View(int64_t rows, int64_t width, std::span<const int64_t> ids,
                           std::span<const float> values, std::string name = {}) {
    return View<float>(rows, width, ids, values, std::move(name));
  }
  // For arrays handed over in any order (the Python bindings): a View when
  // the ids are strictly increasing, as a coalesced gradient's are (one
  // pass checks range and order); otherwise a copy, sorted and duplicates
  // summed (FromCoo with Duplicates::kSum). Errors as FromCoo's.
  template <typename T>
  static SparseTensor ViewOrCoo(int64_t rows, int64_t width, std::span<const int64_t> ids,
                                std::span<const T> values, std::string name = {});
  static SparseTensor ViewOrCoo(int64_t rows, int64_t width, std::span<const int64_t> ids,
                                std::span<const float> values, std::string name = {}) {
    return ViewOrCoo<float>(rows, width, ids, values, std::move(name));
  }

  // From a dense row-major [rows x width] buffer: rows whose values are all
  // zero are skipped (for width 1: zero elements). dense.size() must equal
  // rows x width, computed without wrapping (rows 2^62 + 1 x width 4 is
  // InvalidArgument, not a 4-float buffer).
  template <typename T>
  static SparseTensor FromDense(std::span<const T> dense, int64_t rows, int64_t width,
                                std::string name = {});
  static SparseTensor FromDense(std::span<const float> dense, int64_t rows, int64_t width,
                                std::string name = {}) {
    return FromDense<float>(dense, rows, width, std::move(name));
  }

  int64_t rows() const { return rows_; }
  int64_t width() const { return width_; }
  DType dtype() const { return dtype_; }
  size_t nnz() const { return ids().size(); }
  bool empty() const { return nnz() == 0; }
  // Whether the rows are the caller's memory (View) rather than owned.
  bool is_view() const { return view_; }
  // A view copies its rows into its own storage and no longer refers to the
  // caller's memory; no-op for a tensor that owns its rows.
  void OwnRows();
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }

  std::span<const int64_t> ids() const {
    return view_ ? view_ids_ : std::span<const int64_t>(ids_);
  }
  // The values as T, which must be the dtype's value type (float for
  // float32, double for float64, Bfloat16, Float16): another T is InvalidArgument naming the
  // tensor and both dtypes (a caller's bug, checked once per call).
  template <typename T = float>
  std::span<const T> values() const {
    CheckValueType(DTypeOf<T>);
    if (view_) {
      return {reinterpret_cast<const T*>(view_values_.data()), view_values_.size() / sizeof(T)};
    }
    return Store<T>();
  }
  // The values as bytes (nnz x row_bytes()): what moves.
  std::span<const std::byte> value_bytes() const {
    if (view_) return view_values_;
    return WithValueType(dtype_, [&]<typename T>() {
      return std::as_bytes(std::span<const T>(Store<T>()));
    });
  }
  // A view first copies its rows into its own storage (see View).
  template <typename T = float>
  std::span<T> mutable_values() {
    CheckValueType(DTypeOf<T>);
    OwnRows();
    return Store<T>();
  }
  // The width values of the i-th present row (not row id i).
  template <typename T = float>
  std::span<const T> row(size_t i) const {
    const size_t w = static_cast<size_t>(width_);
    return values<T>().subspan(i * w, w);
  }

  // nnz / rows.
  double density() const;
  // Bytes of one row's values: width x the dtype's size.
  size_t row_bytes() const { return static_cast<size_t>(width_) * DTypeSize(dtype_); }

  // Dense [rows x width] copy; absent rows are zero. A shape whose dense
  // form cannot be counted or allocated is InvalidArgument naming the
  // tensor and the bytes (never std::bad_alloc or std::length_error).
  template <typename T = float>
  std::vector<T> ToDense() const;
  // Writes the dense form into out (size rows * width, checked without
  // wrapping): absent rows zeroed.
  template <typename T>
  void ToDense(std::span<T> out) const;
  void ToDense(std::span<float> out) const { ToDense<float>(out); }

  // Moves the storage out (for schemes that reuse buffers); a view's rows
  // are copied out.
  std::vector<int64_t> TakeIds() && {
    OwnRows();
    return std::move(ids_);
  }
  template <typename T = float>
  std::vector<T> TakeValues() && {
    CheckValueType(DTypeOf<T>);
    OwnRows();
    return std::move(Store<T>());
  }

  // Same shape, dtype, name, ids and values (owned or viewed alike).
  friend bool operator==(const SparseTensor& a, const SparseTensor& b);

 private:
  template <typename T>
  SparseTensor(int64_t rows, int64_t width, std::vector<int64_t> ids, std::vector<T> values,
               std::string name);
  // A view of checked ids and values.
  template <typename T>
  static SparseTensor Viewing(int64_t rows, int64_t width, std::span<const int64_t> ids,
                              std::span<const T> values, std::string name);
  // Checked ids in any order and their values, sorted into a new tensor
  // (stable: duplicates summed in input order, or rejected).
  template <typename T>
  static SparseTensor Coalesced(int64_t rows, int64_t width, std::span<const int64_t> ids,
                                std::span<const T> values, Duplicates duplicates,
                                std::string name);
  // InvalidArgument unless `want` is this tensor's dtype.
  void CheckValueType(DType want) const {
    if (want != dtype_) ThrowValueType(want);
  }
  [[noreturn]] void ThrowValueType(DType want) const;
  // The owned values of value type T (one vector per value type, so that a
  // scheme's result vector moves in and out without a copy).
  template <typename T>
  std::vector<T>& Store() {
    return values_.Of<T>();
  }
  template <typename T>
  const std::vector<T>& Store() const {
    return values_.Of<T>();
  }
  template <typename T>
  using Values = std::vector<T>;
  int64_t rows_ = 0;
  int64_t width_ = 0;
  DType dtype_ = DType::kFloat32;
  std::vector<int64_t> ids_;  // owned rows (empty for a view)
  PerValueType<Values> values_;  // owned values: the vector of the dtype's value type
  bool view_ = false;  // View: the rows are the caller's memory below
  std::span<const int64_t> view_ids_;
  std::span<const std::byte> view_values_;
  std::string name_;
};

// Checks rows >= 1, width >= 1 and that rows x width fits int64 (the dense
// shape a tensor stands for must be countable); InvalidArgument naming the
// tensor otherwise.
void ValidateShape(int64_t rows, int64_t width, const std::string& name);

// rows x width as a size_t element count whose byte count (x 4) also fits
// size_t: what a dense buffer of the shape holds. InvalidArgument naming the
// tensor and both operands on overflow or a negative size; never wraps.
size_t DenseElements(int64_t rows, int64_t width, std::string_view name = {});

}  // namespace zen
