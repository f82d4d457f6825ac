// zen/schemes/cost.h — the vocabulary of the cost model that each scheme
// speaks about itself: a workload profile, a network, the per-rank byte
// volumes a scheme puts on the wire, and the prediction formed from them.
//
// Every scheme's cost function lives at the end of the scheme's own .cc
// file and is attached to its registry entry (SchemeInfo::cost,
// registry.h); the registry turns volumes into predictions
// (SchemeRegistry::Predict) and `auto` picks among them
// (SchemeRegistry::Select). Nothing here knows a scheme by name.
//
// Units: bytes per rank, as Communicator::counters() counts them (payload
// including the schemes' own headers and the 56-byte metadata message
// Scheme::Sync sends every peer; transport frames are not counted). Every
// formula is written out in docs/sections/cost-model.md.
//
// Time: for one-shot schemes the bottleneck rank's max(sent, received) /
// bandwidth plus one latency per round; for staged schemes (CostVolumes::
// stage_max non-empty) the sum over stages of the largest stage message /
// bandwidth plus one latency each.
//
// Usage (a scheme's cost block):
//   CostVolumes MySchemeCost(const CostInputs& in) {
//     CostVolumes v = NewVolumes(in);           // the metadata exchange
//     if (in.n == 1) return v;
//     const double bytes = (in.n - 1) * in.nnz * in.row;
//     for (double& r : v.recv) r += bytes;
//     for (double& s : v.sent) s += bytes;
//     v.rounds += 1;
//     return v;
//   }
#pragma once

#include <cstdint>
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

// What every cost function reads: the profile with unknown row-level inputs
// filled in. Block-level views stay in `profile` (only OmniReduce uses them).
struct CostInputs {
  const WorkloadProfile* profile = nullptr;  // the validated source
  int n = 1;
  int64_t rows = 1, width = 1;
  double row = 12;  // COO bytes of one row: index + width values
  double vals = 4;  // value bytes of one row
  double nnz = 0;   // mean rows per rank
  std::vector<double> gamma;
  std::vector<double> row_share, union_row_share;
  double meta = 0;  // agreement bytes per peer

  // Union rows of k ranks (k >= 1), capped at rows.
  double Union(int k) const;
};

// Per-rank bytes of one scheme and how time is formed from them.
struct CostVolumes {
  std::vector<double> recv, sent;  // per rank
  int rounds = 0;
  // Staged schemes: the largest message of each stage, summed for time, on
  // top of the metadata exchange (base).
  std::vector<double> stage_max;
  double base = 0;
};

// Validates the profile (InvalidArgument: world_size < 1, rows < 1, width <
// 1, gamma shorter than world_size, density outside [0, 1], block_values <
// 1) and fills in the unknown row-level inputs.
CostInputs DeriveCostInputs(const WorkloadProfile& profile);

// Volumes holding only the metadata exchange (n - 1 messages each way).
CostVolumes NewVolumes(const CostInputs& in);

// Shares of n ranges of `total` items when only the skewness is known: the
// first range carries skewness x its size, the others split the rest by size.
std::vector<double> SharesFromSkew(double skewness, int64_t total, int n);

// Push to range owners and pull their summed range: the volume shape shared
// by sparse_ps (rows, COO) and omnireduce (blocks, records). `local` is one
// rank's item count, `unions` the union's, `item` the bytes of one item.
CostVolumes OwnerPushPullCost(const CostInputs& in, double local, double unions, double item,
                              const std::vector<double>& share,
                              const std::vector<double>& union_share);

// Max / mean over ranks, and the prediction formed from volumes.
double MaxOf(std::span<const double> v);
double MeanOf(std::span<const double> v);
Prediction FinishPrediction(std::string_view scheme, const CostVolumes& v, const Network& net);

}  // namespace zen
