// zen/schemes/dense_ring.h — `dense`: the dense AllReduce baseline.
//
// The local tensor is densified to [rows x width] and summed with a ring
// reduce-scatter followed by a ring allgather (n-1 steps each, every rank
// sends and receives (n-1)/n of the dense tensor per phase, in chunks of
// rows). The result keeps the union of input rows (tracked with a presence
// bitmap reduced alongside, 1 bit per row), so it is exact in the same sense
// as the sparse schemes.
//
// Usage:
//   auto s = zen::BuiltinSchemes().Create("dense");
//   zen::SparseTensor sum = s->Sync(comm, local);
#pragma once

#include "zen/schemes/registry.h"

namespace zen {

SchemeInfo DenseRingInfo();
// Its cost function (registry.h), defined at the end of dense_ring.cc; BuiltinSchemes
// attaches it to the entry.
CostVolumes DenseRingCost(const CostInputs& in);

}  // namespace zen
