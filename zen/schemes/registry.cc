#include "zen/schemes/registry.h"

#include <algorithm>
#include <numeric>

#include "zen/core/error.h"
#include "zen/schemes/agsparse.h"
#include "zen/schemes/dense_ring.h"
#include "zen/schemes/omnireduce.h"
#include "zen/schemes/sparcml.h"
#include "zen/schemes/sparse_ps.h"
#include "zen/schemes/zen/zen.h"

namespace zen {
namespace {

// An entry with its cost function (kept when the entry already has one).
SchemeInfo WithCost(SchemeInfo info, SchemeCost cost) {
  if (!info.cost) info.cost = std::move(cost);
  return info;
}

}  // namespace

void SchemeRegistry::Add(SchemeInfo info) {
  if (Find(info.id)) throw InvalidArgument("scheme '" + info.id + "' is registered twice");
  if (!info.factory) throw InvalidArgument("scheme '" + info.id + "' has no factory");
  schemes_.push_back(std::move(info));
}

const SchemeInfo* SchemeRegistry::Find(std::string_view id) const {
  for (const auto& s : schemes_) {
    if (s.id == id) return &s;
  }
  return nullptr;
}

std::unique_ptr<Scheme> SchemeRegistry::Create(std::string_view id, const SchemeOptions& options,
                                               bool rank_order) const {
  const SchemeInfo* info = Find(id);
  if (!info) {
    std::string known;
    for (const auto& s : schemes_) known += (known.empty() ? "" : ", ") + s.id;
    throw InvalidArgument("unknown scheme '" + std::string(id) + "' (known: " + known + ")");
  }
  ValidateSchemeOptions(options, info->id);
  if (rank_order && !SumsInRankOrder(*info)) {
    throw InvalidArgument("scheme '" + info->id + "' does not sum in rank order");
  }
  const SchemeFactory& factory =
      rank_order && !info->rank_order ? info->rank_order_factory : info->factory;
  std::unique_ptr<Scheme> scheme = factory(options);
  scheme->set_check_agreement(options.check_agreement);
  return scheme;
}

std::vector<std::string> SchemeRegistry::ids() const {
  std::vector<std::string> out;
  for (const auto& s : schemes_) out.push_back(s.id);
  return out;
}

std::vector<std::string> SchemeRegistry::modeled() const {
  std::vector<std::string> out;
  for (const auto& s : schemes_) {
    if (s.cost) out.push_back(s.id);
  }
  return out;
}

Support SchemeRegistry::Supports(const SchemeInfo& info, const SparsityProfile& profile,
                                 const SchemeOptions& options) {
  if (info.supports) return info.supports(profile);
  return info.factory(options)->supports(profile);
}

std::optional<Prediction> SchemeRegistry::Predict(std::string_view id,
                                                  const WorkloadProfile& profile,
                                                  const Network& network) const {
  const CostInputs in = DeriveCostInputs(profile);  // validates even for an unknown id
  const SchemeInfo* info = Find(id);
  if (!info || !info->cost) return std::nullopt;
  return FinishPrediction(info->id, info->cost(in), network);
}

std::vector<Prediction> SchemeRegistry::PredictAll(const WorkloadProfile& profile,
                                                   const Network& network) const {
  const CostInputs in = DeriveCostInputs(profile);
  std::vector<Prediction> out;
  for (const SchemeInfo& s : schemes_) {
    if (s.cost) out.push_back(FinishPrediction(s.id, s.cost(in), network));
  }
  return out;
}

Selection SchemeRegistry::Select(const WorkloadProfile& profile, const Network& network,
                                 std::span<const std::string> candidates,
                                 const AskSupport& ask) const {
  const CostInputs in = DeriveCostInputs(profile);
  Selection out;
  std::vector<const SchemeInfo*> modeled;
  for (const SchemeInfo& s : schemes_) {
    if (!s.cost) continue;
    if (!candidates.empty() &&
        std::find(candidates.begin(), candidates.end(), s.id) == candidates.end()) {
      continue;
    }
    modeled.push_back(&s);
    out.predictions.push_back(FinishPrediction(s.id, s.cost(in), network));
  }
  // Fastest first; a stable sort keeps registry order among equal times.
  std::vector<size_t> order(modeled.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return out.predictions[a].time_s < out.predictions[b].time_s;
  });
  for (size_t i : order) {
    const SchemeInfo& s = *modeled[i];
    const Support yes = ask ? ask(s, profile.sparsity) : Supports(s, profile.sparsity);
    if (yes.ok) {
      out.chosen = s.id;
      break;
    }
    out.refused.push_back({s.id, yes.reason});
  }
  return out;
}

SchemeRegistry BuiltinSchemes() {
  SchemeRegistry r;
  r.Add(WithCost(DenseRingInfo(), DenseRingCost));
  r.Add(WithCost(AgSparseInfo(), AgSparseCost));
  r.Add(WithCost(SparcmlInfo(), SparcmlCost));
  r.Add(WithCost(OmniReduceInfo(), OmniReduceCost));
  r.Add(WithCost(SparsePsInfo(), SparsePsCost));
  r.Add(WithCost(ZenInfo(), ZenCost));
  // Further schemes register here, one line each.
  return r;
}

}  // namespace zen
