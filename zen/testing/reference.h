// zen/testing/reference.h — the dense reference every result is checked
// against (zen_testing: tests, the bench's verification; not installed).
//
// DenseReference is deliberately independent of the reduction kernels
// (zen/core/reduce.h): it scatters every input into a dense double buffer,
// so a test that compares a scheme's result with it does not share code
// with the scheme.
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

// The dense sum of N inputs in double precision, with the set of present rows.
class DenseReference {
 public:
  explicit DenseReference(std::span<const SparseTensor> inputs);

  Agreement Compare(const SparseTensor& got) const;
  // For results written back into a dense buffer: rows_mismatch counts
  // present rows that are non-zero in neither (cannot tell cancellation), so
  // only value errors and rows that should be zero but are not are counted.
  Agreement CompareDense(std::span<const float> got) const;

  int64_t rows() const { return rows_; }
  int64_t width() const { return width_; }
  int64_t present_rows() const { return present_count_; }

 private:
  int64_t rows_ = 0;
  int64_t width_ = 0;
  int64_t present_count_ = 0;
  double max_abs_ = 0;
  std::vector<double> sum_;
  std::vector<uint8_t> present_;
};

}  // namespace zen
