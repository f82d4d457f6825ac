// zen/workload/synthetic.h — synthetic sparse gradients for tests and for
// sizes no trace has.
//
// `zipf`: each rank holds round(density * rows) distinct rows drawn without
// replacement with P(row r) proportional to 1 / (r + 1)^skew, so low ids are
// hot (like BPE vocabularies ordered by frequency) and ranks overlap where
// the distribution is heavy. skew 0 is uniform. Values are uniform in
// [-1, 1). Everything is a pure function of (spec, rank): every process can
// regenerate every rank's tensor, which is how the benchmark computes its
// reference.
//
// Usage:
//   auto spec = zen::ParseSyntheticSpec("zipf:rows=100000,width=64,density=0.01,skew=1.1");
//   std::vector<zen::SparseTensor> per_rank = zen::GenerateSynthetic(spec, /*world=*/8);
//   zen::SparseTensor mine = zen::GenerateSyntheticRank(spec, /*rank=*/3);
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "zen/core/sparse_tensor.h"

namespace zen {

struct SyntheticSpec {
  std::string kind = "zipf";
  int64_t rows = 100000;
  int64_t width = 64;
  double density = 0.01;  // per rank, in [0, 1]
  double skew = 1.1;      // Zipf exponent; 0 = uniform
  uint64_t seed = 1;
};

// Parses "zipf:rows=R,width=W,density=D,skew=S[,seed=X]" (any subset of
// keys; defaults above). InvalidArgument naming the bad key or value: a
// number outside int64 (rows=1e300), rows x width beyond int64, density
// outside [0, 1], a negative or NaN skew.
SyntheticSpec ParseSyntheticSpec(std::string_view text);
std::string ToString(const SyntheticSpec& spec);

// Memory: O(non-zeros), whatever rows is (2^40 rows at a few non-zeros take
// a few KB): 16 bytes per key of the max(4 nnz, 1024) heaviest rows plus
// about 64 bytes per row drawn while sampling, plus the tensor. A spec too
// large for memory is InvalidArgument naming rank, spec and bytes, never
// std::bad_alloc.
SparseTensor GenerateSyntheticRank(const SyntheticSpec& spec, int rank);
// All ranks' tensors; `world` of them must fit this machine's memory
// (CheckSyntheticFits), checked before anything is allocated.
std::vector<SparseTensor> GenerateSynthetic(const SyntheticSpec& spec, int world);

// Bytes of one rank's tensor (ids and values) and of the generator's peak
// for one rank (plus the sampling keys above); saturating at UINT64_MAX.
uint64_t SyntheticTensorBytes(const SyntheticSpec& spec);
uint64_t SyntheticPeakBytes(const SyntheticSpec& spec);

// InvalidArgument naming the spec, the bytes and `memory_bytes` when
// `tensors` tensors of `spec` (plus one generator's peak) exceed
// memory_bytes: a spec too large is refused up front, where allocating it
// would be granted by overcommit and end in an OOM kill.
void CheckSyntheticFits(const SyntheticSpec& spec, uint64_t tensors, uint64_t memory_bytes);

// This machine's physical memory in bytes (sysconf); UINT64_MAX when unknown.
uint64_t MachineMemoryBytes();

}  // namespace zen
