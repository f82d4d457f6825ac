// zen/analysis/auto_scheme.h — `auto`: per tensor, the registry's selection
// (the scheme with the lowest predicted time that supports the input), and
// AllSchemes(), the registry including it.
//
// On the calls the profiler's schedule selects (the first warmup_calls, then
// every `every`), `auto` measures the tensor's sparsity profile online
// (profiler.h: one sampled-id exchange) and asks the registry to select
// (SchemeRegistry::Select: every modeled candidate's own cost function,
// fastest first, falling back to the next when a scheme's supports() says
// no; the refusal and its reason are part of the decision and of the log).
// Every rank computes the same profile from the same gathered bytes, so the
// choice agrees without communication. The chosen scheme's algorithm runs
// on the input auto's Sync already validated and agreed on (Scheme::
// Dispatch): no second metadata exchange, no re-entry into Sync.
//
// Configuration is passed in (AutoOptions); the library reads no environment
// variable. AutoOptionsFromVariables() maps ZEN_SCHEME / ZEN_LOG for the
// edges that do (the CLI's main, the Python module):
//   ZEN_SCHEME=<id>   force a scheme (AutoOptions::force); no profiling
//   ZEN_LOG=info      rank 0 prints the prediction table behind each
//                     decision (AutoOptions::log)
//
// Usage:
//   zen::SchemeRegistry reg = zen::AllSchemes();    // builtin + auto
//   auto s = reg.Create("auto");
//   zen::SparseTensor sum = s->Sync(comm, local);   // picks, e.g., zen or sparcml
//   const zen::AutoDecision* d =
//       static_cast<zen::AutoScheme&>(*s).decision(local.name());  // d->chosen
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "zen/analysis/cost_model.h"
#include "zen/analysis/profiler.h"
#include "zen/schemes/registry.h"

namespace zen {

struct AutoOptions {
  SchemeOptions scheme;                 // passed to the chosen schemes
  ProfilerOptions profiler;             // schedule and sample size
  Network network;                      // what time is predicted for
  std::string force;                    // a scheme id; empty (or "auto") = choose
  std::vector<std::string> candidates;  // empty = every registered, modeled scheme
  bool log = false;                     // rank 0 logs each decision
  // Where log lines go; empty = stderr.
  std::function<void(const std::string&)> log_sink = {};
};

// One decision: the predictions it compared and the winner.
struct AutoDecision {
  std::string tensor;
  int64_t call = 0;  // the tensor's call number when decided
  std::string chosen;
  bool forced = false;
  WorkloadProfile profile;
  std::vector<Prediction> predictions;        // the modeled candidates, in registry order
  std::vector<Selection::Refusal> refused;    // faster candidates that said "not supported"
};

class AutoScheme final : public Scheme {
 public:
  // registry: the schemes to choose from (an entry without a cost function,
  // such as "auto" itself, is never chosen). InvalidArgument for an unknown
  // force.
  AutoScheme(SchemeRegistry registry, AutoOptions options);

  std::string_view name() const override { return "auto"; }
  std::string_view description() const override;

  // The latest decision for a tensor (by name and shape: the most recent
  // one with this name), or nullptr before its first call.
  const AutoDecision* decision(std::string_view tensor) const;

 protected:
  SparseTensor DoSync(Communicator& comm, const SparseTensor& local) override;

 private:
  struct TensorState {
    explicit TensorState(const ProfilerOptions& o) : profiler(o) {}
    Profiler profiler;
    AutoDecision decision;
  };

  void Decide(TensorState& state, const SparseTensor& local, int rank);
  Scheme& Chosen(const std::string& id);
  void Log(const std::string& text) const;

  SchemeRegistry registry_;
  AutoOptions options_;
  std::map<std::string, TensorState, std::less<>> tensors_;
  std::map<std::string, std::string, std::less<>> last_key_;  // tensor name -> state key
  std::map<std::string, std::unique_ptr<Scheme>> instances_;  // chosen schemes, built once
};

// The table behind a decision, one line per candidate, then the refusals
// (what AutoOptions::log prints).
std::string FormatDecision(const AutoDecision& d);

// ZEN_SCHEME / ZEN_LOG mapped onto options by the caller's lookup (an edge
// passes the environment, e.g. [](const char* n) { return std::getenv(n); }
// wrapped to an optional); the library itself reads no variable.
using VariableLookup = std::function<std::optional<std::string>(std::string_view name)>;
AutoOptions AutoOptionsFromVariables(const VariableLookup& lookup, AutoOptions base = {});

// `auto` as a registry entry: Create("auto", scheme_options) builds an
// AutoScheme over BuiltinSchemes() with `defaults` and scheme_options.
SchemeInfo AutoSchemeInfo(AutoOptions defaults = {});

// BuiltinSchemes() plus `auto` (built with `auto_defaults`).
SchemeRegistry AllSchemes(AutoOptions auto_defaults = {});

}  // namespace zen
