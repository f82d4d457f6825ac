// zen/analysis/cost_model.h — predicted bytes and time of every modeled
// scheme from a sparsity profile and a network, used by `auto` to choose and
// by the docs and the simulator to extrapolate.
//
// The model has no formula of its own: each scheme states its cost at the
// end of its own .cc file (SchemeInfo::cost, zen/schemes/registry.h) in the
// vocabulary of zen/schemes/cost.h, and these functions iterate the registry
// (BuiltinSchemes() unless one is passed). Bytes are what each scheme
// ACTUALLY puts on the wire, per rank, in the units of
// Communicator::counters(), the 56-byte metadata message included. Every
// formula is written out in docs/sections/cost-model.md. Where the paper has
// a closed form (Eq. 1 Balanced Parallelism, Eq. 2 Hierarchical
// Centralization, Appendix B Sparse PS) the model reduces to it when headers
// are dropped.
//
// Usage:
//   zen::WorkloadProfile p = zen::ProfileInputs(per_rank_tensors);   // profiler.h
//   zen::Network net{.bandwidth_bytes_per_s = 25e9 / 8, .latency_s = 5e-6};
//   for (const zen::Prediction& x : zen::PredictAll(p, net)) {
//     std::cout << x.scheme << " " << x.recv_max << " " << x.time_s << "\n";
//   }
//   std::optional<zen::Prediction> z = zen::Predict("zen", p, net);
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "zen/schemes/cost.h"
#include "zen/schemes/registry.h"

namespace zen {

// The modeled schemes of the registry (BuiltinSchemes(): dense, agsparse,
// sparcml, omnireduce, sparse_ps, zen), in registry order.
std::vector<std::string> ModeledSchemes();
std::vector<std::string> ModeledSchemes(const SchemeRegistry& registry);

// Prediction for one scheme; nullopt for a scheme the registry does not
// model. InvalidArgument when the profile is inconsistent (world_size < 1,
// rows < 1, gamma shorter than world_size, density outside [0, 1]).
std::optional<Prediction> Predict(std::string_view scheme, const WorkloadProfile& profile,
                                  const Network& network);
std::optional<Prediction> Predict(const SchemeRegistry& registry, std::string_view scheme,
                                  const WorkloadProfile& profile, const Network& network);

// Predictions of every modeled scheme, in ModeledSchemes() order.
std::vector<Prediction> PredictAll(const WorkloadProfile& profile, const Network& network);
std::vector<Prediction> PredictAll(const SchemeRegistry& registry, const WorkloadProfile& profile,
                                   const Network& network);

// The dense AllReduce a user compares against: what collective libraries
// (NCCL, Gloo, MPI) run on the dense tensor of rows x width floats, every
// rank sending and receiving the bandwidth-optimal 2 (n - 1) / n of it, in
// the fewer rounds of a ring (2 (n - 1)) and of recursive halving-doubling
// (2 ceil(log2 n)). Scheme "dense" (zen's own ring, which also reduces a
// row-presence bitmap in a second ring: 4 (n - 1) rounds) is slower than this
// where latency dominates; comparing sparse schemes with it instead would
// credit them with the rounds of a ring no library uses on a small tensor.
// Named "allreduce"; no metadata exchange.
Prediction PredictDenseAllReduce(const WorkloadProfile& profile, const Network& network);

// The least time any scheme needs for the profile: every row of the sum
// that a rank does not hold alone reaches it as at least its values (a
// peer's part or the sum), and the rows a rank holds alone number
// Union(n) - Union(n - 1) on the mean rank, so the mean rank (and so the
// busiest) receives at least Union(n - 1) rows of values, in at least one
// round. A prediction below this is wrong.
double SyncTimeLowerBound(const WorkloadProfile& profile, const Network& network);

}  // namespace zen
