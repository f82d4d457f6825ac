#include "zen/analysis/auto_scheme.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "zen/core/error.h"

namespace zen {
namespace {

constexpr char kDescription[] =
    "per tensor, the scheme with the lowest predicted time (online profile + cost model)";

std::string Key(const SparseTensor& t) {
  return t.name() + "|" + std::to_string(t.rows()) + "x" + std::to_string(t.width());
}

}  // namespace

AutoScheme::AutoScheme(SchemeRegistry registry, AutoOptions options)
    : registry_(std::move(registry)), options_(std::move(options)) {
  if (!options_.force.empty() && options_.force != "auto" && !registry_.Find(options_.force)) {
    registry_.Create(options_.force);  // throws InvalidArgument listing the known ids
  }
  if (options_.force == "auto") options_.force.clear();
  options_.profiler.block_values = options_.scheme.block_values;
}

std::string_view AutoScheme::description() const { return kDescription; }

const AutoDecision* AutoScheme::decision(std::string_view tensor) const {
  const auto key = last_key_.find(tensor);
  if (key == last_key_.end()) return nullptr;
  return &tensors_.find(key->second)->second.decision;
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
  d.forced = false;
  // A candidate is asked through the instance that would run (with this
  // auto's options), unless its entry answers without one.
  const SchemeRegistry::AskSupport ask = [this](const SchemeInfo& info,
                                                const SparsityProfile& profile) {
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
  if (options_.log && rank == 0) Log(FormatDecision(d));
}

SparseTensor AutoScheme::DoSync(Communicator& comm, const SparseTensor& local) {
  const std::string key = Key(local);
  auto it = tensors_.find(key);
  if (it == tensors_.end()) it = tensors_.emplace(key, TensorState(options_.profiler)).first;
  last_key_[local.name()] = key;
  TensorState& state = it->second;
  if (!options_.force.empty()) {
    state.decision.tensor = local.name();
    state.decision.chosen = options_.force;
    state.decision.forced = true;
    return Dispatch(Chosen(options_.force), comm, local);
  }
  if (state.profiler.Observe(comm, local)) Decide(state, local, comm.rank());
  return Dispatch(Chosen(state.decision.chosen), comm, local);
}

std::string FormatDecision(const AutoDecision& d) {
  std::ostringstream os;
  const SparsityProfile& s = d.profile.sparsity;
  os << "zen auto: tensor '" << d.tensor << "' [" << s.rows << " x " << s.width << "] call "
     << d.call << ": n=" << s.world_size << " density=" << s.density
     << " gamma(n)=" << (s.gamma.empty() ? 1.0 : s.gamma.back()) << " skew=" << s.skewness << " -> "
     << d.chosen << (d.forced ? " (forced)" : "") << "\n";
  char line[160];
  std::snprintf(line, sizeof line, "  %-12s %14s %14s %12s\n", "scheme", "recv_max_B",
                "recv_mean_B", "time_us");
  os << line;
  for (const Prediction& p : d.predictions) {
    const bool refused = std::any_of(d.refused.begin(), d.refused.end(),
                                     [&](const auto& r) { return r.scheme == p.scheme; });
    std::snprintf(line, sizeof line, "  %-12s %14.0f %14.0f %12.2f%s\n", p.scheme.c_str(),
                  p.recv_max, p.recv_mean, p.time_s * 1e6,
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
  return {"auto", kDescription, [defaults](const SchemeOptions& o) -> std::unique_ptr<Scheme> {
            AutoOptions options = defaults;
            options.scheme = o;
            return std::make_unique<AutoScheme>(BuiltinSchemes(), std::move(options));
          }};
}

SchemeRegistry AllSchemes(AutoOptions auto_defaults) {
  SchemeRegistry r = BuiltinSchemes();
  r.Add(AutoSchemeInfo(std::move(auto_defaults)));
  return r;
}

}  // namespace zen
