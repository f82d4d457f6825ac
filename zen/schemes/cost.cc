#include "zen/schemes/cost.h"

#include <algorithm>
#include <numeric>

#include "zen/comm/peer_pattern.h"
#include "zen/core/error.h"

namespace zen {
namespace {

void Validate(const WorkloadProfile& p) {
  const SparsityProfile& s = p.sparsity;
  if (s.world_size < 1 || s.rows < 1 || s.width < 1) {
    throw InvalidArgument(Where{}, "cost model: profile has world_size ", s.world_size, ", rows ",
                          s.rows, ", width ", s.width, "; all must be >= 1");
  }
  if (!(s.density >= 0 && s.density <= 1)) {
    throw InvalidArgument(Where{}, "cost model: density ", s.density, " is outside [0, 1]");
  }
  if (s.gamma.size() < static_cast<size_t>(s.world_size)) {
    throw InvalidArgument(Where{}, "cost model: gamma has ", s.gamma.size(),
                          " entries, world size is ", s.world_size);
  }
  if (p.block_values < 1)
    throw InvalidArgument(Where{}, "cost model: block_values ", p.block_values, " < 1");
}

}  // namespace

double CostInputs::Union(int k) const {
  return std::min(static_cast<double>(rows), gamma[static_cast<size_t>(k - 1)] * nnz);
}

std::vector<double> SharesFromSkew(double skewness, int64_t total, int n) {
  std::vector<double> share(static_cast<size_t>(n), 0);
  if (total <= 0) return share;
  const double first = static_cast<double>(BalancedChunk(total, n, 0).size());
  share[0] = std::min(1.0, skewness * first / static_cast<double>(total));
  const double rest = static_cast<double>(total) - first;
  for (int o = 1; o < n; ++o) {
    share[static_cast<size_t>(o)] =
        rest > 0 ? (1 - share[0]) * static_cast<double>(BalancedChunk(total, n, o).size()) / rest
                 : 0;
  }
  return share;
}

CostInputs DeriveCostInputs(const WorkloadProfile& p) {
  Validate(p);
  const SparsityProfile& s = p.sparsity;
  CostInputs in;
  in.profile = &p;
  in.n = s.world_size;
  in.rows = s.rows;
  in.width = s.width;
  in.vals = static_cast<double>(s.value_bytes) * static_cast<double>(s.width);
  in.row = static_cast<double>(s.index_bytes) + in.vals;
  in.nnz = s.density * static_cast<double>(s.rows);
  in.gamma.assign(s.gamma.begin(), s.gamma.begin() + s.world_size);
  const size_t n = static_cast<size_t>(in.n);
  in.row_share = p.row_share.size() == n ? p.row_share : SharesFromSkew(s.skewness, s.rows, in.n);
  in.union_row_share = p.union_row_share.size() == n ? p.union_row_share : in.row_share;
  in.meta = p.count_agreement ? kAgreementBytes : 0;
  return in;
}

CostVolumes NewVolumes(const CostInputs& in) {
  CostVolumes v;
  const double meta = in.meta * (in.n - 1);
  v.recv.assign(static_cast<size_t>(in.n), meta);
  v.sent.assign(static_cast<size_t>(in.n), meta);
  v.rounds = in.meta > 0 && in.n > 1 ? 1 : 0;
  v.base = meta;
  return v;
}

CostVolumes OwnerPushPullCost(const CostInputs& in, double local, double unions, double item,
                              const std::vector<double>& share,
                              const std::vector<double>& union_share) {
  CostVolumes v = NewVolumes(in);
  if (in.n == 1) return v;
  for (int r = 0; r < in.n; ++r) {
    const size_t o = static_cast<size_t>(r);
    const double push_in = (in.n - 1) * local * share[o] * item;
    const double push_out = local * (1 - share[o]) * item;
    const double pull_in = unions * (1 - union_share[o]) * item;
    const double pull_out = (in.n - 1) * unions * union_share[o] * item;
    v.recv[o] += push_in + pull_in;
    v.sent[o] += push_out + pull_out;
  }
  v.rounds += 2;  // one AllToAllV, one AllGatherV
  return v;
}

double MaxOf(std::span<const double> v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

double MeanOf(std::span<const double> v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

Prediction FinishPrediction(std::string_view scheme, const CostVolumes& v, const Network& net) {
  Prediction p;
  p.scheme = std::string(scheme);
  p.recv_max = MaxOf(v.recv);
  p.recv_mean = MeanOf(v.recv);
  p.sent_max = MaxOf(v.sent);
  p.rounds = v.rounds;
  const double bottleneck =
      v.stage_max.empty() ? std::max(p.recv_max, p.sent_max)
                          : v.base + std::accumulate(v.stage_max.begin(), v.stage_max.end(), 0.0);
  p.time_s = v.rounds * net.latency_s + bottleneck / net.bandwidth_bytes_per_s;
  return p;
}

}  // namespace zen
