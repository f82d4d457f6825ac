// tools/zen/bench_reference.h — the reference `zen bench` checks every
// result against, in memory proportional to the non-zeros.
//
// SparseReference sums the ranks' inputs by merging their sorted COO rows
// (a k-way merge over the ranks, in double precision) into the sorted union
// of ids and one double row per id: O(total nnz x width) memory, where
// DenseReference (zen/core/reduce.h) needs rows x width doubles. It shares
// no code with the schemes' kernels (MergeSum / SumAll) and gives the same
// check as DenseReference::Compare: the max element error over the max
// |reference| element, and the rows present in exactly one of result and
// reference (tools/zen/bench_reference_test.cc asserts both agree).
//
// Usage:
//   SparseReference ref(per_rank_inputs);
//   Agreement a = ref.Compare(scheme->Sync(comm, local));
//   bool exact = a.rows_mismatch == 0 && a.max_rel_error <= 1e-5;
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "zen/testing/reference.h"
#include "zen/core/sparse_tensor.h"

namespace zen::cli {

class SparseReference {
 public:
  explicit SparseReference(std::span<const SparseTensor> inputs);

  Agreement Compare(const SparseTensor& got) const;
  // For a result written densely (Scheme::SyncInto, `zen bench --output
  // dense`): [rows x width] values; the present rows against the sum, and
  // every other row must be all zero (one that is not counts as a
  // mismatched row). A present row whose sum is zero cannot be told apart.
  Agreement CompareDense(std::span<const float> got) const;

  int64_t present_rows() const { return static_cast<int64_t>(ids_.size()); }

 private:
  int64_t rows_ = 0;
  int64_t width_ = 0;
  double max_abs_ = 0;
  std::vector<int64_t> ids_;  // sorted union of the inputs' ids
  std::vector<double> sum_;   // ids_.size() x width_
};

}  // namespace zen::cli
