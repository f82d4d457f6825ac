// zen/analysis/auto_scheme.h — `auto`: per tensor, the scheme with the
// lowest predicted time, and AllSchemes(), the registry including it.
//
// On the calls the profiler's schedule selects (the first warmup_calls, then
// every `every`), `auto` measures the tensor's sparsity profile online
// (profiler.h: one sampled-id exchange), asks the cost model for every
// registered scheme it models and that supports the profile, and keeps the
// fastest until the next measurement. Every rank computes the same profile
// from the same gathered bytes, so the choice agrees without communication.
// The delegate runs without its own metadata exchange (auto's Sync already
// did it).
//
// Controls:
//   ZEN_SCHEME=<id>   force a scheme (also AutoOptions::force); no profiling
//   ZEN_LOG=info      rank 0 prints the prediction table behind each
//                     decision to stderr
//
// Usage:
//   zen::SchemeRegistry reg = zen::AllSchemes();    // builtin + auto
//   auto s = reg.Create("auto");
//   zen::SparseTensor sum = s->Sync(comm, local);   // picks, e.g., zen or sparcml
//   const zen::AutoDecision* d =
//       static_cast<zen::AutoScheme&>(*s).decision(local.name());  // d->chosen
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "zen/analysis/cost_model.h"
#include "zen/analysis/profiler.h"
#include "zen/schemes/registry.h"

namespace zen {

struct AutoOptions {
  SchemeOptions scheme;                 // passed to the delegates
  ProfilerOptions profiler;             // schedule and sample size
  Network network;                      // what time is predicted for
  std::string force;                    // a scheme id; empty = choose
  std::vector<std::string> candidates;  // empty = every registered, modeled scheme
  bool log = false;                     // print decisions (also ZEN_LOG=info)
};

// One decision: the predictions it compared and the winner.
struct AutoDecision {
  std::string tensor;
  int64_t call = 0;  // the tensor's call number when decided
  std::string chosen;
  bool forced = false;
  WorkloadProfile profile;
  std::vector<Prediction> predictions;  // the candidates, in registry order
};

class AutoScheme final : public Scheme {
 public:
  // registry: where delegates come from (must not contain "auto" itself
  // as a candidate; it is skipped). InvalidArgument for an unknown force.
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
  Scheme& Delegate(const std::string& id);

  SchemeRegistry registry_;
  AutoOptions options_;
  std::map<std::string, TensorState, std::less<>> tensors_;
  std::map<std::string, std::string, std::less<>> last_key_;  // tensor name -> state key
  std::map<std::string, std::unique_ptr<Scheme>> delegates_;
};

// The table behind a decision, one line per candidate (what ZEN_LOG=info prints).
std::string FormatDecision(const AutoDecision& d);

// `auto` with options from SchemeOptions and the environment (ZEN_SCHEME,
// ZEN_LOG), delegating to BuiltinSchemes().
SchemeInfo AutoSchemeInfo();

// BuiltinSchemes() plus `auto`.
SchemeRegistry AllSchemes();

}  // namespace zen
