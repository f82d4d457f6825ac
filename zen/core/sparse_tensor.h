// zen/core/sparse_tensor.h — the row-sparse tensor every scheme consumes and
// produces.
//
// A SparseTensor stands for a dense [rows x width] float matrix of which only
// the rows listed in `ids` may be non-zero. ids are sorted, unique int64 in
// [0, rows); values hold nnz x width floats, row-major, row i of `values`
// belonging to ids[i]. width 1 is an element-sparse tensor (top-k gradients);
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
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

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
  static SparseTensor Empty(int64_t rows, int64_t width, std::string name = {});

  // From COO input in any order. Validates the shape (rows, width >= 1,
  // rows x width fits int64), every id against [0, rows) and values.size()
  // == ids.size() * width (checked); sorts; handles duplicates as told.
  static SparseTensor FromCoo(int64_t rows, int64_t width, std::vector<int64_t> ids,
                              std::vector<float> values, Duplicates duplicates = Duplicates::kReject,
                              std::string name = {});

  // From ids the caller guarantees to be sorted and unique (e.g. produced by
  // a merge). Still checked in O(nnz); a violation is InvalidArgument.
  static SparseTensor FromSorted(int64_t rows, int64_t width, std::vector<int64_t> ids,
                                 std::vector<float> values, std::string name = {});
  // FromSorted without its O(nnz) pass over the ids, for producers whose
  // ids are sorted, unique and in range by construction (a scheme's
  // radix-sorted union of disjoint, validated partitions). The shape and the
  // value count are still checked; ids that break the promise are a bug of
  // the producer, caught only in debug and sanitizer builds (NDEBUG unset,
  // or ZEN_CHECK_INVARIANTS: ZEN_SANITIZE and ZEN_TSAN define it).
  static SparseTensor FromSortedUnchecked(int64_t rows, int64_t width, std::vector<int64_t> ids,
                                          std::vector<float> values, std::string name = {});

  // A tensor over the caller's memory, without a copy: ids sorted and
  // unique in [0, rows), values ids.size() x width floats, both checked in
  // O(nnz) with FromSorted's errors. The memory must stay alive and
  // unchanged while this tensor, or any copy of it, is in use (a copy of a
  // view views the same memory). mutable_values(), TakeIds() and
  // TakeValues() first copy the viewed rows into the tensor's own storage.
  // For input the caller already holds in this form (a coalesced sparse
  // gradient from a DDP bucket): every row is read where it lies.
  static SparseTensor View(int64_t rows, int64_t width, std::span<const int64_t> ids,
                           std::span<const float> values, std::string name = {});
  // For arrays handed over in any order (the Python bindings): a View when
  // the ids are strictly increasing, as a coalesced gradient's are (one
  // pass checks range and order); otherwise a copy, sorted and duplicates
  // summed (FromCoo with Duplicates::kSum). Errors as FromCoo's.
  static SparseTensor ViewOrCoo(int64_t rows, int64_t width, std::span<const int64_t> ids,
                                std::span<const float> values, std::string name = {});

  // From a dense row-major [rows x width] buffer: rows whose values are all
  // zero are skipped (for width 1: zero elements). dense.size() must equal
  // rows x width, computed without wrapping (rows 2^62 + 1 x width 4 is
  // InvalidArgument, not a 4-float buffer).
  static SparseTensor FromDense(std::span<const float> dense, int64_t rows, int64_t width,
                                std::string name = {});

  int64_t rows() const { return rows_; }
  int64_t width() const { return width_; }
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
  std::span<const float> values() const {
    return view_ ? view_values_ : std::span<const float>(values_);
  }
  // A view first copies its rows into its own storage (see View).
  std::span<float> mutable_values() {
    OwnRows();
    return values_;
  }
  // The width values of the i-th present row (not row id i).
  std::span<const float> row(size_t i) const;

  // nnz / rows.
  double density() const;
  // Bytes of one row's values.
  size_t row_bytes() const { return static_cast<size_t>(width_) * sizeof(float); }

  // Dense [rows x width] copy; absent rows are zero. A shape whose dense
  // form cannot be counted or allocated is InvalidArgument naming the
  // tensor and the bytes (never std::bad_alloc or std::length_error).
  std::vector<float> ToDense() const;
  // Writes the dense form into out (size rows * width, checked without
  // wrapping): absent rows zeroed.
  void ToDense(std::span<float> out) const;

  // Moves the storage out (for schemes that reuse buffers); a view's rows
  // are copied out.
  std::vector<int64_t> TakeIds() && {
    OwnRows();
    return std::move(ids_);
  }
  std::vector<float> TakeValues() && {
    OwnRows();
    return std::move(values_);
  }

  // Same shape, name, ids and values (owned or viewed alike).
  friend bool operator==(const SparseTensor& a, const SparseTensor& b);

 private:
  SparseTensor(int64_t rows, int64_t width, std::vector<int64_t> ids, std::vector<float> values,
               std::string name);
  // A view of checked ids and values.
  static SparseTensor Viewing(int64_t rows, int64_t width, std::span<const int64_t> ids,
                              std::span<const float> values, std::string name);
  // Checked ids in any order and their values, sorted into a new tensor
  // (stable: duplicates summed in input order, or rejected).
  static SparseTensor Coalesced(int64_t rows, int64_t width, std::span<const int64_t> ids,
                                std::span<const float> values, Duplicates duplicates,
                                std::string name);
  int64_t rows_ = 0;
  int64_t width_ = 0;
  std::vector<int64_t> ids_;  // owned rows (empty for a view)
  std::vector<float> values_;
  bool view_ = false;  // View: the rows are the caller's memory below
  std::span<const int64_t> view_ids_;
  std::span<const float> view_values_;
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
