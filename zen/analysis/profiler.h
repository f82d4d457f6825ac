// zen/analysis/profiler.h — cheap online measurement of the sparsity profile
// the cost model needs, on a schedule (the paper profiles the first
// iterations), never on every call.
//
// Local statistics are exact and free: row count, rows per owner range,
// non-zero blocks and blocks per owner range. gamma(k) and the union's
// range shares need other ranks' ids, so each rank contributes a SAMPLE of
// its ids: an id is kept when a seeded universal hash of its block (id x
// width / block_values) falls below fraction x p, the same test on every
// rank, so the sample of the union is the union of the samples and whole
// blocks are kept or dropped together (block unions stay measurable).
// fraction = min(1, sample_ids / max_rank_nnz) is agreed by one AllGatherInt.
//
// Cost of one MeasureProfile on rank r (bytes received):
//   8 (n-1)                                   max-nnz agreement (AllGatherInt)
//   + 8 (n-1)                                 AllGatherV sizes
//   + sum_{q != r} 8 (2 + 2n + sampled_q)     summaries, sampled_q <~ sample_ids
// e.g. n = 8, sample_ids = 4096: about 230 KiB per rank, once per `every`
// calls. Every rank combines the same gathered bytes in the same order, so
// all ranks hold bit-identical profiles (and `auto` takes identical
// decisions without another exchange).
//
// Usage:
//   zen::Profiler profiler(zen::ProfilerOptions{});
//   if (profiler.Observe(comm, local)) use(profiler.profile());   // fresh this call
//   zen::WorkloadProfile exact = zen::ProfileInputs(all_ranks_tensors);  // offline
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "zen/analysis/cost_model.h"
#include "zen/comm/communicator.h"
#include "zen/core/sparse_tensor.h"

namespace zen {

// When to measure: calls 0 .. warmup_calls-1, then every `every` calls
// (call % every == 0); every <= 0 means only the warm-up.
struct ProfileSchedule {
  int64_t warmup_calls = 2;
  int64_t every = 500;
  bool ShouldProfile(int64_t call) const;
};

struct ProfilerOptions {
  ProfileSchedule schedule;
  int64_t sample_ids = 4096;  // target sampled ids per rank (cost above)
  int64_t block_values = 256;
  uint64_t seed = 0x70f11e5ULL;
};

// What one rank contributes to a profile.
struct RankSummary {
  int64_t nnz = 0;
  int64_t blocks = 0;                 // non-zero blocks
  std::vector<int64_t> range_rows;    // rows in each of n even row ranges
  std::vector<int64_t> range_blocks;  // non-zero blocks in each of n even block ranges
  std::vector<int64_t> sampled_ids;   // sorted
};

// Local summary of t for a world of n ranks; ids are sampled with the given
// fraction in (0, 1] (1 keeps all).
RankSummary Summarize(const SparseTensor& t, int n, int64_t block_values, double fraction,
                      uint64_t seed);

// The profile of n summaries (gamma(k) over ranks 0..k-1).
WorkloadProfile CombineSummaries(std::span<const RankSummary> ranks, int64_t rows, int64_t width,
                                 int64_t block_values);

// The exact profile of per-rank tensors (no sampling), for tests, the
// simulator and offline analysis.
WorkloadProfile ProfileInputs(std::span<const SparseTensor> per_rank, int64_t block_values = 256);

// One online measurement: a collective every rank must call. TransportError
// on network failure; FormatError on a malformed summary.
WorkloadProfile MeasureProfile(Communicator& comm, const SparseTensor& local,
                               const ProfilerOptions& options);

// The schedule around MeasureProfile for one tensor.
class Profiler {
 public:
  explicit Profiler(ProfilerOptions options) : options_(options) {}

  // Counts a call; measures when the schedule says so. Returns true when
  // profile() was refreshed by this call.
  bool Observe(Communicator& comm, const SparseTensor& local);

  bool has_profile() const { return has_profile_; }
  const WorkloadProfile& profile() const { return profile_; }
  int64_t calls() const { return calls_; }
  int64_t measurements() const { return measurements_; }

 private:
  ProfilerOptions options_;
  WorkloadProfile profile_;
  bool has_profile_ = false;
  int64_t calls_ = 0;
  int64_t measurements_ = 0;
};

// ---- Extrapolation to world sizes no trace has (`zen simulate`, `zen analyze`)
//
// From the K measured ranks of one tensor:
//   - per-rank density, block density, the share of rows (and blocks) in each
//     of the n even ranges, and so the skewness at n: measured on the K
//     ranks, pooled (they do not depend on how many ranks there are);
//   - gamma(k): the union-growth curve measured on the K ranks (mean over
//     the K cyclic windows of k consecutive ranks, k = 1..K), fitted by a
//     power law gamma(k) = k^beta through gamma(1) = 1 (least squares on
//     logs, Heaps' law of vocabulary growth) and capped at rows / nnz; the
//     same for blocks (OmniReduce).
// World sizes <= K use the exact profile of the first n ranks, as `zen
// bench` uses them.
//
// Usage:
//   zen::Extrapolation x = zen::FitExtrapolation(per_rank_tensors);
//   zen::WorkloadProfile at64 = x.At(64);

// Mean over the K cyclic windows of k consecutive ranks of |union| / mean
// size, for k = 1..K, of the rows (blocks: of the blocks of block_values
// values) the ranks hold.
std::vector<double> RowGrowthCurve(std::span<const SparseTensor> ranks);
std::vector<double> BlockGrowthCurve(std::span<const SparseTensor> ranks, int64_t block_values);

// gamma(k) = k^beta: least squares of log gamma on log k through the origin.
struct PowerFit {
  double beta = 1;
  double max_rel_residual = 0;  // over the measured k
  double At(double k) const;
};
PowerFit FitPower(std::span<const double> gamma);

struct Extrapolation {
  std::vector<SparseTensor> ranks;  // the K measured ranks
  std::vector<double> gamma, block_gamma;  // measured on them
  PowerFit rows_fit, blocks_fit;
  int64_t block_values = 256;

  bool Exact(int world) const { return world <= static_cast<int>(ranks.size()); }
  // The profile at `world` ranks (exact for world <= K).
  WorkloadProfile At(int world) const;
};

// InvalidArgument when fewer than 2 ranks are given.
Extrapolation FitExtrapolation(std::vector<SparseTensor> ranks, int64_t block_values = 256);

}  // namespace zen
