#include "zen/analysis/auto_scheme.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <numeric>
#include <sstream>

#include "zen/comm/collectives.h"
#include "zen/core/error.h"

namespace zen {
namespace {

constexpr char kDescription[] =
    "per tensor, the fastest scheme: the cost model shortlists (online profile), timed calls decide";

std::string Key(const SparseTensor& t) {
  return t.name() + "|" + std::to_string(t.rows()) + "x" + std::to_string(t.width()) + "|" +
         DTypeName(t.dtype());
}

// An input goes only to schemes that sum its dtype
// (SyncCapabilities::dtypes); the profile's dtype says which it is.
Support TakesValues(const SchemeInfo& info, const SparsityProfile& profile) {
  if (!info.capabilities.Sums(profile.dtype)) {
    return Support::No(detail::Concat("does not sum ", DTypeName(profile.dtype), " values"));
  }
  return Support::Yes();
}

// Whether two shortlists hold the same schemes (in any order: a profile's
// sampling noise may reorder close predictions).
bool SameSchemes(std::vector<std::string> a, std::vector<std::string> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  return a == b;
}

// The lowest median of the candidates still timed; ties go to the earlier
// (faster predicted) one.
const std::string& FastestTrial(const std::vector<AutoTrial>& trials) {
  const AutoTrial* best = nullptr;
  for (const AutoTrial& t : trials) {
    if (!t.dropped && (best == nullptr || t.median_s < best->median_s)) best = &t;
  }
  return best->scheme;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace

namespace {

// Every AutoOptions field that has a wrong value: InvalidArgument naming the
// option and the value (auto divides by block_values and sample sizes, and
// loops over trial rounds, long after construction).
void ValidateAutoOptions(const AutoOptions& o, const SchemeRegistry& registry) {
  ValidateSchemeOptions(o.scheme, "auto");
  const auto fail = [](const auto&... parts) -> void {
    throw InvalidArgument(Where{}, "auto: ", parts...);
  };
  if (o.profiler.schedule.warmup_calls < 1) {
    fail("profiler.schedule.warmup_calls ", o.profiler.schedule.warmup_calls,
         " must be >= 1 (the first call of a tensor is profiled)");
  }
  if (o.profiler.sample_ids < 1) fail("profiler.sample_ids ", o.profiler.sample_ids, " must be >= 1");
  if (!(std::isfinite(o.network.bandwidth_bytes_per_s) && o.network.bandwidth_bytes_per_s > 0)) {
    fail("network.bandwidth_bytes_per_s ", o.network.bandwidth_bytes_per_s,
         " must be finite and > 0");
  }
  if (!(std::isfinite(o.network.latency_s) && o.network.latency_s >= 0)) {
    fail("network.latency_s ", o.network.latency_s, " must be finite and >= 0");
  }
  if (o.trial.candidates < 0) fail("trial.candidates ", o.trial.candidates, " must be >= 0");
  if (!(std::isfinite(o.trial.within) && o.trial.within >= 1)) {
    fail("trial.within ", o.trial.within, " must be finite and >= 1");
  }
  if (o.trial.calls_each < 1) fail("trial.calls_each ", o.trial.calls_each, " must be >= 1");
  if (!(std::isfinite(o.trial.drop) && o.trial.drop >= 1)) {
    fail("trial.drop ", o.trial.drop, " must be finite and >= 1");
  }
  if (o.max_tensors < 1) fail("max_tensors ", o.max_tensors, " must be >= 1");
  for (const std::string& c : o.candidates) {
    const SchemeInfo* info = registry.Find(c);
    if (!info || !info->cost) {
      fail("candidate '", c, "' is not a registered scheme with a cost model (modeled: ",
           [&] {
             std::string ids;
             for (const std::string& m : registry.modeled()) ids += (ids.empty() ? "" : ", ") + m;
             return ids;
           }(),
           ")");
    }
  }
}

}  // namespace

AutoScheme::AutoScheme(SchemeRegistry registry, AutoOptions options)
    : registry_(std::move(registry)), options_(std::move(options)) {
  ValidateAutoOptions(options_, registry_);
  if (!options_.force.empty() && options_.force != "auto" && !registry_.Find(options_.force)) {
    registry_.Create(options_.force);  // throws InvalidArgument listing the known ids
  }
  if (options_.force == "auto") options_.force.clear();
  options_.profiler.block_values = options_.scheme.block_values;
  if (options_.rank_order) {
    std::vector<std::string> keep;
    for (const SchemeInfo& s : registry_.schemes()) {
      const bool listed = options_.candidates.empty() ||
                          std::find(options_.candidates.begin(), options_.candidates.end(), s.id) !=
                              options_.candidates.end();
      if (s.rank_order && s.cost && listed) keep.push_back(s.id);
    }
    if (keep.empty()) {
      throw InvalidArgument("auto: rank_order is asked, but no candidate scheme sums in rank order");
    }
    options_.candidates = std::move(keep);
  }
}

std::string_view AutoScheme::description() const { return kDescription; }

namespace {

// A double exactly, in the fewest digits that read back as it.
std::string Exact(double v) {
  char buf[32];
  const auto end = std::to_chars(buf, buf + sizeof(buf), v).ptr;
  return std::string(buf, end);
}

// AutoScheme::shared_settings' text for `o`.
std::string SettingsText(const AutoOptions& o) {
  std::ostringstream out;
  out << "force '" << o.force << "', candidates [";
  for (size_t i = 0; i < o.candidates.size(); ++i) out << (i ? " " : "") << o.candidates[i];
  out << "], rank order " << o.rank_order << ", network " << Exact(o.network.bandwidth_bytes_per_s)
      << " B/s " << Exact(o.network.latency_s) << " s, trial " << o.trial.candidates << "/"
      << Exact(o.trial.within) << "/" << o.trial.calls_each << "/" << Exact(o.trial.drop)
      << ", profile "
      << o.profiler.schedule.warmup_calls << "/" << o.profiler.schedule.every << "/"
      << o.profiler.sample_ids << "/" << o.profiler.block_values << "/" << o.profiler.seed
      << ", max tensors " << o.max_tensors << ", block_values " << o.scheme.block_values;
  return out.str();
}

}  // namespace

std::string AutoScheme::shared_settings() const {
  std::string text = SettingsText(options_);
  return text == SettingsText(AutoOptions{}) ? std::string() : text;
}

const AutoDecision* AutoScheme::decision(std::string_view tensor) const {
  const auto key = last_key_.find(tensor);
  if (key == last_key_.end()) return nullptr;
  return &tensors_.find(key->second)->second.decision;
}

bool AutoScheme::settled(std::string_view tensor) const {
  const auto key = last_key_.find(tensor);
  if (key == last_key_.end()) return true;
  return !tensors_.find(key->second)->second.trying();
}

void AutoScheme::ForgetLeastRecent() {
  if (tensors_.empty()) return;
  auto oldest = tensors_.begin();
  for (auto it = tensors_.begin(); it != tensors_.end(); ++it) {
    if (it->second.last_use < oldest->second.last_use) oldest = it;
  }
  for (auto name = last_key_.begin(); name != last_key_.end();) {
    name = name->second == oldest->first ? last_key_.erase(name) : std::next(name);
  }
  tensors_.erase(oldest);
}

Scheme& AutoScheme::Chosen(const std::string& id) {
  auto& slot = instances_[id];
  if (!slot) slot = registry_.Create(id, options_.scheme);
  return *slot;
}

void AutoScheme::Log(const std::string& text) const {
  if (options_.log_sink) {
    options_.log_sink(text);
  } else {
    std::fprintf(stderr, "%s", text.c_str());
  }
}

void AutoScheme::Decide(TensorState& state, const SparseTensor& local, int rank) {
  AutoDecision& d = state.decision;
  d.tensor = local.name();
  d.call = state.profiler.calls() - 1;
  d.profile = state.profiler.profile();
  d.profile.sparsity.value_bytes = DTypeSize(local.dtype());
  d.profile.sparsity.dtype = local.dtype();
  d.forced = false;
  // A candidate is asked through the instance that would run (with this
  // auto's options), unless its entry answers without one.
  const SchemeRegistry::AskSupport ask = [this](const SchemeInfo& info,
                                                const SparsityProfile& profile) {
    if (const Support values = TakesValues(info, profile); !values.ok) return values;
    return info.supports ? info.supports(profile) : Chosen(info.id).supports(profile);
  };
  Selection pick = registry_.Select(d.profile, options_.network, options_.candidates, ask);
  d.predictions = std::move(pick.predictions);
  d.refused = std::move(pick.refused);
  d.chosen = std::move(pick.chosen);
  if (d.chosen.empty()) {
    std::string why = d.predictions.empty() ? "no candidate scheme has a cost model"
                                            : "every candidate refused the input:";
    for (const auto& r : d.refused) why += " " + r.scheme + " (" + r.reason + ")";
    throw InvalidArgument(Where{rank, local.name()}, "auto: ", why);
  }
  d.predicted = d.chosen;
  std::vector<std::string> shortlist = Shortlist(d);
  if (shortlist.size() < 2) {
    // Nothing to time: the model's choice stands.
    d.shortlist.clear();
    d.trials.clear();
    d.measured = false;
    state.live.clear();
  } else if (d.measured && SameSchemes(shortlist, d.shortlist)) {
    // The same shortlist as the last trials: their winner stands.
    d.chosen = FastestTrial(d.trials);
  } else if (!state.trying() || !SameSchemes(shortlist, d.shortlist)) {
    // A new shortlist: time it from this call on.
    d.shortlist = std::move(shortlist);
    d.trials.clear();
    for (const std::string& id : d.shortlist) d.trials.push_back({id, {}, 0, false});
    d.measured = false;
    state.live.resize(d.shortlist.size());
    std::iota(state.live.begin(), state.live.end(), size_t{0});
    state.next = 0;
    state.rounds = 0;
    state.round_times.clear();
  }
  if (options_.log && rank == 0) Log(FormatDecision(d));
}

std::vector<std::string> AutoScheme::Shortlist(const AutoDecision& d) {
  std::vector<std::string> out;
  if (options_.trial.candidates <= 1 || d.profile.sparsity.world_size < 2) return out;
  std::vector<const Prediction*> order;
  for (const Prediction& p : d.predictions) order.push_back(&p);
  std::stable_sort(order.begin(), order.end(),
                   [](const Prediction* a, const Prediction* b) { return a->time_s < b->time_s; });
  double best = -1;
  for (const Prediction* p : order) {
    if (p->scheme == d.chosen) best = p->time_s;
    if (best < 0) continue;  // faster ones refused the input
    if (p->time_s > options_.trial.within * best) break;
    const SchemeInfo* info = registry_.Find(p->scheme);
    if (!TakesValues(*info, d.profile.sparsity).ok) continue;
    const Support yes = info->supports ? info->supports(d.profile.sparsity)
                                       : Chosen(p->scheme).supports(d.profile.sparsity);
    if (!yes.ok) continue;
    out.push_back(p->scheme);
    if (static_cast<int>(out.size()) >= options_.trial.candidates) break;
  }
  return out;
}

void AutoScheme::RunTrial(TensorState& state, Communicator& comm,
                          const std::function<void(Scheme&)>& run) {
  Scheme& scheme = Chosen(state.decision.shortlist[state.live[state.next]]);
  const auto t0 = std::chrono::steady_clock::now();
  run(scheme);
  const auto t1 = std::chrono::steady_clock::now();
  state.round_times.push_back(std::chrono::duration<double>(t1 - t0).count());
  if (++state.next == state.live.size()) EndRound(state, comm);
}

void AutoScheme::EndRound(TensorState& state, Communicator& comm) {
  AutoDecision& d = state.decision;
  const size_t calls = state.round_times.size();
  // Every rank timed the same calls: a peer may send exactly as many bytes
  // (more is a FormatError before anything is allocated for them).
  const auto gathered = AllGatherV(comm, std::as_bytes(std::span<const double>(state.round_times)),
                                   static_cast<int64_t>(calls * sizeof(double)));
  // Per call, the slowest rank's time (every rank computes the same).
  std::vector<double> slowest(calls, 0.0);
  for (size_t r = 0; r < gathered.size(); ++r) {
    if (gathered[r].size() != calls * sizeof(double)) {
      throw FormatError(Where{comm.rank(), d.tensor}, "auto: rank ", r, " timed ",
                        gathered[r].size() / sizeof(double), " trial calls in this round, this rank ",
                        calls);
    }
    for (size_t i = 0; i < calls; ++i) {
      double t;
      std::memcpy(&t, gathered[r].data() + i * sizeof(double), sizeof t);
      // A duration: finite and not negative (NaN fails the test too).
      if (!(t >= 0 && t <= std::numeric_limits<double>::max())) {
        throw FormatError(Where{comm.rank(), d.tensor}, "auto: rank ", r, " timed trial call ", i,
                          " of this round at ", t, " s; a time is finite and not negative");
      }
      slowest[i] = std::max(slowest[i], t);
    }
  }
  double best = -1;
  for (size_t i = 0; i < calls; ++i) {
    AutoTrial& t = d.trials[state.live[i]];
    t.times_s.push_back(slowest[i]);
    t.median_s = Median(t.times_s);
    if (best < 0 || t.median_s < best) best = t.median_s;
  }
  // Candidates far behind the best so far are not timed again. One call is
  // weak evidence: two single calls of schemes whose steady states are
  // within a few percent differed by 1.7x on the testbed (a lucky first
  // call of one, docs/sections/auto.md), so a candidate timed once
  // must be drop^2 behind (2.25x at the default) to go.
  std::vector<size_t> live;
  const double drop = options_.trial.drop;
  for (size_t k : state.live) {
    const double factor = d.trials[k].times_s.size() < 2 ? std::max(drop, drop * drop) : drop;
    // (The best itself always stays, whatever `drop` is.)
    if (d.trials[k].median_s > factor * best && d.trials[k].median_s > best) {
      d.trials[k].dropped = true;
    } else {
      live.push_back(k);
    }
  }
  // The next round starts one candidate further (A B C, B C A, C A B, ...,
  // the same on every rank): no candidate always takes a round's first
  // call, which can run differently from the others (on the testbed,
  // agsparse, always first, ran its first trial calls up to 2x faster
  // than its later ones: docs/sections/auto.md).
  std::sort(live.begin(), live.end());
  ++state.rounds;
  if (!live.empty()) {
    std::rotate(live.begin(), live.begin() + static_cast<std::ptrdiff_t>(
                                                  static_cast<size_t>(state.rounds) % live.size()),
                live.end());
  }
  state.live = std::move(live);
  state.next = 0;
  state.round_times.clear();
  if (state.rounds < std::max(1, options_.trial.calls_each) && state.live.size() > 1) return;
  d.chosen = FastestTrial(d.trials);
  d.measured = true;
  state.live.clear();  // the timing is over
  if (options_.log && comm.rank() == 0) Log(FormatDecision(d));
}

SparseTensor AutoScheme::DoSync(Communicator& comm, const SparseTensor& local,
                               const SyncOptions& options) {
  SparseTensor sum;
  Route(comm, local, [&](Scheme& s) { sum = Dispatch(s, comm, local, options); });
  return sum;
}

void AutoScheme::DoSyncInto(Communicator& comm, const SparseTensor& local, DenseValues out,
                            double divisor, const SyncOptions& options) {
  Route(comm, local, [&](Scheme& s) { DispatchInto(s, comm, local, out, divisor, options); });
}

void AutoScheme::Route(Communicator& comm, const SparseTensor& local,
                       const std::function<void(Scheme&)>& run) {
  const std::string key = Key(local);
  auto it = tensors_.find(key);
  if (it == tensors_.end()) {
    if (tensors_.size() >= std::max<size_t>(1, options_.max_tensors)) ForgetLeastRecent();
    it = tensors_.emplace(key, TensorState(options_.profiler)).first;
  }
  last_key_[local.name()] = key;
  TensorState& state = it->second;
  state.last_use = ++uses_;
  if (!options_.force.empty()) {
    const SchemeInfo* forced = registry_.Find(options_.force);
    if (forced != nullptr && !forced->capabilities.Sums(local.dtype())) {
      throw InvalidArgument(Where{comm.rank(), local.name()}, "auto: the forced scheme '",
                            options_.force, "' does not sum ", DTypeName(local.dtype()),
                            " values");
    }
    state.decision.tensor = local.name();
    state.decision.chosen = options_.force;
    state.decision.forced = true;
    run(Chosen(options_.force));
    return;
  }
  if (state.profiler.Observe(comm, local)) Decide(state, local, comm.rank());
  if (state.trying()) {
    RunTrial(state, comm, run);
    return;
  }
  run(Chosen(state.decision.chosen));
}

std::string FormatDecision(const AutoDecision& d) {
  std::ostringstream os;
  const SparsityProfile& s = d.profile.sparsity;
  const char* how = d.forced ? " (forced)"
                    : d.measured ? " (measured)"
                    : !d.shortlist.empty() ? " (predicted; timing the shortlist)"
                                           : "";
  os << "zen auto: tensor '" << d.tensor << "' [" << s.rows << " x " << s.width << "] call "
     << d.call << ": n=" << s.world_size << " density=" << s.density
     << " gamma(n)=" << (s.gamma.empty() ? 1.0 : s.gamma.back()) << " skew=" << s.skewness << " -> "
     << d.chosen << how << "\n";
  char line[192];
  std::snprintf(line, sizeof line, "  %-12s %14s %14s %12s %12s\n", "scheme", "recv_max_B",
                "recv_mean_B", "time_us", "measured_us");
  os << line;
  for (const Prediction& p : d.predictions) {
    const bool refused = std::any_of(d.refused.begin(), d.refused.end(),
                                     [&](const auto& r) { return r.scheme == p.scheme; });
    const auto trial = std::find_if(d.trials.begin(), d.trials.end(),
                                    [&](const AutoTrial& t) { return t.scheme == p.scheme; });
    char measured[32] = "-";
    if (trial != d.trials.end() && !trial->times_s.empty()) {
      std::snprintf(measured, sizeof measured, "%.2f%s", trial->median_s * 1e6,
                    trial->dropped ? " x" : "");
    }
    std::snprintf(line, sizeof line, "  %-12s %14.0f %14.0f %12.2f %12s%s\n", p.scheme.c_str(),
                  p.recv_max, p.recv_mean, p.time_s * 1e6, measured,
                  p.scheme == d.chosen ? "  <" : (refused ? "  (not supported)" : ""));
    os << line;
  }
  for (const auto& r : d.refused) {
    os << "  fallback: " << r.scheme << " does not support this input: " << r.reason << "\n";
  }
  return os.str();
}

AutoOptions AutoOptionsFromVariables(const VariableLookup& lookup, AutoOptions base) {
  if (const auto scheme = lookup("ZEN_SCHEME"); scheme && !scheme->empty()) base.force = *scheme;
  if (const auto log = lookup("ZEN_LOG"); log && *log == "info") base.log = true;
  return base;
}

SchemeInfo AutoSchemeInfo(AutoOptions defaults) {
  // `rank_order`: chooses only among the entries that sum in rank order.
  const auto factory = [defaults](bool rank_order) {
    return [defaults, rank_order](const SchemeOptions& o) -> std::unique_ptr<Scheme> {
      AutoOptions options = defaults;
      options.scheme = o;
      options.rank_order = options.rank_order || rank_order;
      return std::make_unique<AutoScheme>(BuiltinSchemes(), std::move(options));
    };
  };
  SchemeInfo info{"auto", kDescription, factory(false)};
  info.capabilities = kAutoCapabilities;
  info.selector = true;
  info.rank_order_factory = factory(true);
  return info;
}

SchemeRegistry AllSchemes(AutoOptions auto_defaults) {
  SchemeRegistry r = BuiltinSchemes();
  r.Add(AutoSchemeInfo(std::move(auto_defaults)));
  return r;
}

}  // namespace zen
