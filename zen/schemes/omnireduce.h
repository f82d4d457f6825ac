// zen/schemes/omnireduce.h — `omnireduce`: OmniReduce-style block sparsity
// (point-to-point, parallelism, imbalanced).
//
// The tensor is viewed as rows x width values, flattened, and cut into
// blocks of B = SchemeOptions::block_values values (default 256; the last
// block may be shorter). A block is non-zero when it overlaps a present row.
// Blocks [0, nb) are split into n even contiguous ranges; rank o owns range
// o. Push: each rank sends its non-zero blocks of range o to rank o (one
// AllToAllV). The owner sums them block by block, and sends the summed
// blocks of its range to every rank (one AllGatherV). A block record is
//   [uint64 block index][row mask: ceil(rows_touched / 8) bytes][values: 4 x len]
// where rows_touched = rows the block overlaps and bit j of the mask says
// row first_row + j is present (OR-reduced by the owner), so the union of
// rows is exact without per-value indices. For width 64 and B = 256 a
// record is 8 + 1 + 1024 bytes.
//
// Usage:
//   zen::SchemeOptions opt;
//   opt.block_values = 256;
//   auto s = zen::BuiltinSchemes().Create("omnireduce", opt);
//   zen::SparseTensor sum = s->Sync(comm, local);
//   size_t b = zen::OmniBlockRecordBytes(/*block=*/7, rows, width, 256);
#pragma once

#include <cstddef>
#include <cstdint>

#include "zen/schemes/registry.h"

namespace zen {

// Number of blocks of block_values values covering rows x width.
int64_t OmniBlockCount(int64_t rows, int64_t width, int64_t block_values);
// Bytes of the record of block b on the wire (index + mask + values).
size_t OmniBlockRecordBytes(int64_t block, int64_t rows, int64_t width, int64_t block_values);

SchemeInfo OmniReduceInfo();
// Its cost function (registry.h), defined at the end of omnireduce.cc; BuiltinSchemes
// attaches it to the entry.
CostVolumes OmniReduceCost(const CostInputs& in);

}  // namespace zen
