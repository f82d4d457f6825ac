// zen/testing/reference.h — the dense reference every result is checked
// against (zen_testing: tests, the bench's verification; not installed).
//
// DenseReference is deliberately independent of the reduction kernels
// (zen/core/reduce.h): it sums every input in double precision into the
// sorted union of their rows (16-bit values widened exactly), so a test that compares a scheme's result with
// it does not share code with the scheme. Its memory is proportional to the
// non-zeros, not to rows x width (rows 2^62 with a few ids are fine).
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
  // For results written back into a dense buffer: rows_mismatch counts
  // present rows that are non-zero in neither (cannot tell cancellation), so
  // only value errors and rows that should be zero but are not are counted.
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
