// zen/analysis/cost_model.h — predicted bytes and time of every scheme from a
// sparsity profile and a network, used by `auto` to choose and by the docs
// and the simulator to extrapolate.
//
// The model counts what each scheme ACTUALLY puts on the wire, per rank, in
// the same units as Communicator::counters(): payload bytes including the
// schemes' own headers and the 56-byte metadata message Scheme::Sync sends
// to every peer (AllToAllV / AllGatherV send no counts of their own: sizes
// travel in the transport's frames, which the counters leave out). Every formula is written out in docs/sections/cost-model.md.
// Where the paper has a closed form (Eq. 1 Balanced Parallelism, Eq. 2
// Hierarchical Centralization, Appendix B Sparse PS) the model reduces to it
// when headers are dropped.
//
// Time: for one-shot schemes (agsparse, omnireduce, sparse_ps, zen) the
// bottleneck rank's max(sent, received) / bandwidth plus one latency per
// communication round; for staged schemes (dense ring, sparcml) the sum over
// stages of the largest stage message / bandwidth plus one latency each.
//
// Usage:
//   zen::WorkloadProfile p = zen::ProfileInputs(per_rank_tensors);   // profiler.h
//   zen::Network net{.bandwidth_bytes_per_s = 25e9 / 8, .latency_s = 5e-6};
//   for (const zen::Prediction& x : zen::PredictAll(p, net)) {
//     std::cout << x.scheme << " " << x.recv_max << " " << x.time_s << "\n";
//   }
//   std::optional<zen::Prediction> z = zen::Predict("zen", p, net);
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "zen/schemes/scheme.h"

namespace zen {

struct Network {
  double bandwidth_bytes_per_s = 25e9 / 8;  // 25 Gbit/s, the paper's testbed
  double latency_s = 5e-6;                  // per communication round
};

// A SparsityProfile plus the views the range- and block-partitioned schemes
// need. Fields left at their "unknown" value are derived from `sparsity`
// under a random-placement assumption (see cost-model.md, "Derived inputs").
struct WorkloadProfile {
  SparsityProfile sparsity;
  // Over the n even row ranges (BalancedChunk): the fraction of all ranks'
  // rows that fall in range o, and the fraction of the union's rows in o.
  // Empty: range 0 gets skewness / n, the others share the rest evenly.
  std::vector<double> row_share;
  std::vector<double> union_row_share;
  // OmniReduce's blocks of block_values values.
  int64_t block_values = 256;
  double block_density = -1;        // mean per-rank fraction of non-zero blocks; < 0 unknown
  double block_gamma_n = -1;        // non-zero blocks of the union of n / per-rank; < 0 unknown
  std::vector<double> block_share;  // as row_share, over n even block ranges
  std::vector<double> union_block_share;  // as union_row_share
  // Whether Scheme::Sync's metadata exchange is counted (56 bytes per peer).
  bool count_agreement = true;
};

// One scheme's prediction. Bytes are per rank, as the counters count them.
struct Prediction {
  std::string scheme;
  double recv_max = 0;   // largest bytes received by one rank
  double recv_mean = 0;  // mean over ranks
  double sent_max = 0;   // largest bytes sent by one rank
  int rounds = 0;        // communication rounds (latency terms)
  double time_s = 0;
};

// Bytes of the metadata message Scheme::Sync sends every peer (CheckRanksAgree).
inline constexpr double kAgreementBytes = 56;

// The schemes the model knows: dense, agsparse, sparcml, omnireduce,
// sparse_ps, zen.
std::vector<std::string> ModeledSchemes();

// Prediction for one scheme; nullopt for a scheme the model does not know.
// InvalidArgument when the profile is inconsistent (world_size < 1, rows < 1,
// gamma shorter than world_size, density outside [0, 1]).
std::optional<Prediction> Predict(std::string_view scheme, const WorkloadProfile& profile,
                                  const Network& network);

// Predictions of every modeled scheme, in ModeledSchemes() order.
std::vector<Prediction> PredictAll(const WorkloadProfile& profile, const Network& network);

// Turns a per-rank received/sent byte vector into max / mean (helpers shared
// by the model and the tests that measure).
double MaxOf(std::span<const double> v);
double MeanOf(std::span<const double> v);

}  // namespace zen
