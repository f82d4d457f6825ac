// zen/schemes/sparse_ps.h — `sparse_ps`: a sparse parameter server over even
// index ranges (point-to-point, parallelism, imbalanced).
//
// Row ids [0, rows) are cut into n even contiguous ranges (BalancedChunk,
// zen/comm/peer_pattern.h); rank o serves
// range o. Push: every rank sends the COO rows it holds in range o to rank o
// (one AllToAllV). Each server sums what it received with its own rows of
// the range. Pull: each server sends its summed COO range to every rank (one
// AllGatherV); ranges are contiguous and ascending, so concatenating them in
// rank order gives the sorted global sum. Skewed inputs (hot low ids) make
// the owner of the hot range the bottleneck: that is the imbalance the
// paper's Balanced Parallelism removes by hashing.
//
// Bytes received by rank r (see docs/sections/sparse_ps.md):
//   16 (n-1) count headers + sum_{q != r} |I_q n R_r| (8 + 4 w)
//                          + sum_{o != r} |U n R_o| (8 + 4 w)
//
// Usage:
//   auto s = zen::BuiltinSchemes().Create("sparse_ps");
//   zen::SparseTensor sum = s->Sync(comm, local);
#pragma once

#include "zen/schemes/registry.h"

namespace zen {

SchemeInfo SparsePsInfo();
// Its cost function (registry.h), defined at the end of sparse_ps.cc; BuiltinSchemes
// attaches it to the entry.
CostVolumes SparsePsCost(const CostInputs& in);

}  // namespace zen
