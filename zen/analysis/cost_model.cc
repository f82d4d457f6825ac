#include "zen/analysis/cost_model.h"

#include <algorithm>
#include <cmath>

namespace zen {

std::vector<std::string> ModeledSchemes() { return ModeledSchemes(BuiltinSchemes()); }

std::vector<std::string> ModeledSchemes(const SchemeRegistry& registry) {
  return registry.modeled();
}

std::optional<Prediction> Predict(std::string_view scheme, const WorkloadProfile& profile,
                                  const Network& network) {
  return Predict(BuiltinSchemes(), scheme, profile, network);
}

std::optional<Prediction> Predict(const SchemeRegistry& registry, std::string_view scheme,
                                  const WorkloadProfile& profile, const Network& network) {
  return registry.Predict(scheme, profile, network);
}

std::vector<Prediction> PredictAll(const WorkloadProfile& profile, const Network& network) {
  return PredictAll(BuiltinSchemes(), profile, network);
}

std::vector<Prediction> PredictAll(const SchemeRegistry& registry, const WorkloadProfile& profile,
                                   const Network& network) {
  return registry.PredictAll(profile, network);
}

Prediction PredictDenseAllReduce(const WorkloadProfile& profile, const Network& network) {
  const CostInputs in = DeriveCostInputs(profile);
  Prediction p;
  p.scheme = "allreduce";
  if (in.n == 1) return p;
  const double n = in.n;
  const double bytes = 2 * (n - 1) / n * static_cast<double>(in.rows) * in.vals;
  const int ring = 2 * (in.n - 1);
  const int halving_doubling = 2 * static_cast<int>(std::ceil(std::log2(n)));
  p.recv_max = p.recv_mean = p.sent_max = bytes;
  p.rounds = std::min(ring, halving_doubling);
  p.time_s = p.rounds * network.latency_s + bytes / network.bandwidth_bytes_per_s;
  return p;
}

double SyncTimeLowerBound(const WorkloadProfile& profile, const Network& network) {
  const CostInputs in = DeriveCostInputs(profile);
  if (in.n == 1) return 0;
  return network.latency_s + in.Union(in.n - 1) * in.vals / network.bandwidth_bytes_per_s;
}

}  // namespace zen
