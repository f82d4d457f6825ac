#include "zen/analysis/cost_model.h"

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

}  // namespace zen
