// zen/schemes/registry.h — the algorithm table: every scheme with what it
// knows about itself, driving the CLI, the tests, the docs and `auto`.
//
// Each entry (UCC's algorithm-table style): id (what users type), a
// one-line description, a factory, a cost function (bytes per rank and
// rounds from a workload profile; cost.h), optionally a supports() check
// that needs no instance, whether it sums in rank order, and the per-call
// options it takes (SyncCapabilities). The cost functions live at the end of
// each scheme's own file or folder; the registry forms predictions from them and
// selects the scheme with the lowest predicted time (SchemeRegistry::Select),
// falling back to the next one when a scheme says "not supported". Nothing
// here, and nothing in the cost model, switches on scheme names.
//
// Usage:
//   zen::SchemeRegistry reg = zen::BuiltinSchemes();
//   for (const zen::SchemeInfo& s : reg.schemes()) std::cout << s.id << "\n";
//   auto zen_scheme = reg.Create("zen", options);   // InvalidArgument if unknown
//   std::optional<zen::Prediction> p = reg.Predict("zen", profile, network);
//   zen::Selection pick = reg.Select(profile, network);   // pick.chosen, pick.refused
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "zen/schemes/cost.h"
#include "zen/schemes/scheme.h"

namespace zen {

using SchemeFactory = std::function<std::unique_ptr<Scheme>(const SchemeOptions&)>;
// Per-rank bytes and rounds of one call on a workload (cost.h).
using SchemeCost = std::function<CostVolumes(const CostInputs&)>;
// Whether the scheme can serve an input, asked without building it.
using SchemeSupports = std::function<Support(const SparsityProfile&)>;

struct SchemeInfo {
  std::string id;
  std::string description;
  SchemeFactory factory;
  // Empty: the scheme is not modeled (listed and runnable, never selected).
  SchemeCost cost = {};
  // Empty: a built instance is asked (Scheme::supports).
  SchemeSupports supports = {};
  // True when every rank's float32 sum of a sparse input is the ranks'
  // values added in ascending rank order, ((x0 + x1) + x2) + ..., bit for
  // bit (what PyTorch's Gloo sparse allreduce computes; checked for every
  // entry that says so by all_schemes_test.cc). A selector built by
  // rank_order_factory chooses only among these.
  bool rank_order = false;
  // True for an entry that sums nothing itself but routes each call to one
  // of the registry's other entries (auto). Its capabilities are what it
  // routes; the engine hands a tensor whose options need more (a sum order,
  // narrow wire values) to the first other entry that declares them, and
  // coalesces a batch's tensors for it as for an entry with rank_order
  // (each group is one call it routes).
  bool selector = false;
  // For an entry without rank_order: builds an instance whose sums are in
  // rank order all the same (a selector choosing only among the entries
  // with rank_order), for tensors that require it (SchemeRegistry::Create
  // with rank_order). Empty: only an entry with rank_order serves them.
  SchemeFactory rank_order_factory = {};
  // What the scheme takes per call beyond the defaults (SyncOptions): the
  // same constant its objects return from Scheme::capabilities(). The
  // engine reads it to route or refuse a tensor's options, naming the
  // scheme and the capability.
  SyncCapabilities capabilities = {};
};

// The outcome of SchemeRegistry::Select.
struct Selection {
  struct Refusal {
    std::string scheme;
    std::string reason;  // the scheme's own words (Support::reason)
  };
  std::string chosen;                   // empty when no candidate is modeled and supported
  std::vector<Prediction> predictions;  // every modeled candidate, in registry order
  std::vector<Refusal> refused;         // faster candidates that said "not supported", fastest first
};

class SchemeRegistry {
 public:
  // How Select asks a candidate whether it supports the input; empty = Supports().
  using AskSupport = std::function<Support(const SchemeInfo&, const SparsityProfile&)>;

  void Add(SchemeInfo info);  // InvalidArgument on a duplicate id or a missing factory
  const std::vector<SchemeInfo>& schemes() const& { return schemes_; }
  // On a temporary registry (`for (auto& s : AllSchemes().schemes())`) the
  // list is moved out, so the loop never reads a destroyed registry.
  std::vector<SchemeInfo> schemes() && { return std::move(schemes_); }
  const SchemeInfo* Find(std::string_view id) const;
  // The entry's factory, with the options' check_agreement applied.
  // `rank_order`: an instance whose sums are the ranks' values added in
  // ascending rank order (the entry's factory when it has rank_order, else
  // its rank_order_factory); InvalidArgument when the entry has neither.
  std::unique_ptr<Scheme> Create(std::string_view id, const SchemeOptions& options = {},
                                 bool rank_order = false) const;
  std::vector<std::string> ids() const;
  // The ids with a cost function, in registry order.
  std::vector<std::string> modeled() const;

  // Whether Create(info.id, options, /*rank_order=*/true) can build the
  // entry: it has rank_order or a rank_order_factory.
  static bool SumsInRankOrder(const SchemeInfo& info) {
    return info.rank_order || static_cast<bool>(info.rank_order_factory);
  }

  // The entry's own answer: info.supports, else a built instance's.
  static Support Supports(const SchemeInfo& info, const SparsityProfile& profile,
                          const SchemeOptions& options = {});

  // Prediction for one scheme; nullopt for an unknown or unmodeled id.
  // InvalidArgument when the profile is inconsistent (see DeriveCostInputs).
  std::optional<Prediction> Predict(std::string_view id, const WorkloadProfile& profile,
                                    const Network& network) const;
  // Predictions of every modeled scheme, in registry order.
  std::vector<Prediction> PredictAll(const WorkloadProfile& profile, const Network& network) const;

  // The candidate with the lowest predicted time that supports the profile:
  // candidates are tried fastest first; one that says "not supported" is
  // recorded in `refused` with its reason and the next one is tried.
  // `candidates` empty = every modeled scheme; unknown or unmodeled ids are
  // skipped. Deterministic: every rank holding the same profile chooses the
  // same scheme (ties go to the earlier registry entry).
  Selection Select(const WorkloadProfile& profile, const Network& network,
                   std::span<const std::string> candidates = {},
                   const AskSupport& ask = {}) const;

 private:
  std::vector<SchemeInfo> schemes_;
};

// The schemes of this layer (dense, agsparse, sparcml, omnireduce,
// sparse_ps, zen), each with its cost function. `auto` lives in the
// analysis layer (it needs the profiler): see zen/analysis/auto_scheme.h,
// AllSchemes().
SchemeRegistry BuiltinSchemes();

}  // namespace zen
