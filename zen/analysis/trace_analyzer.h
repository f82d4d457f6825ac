// zen/analysis/trace_analyzer.h — the sparsity characteristics of a gradient
// trace that decide which synchronization scheme wins (paper section 2.1).
//
// For one tensor of an n-rank trace (only the row ids matter) it computes:
//   - per-rank density d_r = |I_r| / rows and the union density |U| / rows;
//   - densification gamma(k) = E|I_S| / mean_r |I_r| for k = 1..n, where I_S
//     is the union over a uniformly random k-subset S of ranks. The
//     expectation is exact, not sampled: a row held by c ranks is missed by
//     S with probability C(n-c, k) / C(n, k), so
//     E|I_S| = sum_c h_c (1 - C(n-c, k) / C(n, k)) over the histogram h_c of
//     row multiplicities. gamma(1) = 1; gamma(n) = |U| / mean |I_r|.
//   - pairwise overlap |I_i n I_j| / min(|I_i|, |I_j|) over all pairs i < j
//     (pairs with an empty side are skipped) and its histogram;
//   - skew: non-zero counts per rank over 8 and over n even ranges of the id
//     space (even ranges as zen::RowOwner::Range), the skewness max_j
//     density_j / density per rank (paper: "max partition density / mean"),
//     and the share of non-zeros in the first of 8 ranges;
//   - push/pull imbalance (max over servers / mean, in COO bytes) of a
//     parallel scheme whose server s owns the rows owner(id) == s: push =
//     bytes server s receives (sum_r |I_r n D_s|), pull = bytes it sends back
//     (|U n D_s| to each of n workers); for ZEN's hash partition
//     (zen::RowOwner::Hash, the 4-independent h0) and for even ranges.
//
// Usage:
//   zen::TraceReader reader("data/traces/gcide-lm-n8.safetensors");
//   zen::TraceAnalysis a = zen::AnalyzeTrace(reader, {});
//   std::cout << zen::FormatAnalysisText(a);
//   WriteFile("out.json", zen::AnalysisToJson(a));
#pragma once

#include <cstdint>
#include <iosfwd>
#include <span>
#include <string>
#include <vector>

#include "zen/core/row_owner.h"
#include "zen/workload/trace.h"

namespace zen {

struct AnalyzerOptions {
  uint64_t hash_seed = 0x5EED;  // seed of ZEN's h0 for the imbalance figures
  int overlap_bins = 20;        // histogram bins over [0, 1]
};

// One rank's ids per entry: sorted, unique, in [0, rows).
using RankIds = std::span<const std::vector<int64_t>>;

// gamma(k) for k = 1..n (index k - 1), exact expectation over k-subsets.
// All-empty input gives all ones.
std::vector<double> Densification(RankIds ids);

struct OverlapStats {
  std::vector<double> ratios;  // one per pair i < j with both sides non-empty, in (i, j) order
  int64_t skipped_pairs = 0;   // pairs with an empty side
  double mean = 0, min = 0, median = 0, max = 0;
  std::vector<int64_t> histogram;  // bins over [0, 1]; bin b = [b/B, (b+1)/B), last closed
};
OverlapStats PairwiseOverlap(RankIds ids, int bins);

// counts[r][j] = ids of rank r in even range j of [0, rows) (RowOwner::Range).
std::vector<std::vector<int64_t>> RangeCounts(RankIds ids, int64_t rows, int parts);

// max_j (count_j / rows_j) / (nnz / rows) for one rank's counts over even
// ranges; 0 for an empty rank.
double Skewness(std::span<const int64_t> counts, int64_t rows);

struct Imbalance {
  std::vector<double> push_bytes;  // per server: received from all workers
  std::vector<double> pull_bytes;  // per server: sent to all workers
  double push = 1, pull = 1;       // max / mean (1 when nothing moves)
};
// COO bytes: a row costs width * 4 value bytes + 8 index bytes.
Imbalance PartitionImbalance(RankIds ids, int64_t width, const RowOwner& owner);

struct TensorAnalysis {
  std::string name;
  int64_t step = -1;  // from "step<k>.<base>"; -1 otherwise
  std::string base;
  int64_t rows = 0, width = 0;
  std::vector<int64_t> nnz;
  std::vector<double> density;
  double mean_density = 0;
  int64_t union_rows = 0;
  double union_density = 0;
  std::vector<double> gamma;
  OverlapStats overlap;
  std::vector<std::vector<int64_t>> counts8, counts_n;  // [rank][range]
  std::vector<double> skewness;                         // per rank, over n ranges
  double mean_skewness = 0, union_skewness = 0;
  double first_of_8_share = 0;  // of all ranks' non-zeros, in range 0 of 8
  Imbalance hash, range;
};

TensorAnalysis AnalyzeTensor(const std::string& name, int64_t rows, int64_t width, RankIds ids,
                             const AnalyzerOptions& options);

// Means over the tensors of one base name (e.g. "embedding" over all steps).
struct BaseSummary {
  std::string base;
  int tensors = 0;
  int64_t rows = 0, width = 0;
  double mean_density = 0, union_density = 0, gamma_n = 0, mean_skewness = 0, first_of_8_share = 0,
         mean_overlap = 0;
  double range_push = 0, range_pull = 0, hash_push = 0, hash_pull = 0;
};

struct TraceAnalysis {
  std::string path;
  int world_size = 0;
  AnalyzerOptions options;
  std::vector<TensorAnalysis> tensors;
  std::vector<BaseSummary> summary;  // in order of first appearance
};

// Reads only the ids, one tensor at a time.
TraceAnalysis AnalyzeTrace(TraceReader& reader, const AnalyzerOptions& options);

std::string AnalysisToJson(const TraceAnalysis& analysis);
std::string FormatAnalysisText(const TraceAnalysis& analysis);
// The same texts written to `out` as they are formed, one tensor at a time
// (a trace of 10^5 tensors makes hundreds of MB of JSON).
void WriteAnalysisJson(const TraceAnalysis& analysis, std::ostream& out);
void WriteAnalysisText(const TraceAnalysis& analysis, std::ostream& out);

}  // namespace zen
