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

}  // namespace zen
