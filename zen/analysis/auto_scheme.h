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
// The cost model counts bytes and rounds; it does not know what a transfer
// costs in CPU on this machine, which decides small tensors. So the model
// only shortlists: the fastest predicted candidates (AutoTrialOptions: at
// most `candidates`, each predicted within `within` x the best) then run
// the tensor's next calls in rounds, one call per candidate and round
// (A B C A B C ...). Each rank times its own calls; after each round one
// AllGatherV (8 bytes per call and rank) gives every rank all times, the
// slowest rank's time counts per call, and a candidate whose median so far
// exceeds `drop` x the best's is not timed again (a clearly slower scheme
// costs one call, not `calls_each`). After `calls_each` rounds, or when one
// candidate is left, the lowest median wins, on every rank alike (ties:
// the earlier prediction). Every trial call returns the exact sum (they run real
// schemes); only their speed differs. A later profile that shortlists the
// same candidates (in any order) keeps the measured winner; a different
// shortlist is timed again. With one candidate (or `candidates` <= 1)
// nothing is timed. Defaults: 3 candidates within 4x, at most 5 rounds,
// drop at 1.5x, i.e. at most the first 15 calls of a tensor
// (AutoScheme::settled() says when the timing is over).
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

#include <cstddef>
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

// How `auto` confirms the cost model's shortlist by timing it (see above).
struct AutoTrialOptions {
  int candidates = 3;     // at most this many (>= 0); 0 or 1: the model's choice, untimed
  double within = 4.0;    // only candidates predicted within this factor of the best
  int calls_each = 5;     // timed calls per candidate at most (>= 1)
  double drop = 1.5;      // after each round, candidates whose median exceeds
                          // this factor x the best's are not timed again
                          // (timed once: drop^2 x, for drop > 1)
};

struct AutoOptions {
  SchemeOptions scheme;                 // passed to the chosen schemes
  ProfilerOptions profiler;             // schedule and sample size
  Network network;                      // what time is predicted for
  AutoTrialOptions trial;               // timing the shortlist
  std::string force;                    // a scheme id; empty (or "auto") = choose
  std::vector<std::string> candidates;  // empty = every registered, modeled scheme
  // Only schemes whose sums are the ranks' values added in ascending rank
  // order (SchemeInfo::rank_order): bit for bit PyTorch's Gloo sparse
  // allreduce, whatever auto chooses or times.
  bool rank_order = false;
  bool log = false;                     // rank 0 logs each decision
  // Where log lines go; empty = stderr.
  std::function<void(const std::string&)> log_sink = {};
  // The tensors (name and shape) whose profile and decision auto keeps
  // (at least 1). Past it the least recently synchronized one is forgotten,
  // the same on every rank, and profiled and timed afresh if it returns:
  // names that change every step cannot grow auto's state without bound.
  size_t max_tensors = 4096;
};

// One candidate's timed calls (seconds, the slowest rank's per call).
struct AutoTrial {
  std::string scheme;
  std::vector<double> times_s;
  double median_s = 0;
  bool dropped = false;  // fell behind by more than AutoTrialOptions::drop
};

// One decision: the predictions it compared, the trials and the winner.
struct AutoDecision {
  std::string tensor;
  int64_t call = 0;  // the tensor's call number when decided
  std::string chosen;     // what runs now (the prediction until the trials end)
  std::string predicted;  // the cost model's choice
  bool forced = false;
  bool measured = false;  // chosen by timing the shortlist
  WorkloadProfile profile;
  std::vector<Prediction> predictions;        // the modeled candidates, in registry order
  std::vector<Selection::Refusal> refused;    // faster candidates that said "not supported"
  std::vector<std::string> shortlist;         // timed candidates, fastest predicted first
  std::vector<AutoTrial> trials;              // their times, once the trials have ended
};

// auto sums every dtype by choosing only among the schemes that declare it.
inline constexpr SyncCapabilities kAutoCapabilities{.dtypes = DTypeSet::All()};

class AutoScheme final : public Scheme {
 public:
  // registry: the schemes to choose from (an entry without a cost function,
  // such as "auto" itself, is never chosen). InvalidArgument for an unknown
  // force.
  AutoScheme(SchemeRegistry registry, AutoOptions options);

  std::string_view name() const override { return "auto"; }
  SyncCapabilities capabilities() const override { return kAutoCapabilities; }
  // Everything that decides what auto runs and how (forced scheme,
  // candidates, rank order, the network it predicts for, the trial and
  // profiling schedules, the chosen schemes' options): ranks with other
  // settings could choose, or time, different schemes.
  std::string shared_settings() const override;
  std::string_view description() const override;

  // The latest decision for a tensor (by name and shape: the most recent
  // one with this name), or nullptr before its first call.
  const AutoDecision* decision(std::string_view tensor) const;
  // False while the tensor's shortlist is being timed (its calls then run
  // the candidates in turn); true otherwise, also before its first call.
  // The same on every rank.
  bool settled(std::string_view tensor) const;

 protected:
  SparseTensor DoSync(Communicator& comm, const SparseTensor& local,
                      const SyncOptions& options) override;
  void DoSyncInto(Communicator& comm, const SparseTensor& local, DenseValues out,
                  double divisor, const SyncOptions& options) override;

 private:
  struct TensorState {
    explicit TensorState(const ProfilerOptions& o) : profiler(o) {}
    Profiler profiler;
    AutoDecision decision;
    std::vector<size_t> live;         // shortlist positions still timed; empty: not timing
    bool trying() const { return !live.empty(); }
    size_t next = 0;                  // position in `live` of the next call
    int rounds = 0;                   // rounds timed
    std::vector<double> round_times;  // this rank's times in this round
    uint64_t last_use = 0;            // AutoScheme::uses_ at its latest call
  };

  void Decide(TensorState& state, const SparseTensor& local, int rank);
  // The candidates to time, fastest predicted first (asks instances, so
  // not const).
  std::vector<std::string> Shortlist(const AutoDecision& d);
  // Chooses the scheme for `local` (forced, timed in turn or decided) and
  // calls run(scheme) once: the one path of both sparse entries.
  void Route(Communicator& comm, const SparseTensor& local,
             const std::function<void(Scheme&)>& run);
  void RunTrial(TensorState& state, Communicator& comm, const std::function<void(Scheme&)>& run);
  void EndRound(TensorState& state, Communicator& comm);
  Scheme& Chosen(const std::string& id);
  // Erases the least recently used tensor state (and the names pointing to it).
  void ForgetLeastRecent();
  void Log(const std::string& text) const;

  SchemeRegistry registry_;
  AutoOptions options_;
  std::map<std::string, TensorState, std::less<>> tensors_;
  std::map<std::string, std::string, std::less<>> last_key_;  // tensor name -> state key
  std::map<std::string, std::unique_ptr<Scheme>> instances_;  // chosen schemes, built once
  uint64_t uses_ = 0;  // calls so far (the clock of TensorState::last_use)
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
// AutoScheme over BuiltinSchemes() with `defaults` and scheme_options. The
// entry is a selector (SchemeInfo::selector); Create("auto", options,
// /*rank_order=*/true) builds it with AutoOptions::rank_order
// (SchemeInfo::rank_order_factory).
SchemeInfo AutoSchemeInfo(AutoOptions defaults = {});

// BuiltinSchemes() plus `auto` (built with `auto_defaults`).
SchemeRegistry AllSchemes(AutoOptions auto_defaults = {});

}  // namespace zen
