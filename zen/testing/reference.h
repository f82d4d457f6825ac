// zen/testing/reference.h — the dense reference every result is checked
// against (zen_testing: tests, the bench's verification; not installed).
//
// DenseReference is deliberately independent of the reduction kernels
// (zen/core/reduce.h): it sums every input in double precision, in input
// order, into the sorted union of their rows (16-bit values widened
// exactly), so a test that compares a scheme's result with it does not
// share code with the scheme. Its memory is proportional to the non-zeros,
// not to rows x width (rows 2^62 with a few ids are fine), which is what
// lets `zen bench` check tables of 10^9 rows (tools/zen/bench_worker.cc).
// Inputs of different shapes are a MismatchError.
//
// Usage:
//   zen::DenseReference ref(inputs);                       // independent
//   zen::Agreement a = ref.Compare(sum);
//   EXPECT_LE(a.max_rel_error, 1e-5); EXPECT_EQ(a.rows_mismatch, 0);
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "zen/core/sparse_tensor.h"

namespace zen {

// How far a result is from the reference.
struct Agreement {
  double max_rel_error = 0;   // max |got - ref| / max |ref| (absolute if ref is all zero)
  int64_t rows_mismatch = 0;  // rows present in exactly one of got and ref
};

// The sum of N inputs in double precision over the union of their rows
// (the dense sum, stored sparsely), with the set of present rows.
class DenseReference {
 public:
  explicit DenseReference(std::span<const SparseTensor> inputs);

  Agreement Compare(const SparseTensor& got) const;
  // For a result written densely (Scheme::SyncInto, `zen bench --output
  // dense`): [rows x width] values. The present rows are compared with the
  // sum; every other row must be all zero, and one that is not counts as a
  // mismatched row. A present row left zero counts only in max_rel_error (a
  // dense buffer cannot tell it from a row whose sum cancelled to zero).
  // A buffer of another size is an infinite error with every present row
  // mismatched.
#define ZEN_COMPARE_DENSE(T, ...) Agreement CompareDense(std::span<const T> got) const;
  ZEN_FOR_EACH_VALUE_TYPE(ZEN_COMPARE_DENSE)
#undef ZEN_COMPARE_DENSE

  int64_t rows() const { return rows_; }
  int64_t width() const { return width_; }
  int64_t present_rows() const { return present_count_; }

 private:
  template <typename T>
  Agreement CompareDenseValues(std::span<const T> got) const;
  // Index of id in ids_, or ids_.size() when no input has that row.
  size_t Slot(int64_t id) const;

  int64_t rows_ = 0;
  int64_t width_ = 0;
  int64_t present_count_ = 0;
  double max_abs_ = 0;
  std::vector<int64_t> ids_;  // sorted union of the inputs' rows
  std::vector<double> sum_;   // ids_.size() x width, row-major
};

}  // namespace zen
