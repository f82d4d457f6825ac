// zen/schemes/agsparse.h — `agsparse`: AllGather of sparse tensors.
//
// What PyTorch's Gloo backend, Horovod and DeepSpeed do for sparse
// gradients: allgather the per-rank row counts, then every rank's ids and
// values (COO), then merge locally. Each rank receives the other n-1 ranks'
// full COO streams, so the volume grows linearly with n.
//
// Usage:
//   auto s = zen::BuiltinSchemes().Create("agsparse");
//   zen::SparseTensor sum = s->Sync(comm, local);
#pragma once

#include "zen/schemes/registry.h"

namespace zen {

SchemeInfo AgSparseInfo();
// Its cost function (registry.h), defined at the end of agsparse.cc; BuiltinSchemes
// attaches it to the entry.
CostVolumes AgSparseCost(const CostInputs& in);

}  // namespace zen
