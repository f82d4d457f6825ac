// zen/schemes/sparcml.h — `sparcml`: SparCML's sparse recursive doubling
// (SSAR), the paper's Hierarchical Centralization (hierarchy + incremental
// aggregation + centralization).
//
// With p the largest power of two <= n: ranks p..n-1 first fold their tensor
// into rank r - p. Then, in stage i = 0..log2(p)-1, rank r < p swaps its
// accumulated stream with rank r XOR 2^i and merges, so after stage i it
// holds the sum over 2^(i+1) (folded) ranks. Finally rank r < n - p sends the
// result to rank r + p. Every message is an 8-byte header (the stream's row
// count) followed by the stream, in one of two forms chosen by that count:
//   sparse: COO, nnz x (8 + 4 width) bytes (zen/schemes/wire.h);
//   dense:  a presence bitmap (ceil(rows / 64) x 8 bytes) then rows x width
//           floats, used once the COO form would be larger.
// The bitmap keeps the union of rows, so rows that sum to zero stay present.
// Additions are commutative pairwise merges, so every rank's result is
// bit-identical.
//
// Bytes received by a rank of the power-of-two core (see
// docs/sections/sparcml.md): sum over stages of 8 + StreamBytes(union of the
// partner's group), i.e. Eq. 2 of the paper plus headers.
//
// Usage:
//   auto s = zen::BuiltinSchemes().Create("sparcml");
//   zen::SparseTensor sum = s->Sync(comm, local);
//   size_t bytes = zen::SparcmlStreamBytes(nnz, rows, width);
#pragma once

#include <cstddef>
#include <cstdint>

#include "zen/schemes/registry.h"

namespace zen {

// Bytes of the dense form of a stream: presence bitmap + all values,
// saturating at SIZE_MAX when rows x width x 4 does not fit size_t (then the
// dense form is never chosen: rows 2^62 with a few ids stay COO).
size_t SparcmlDenseBytes(int64_t rows, int64_t width, size_t value_bytes = sizeof(float));
// True when a stream of nnz rows travels in the dense form.
bool SparcmlIsDense(int64_t nnz, int64_t rows, int64_t width, size_t value_bytes = sizeof(float));
// Bytes of a stream of nnz rows (without its 8-byte header); SIZE_MAX when
// it does not fit size_t (a corrupt header: the receiver rejects it).
size_t SparcmlStreamBytes(int64_t nnz, int64_t rows, int64_t width,
                          size_t value_bytes = sizeof(float));

SchemeInfo SparcmlInfo();
// Its cost function (registry.h), defined at the end of sparcml.cc; BuiltinSchemes
// attaches it to the entry.
CostVolumes SparcmlCost(const CostInputs& in);

}  // namespace zen
