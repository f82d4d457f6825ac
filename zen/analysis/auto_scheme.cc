#include "zen/analysis/auto_scheme.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "zen/core/error.h"

namespace zen {
namespace {

constexpr char kDescription[] =
    "per tensor, the scheme with the lowest predicted time (online profile + cost model)";

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

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

Scheme& AutoScheme::Delegate(const std::string& id) {
  auto& slot = delegates_[id];
  if (!slot) {
    slot = registry_.Create(id, options_.scheme);
    slot->set_check_agreement(false);
  }
  return *slot;
}

void AutoScheme::Decide(TensorState& state, const SparseTensor& local, int rank) {
  AutoDecision& d = state.decision;
  d.tensor = local.name();
  d.call = state.profiler.calls() - 1;
  d.profile = state.profiler.profile();
  d.predictions.clear();
  const std::vector<std::string> ids =
      options_.candidates.empty() ? registry_.ids() : options_.candidates;
  for (const std::string& id : ids) {
    if (id == "auto" || !registry_.Find(id)) continue;
    if (!Delegate(id).supports(d.profile.sparsity).ok) continue;
    if (auto p = Predict(id, d.profile, options_.network)) d.predictions.push_back(*p);
  }
  if (d.predictions.empty()) {
    throw InvalidArgument(Where{rank, local.name()}, "auto: no candidate scheme has a cost model");
  }
  const auto best = std::min_element(
      d.predictions.begin(), d.predictions.end(),
      [](const Prediction& a, const Prediction& b) { return a.time_s < b.time_s; });
  d.chosen = best->scheme;
  d.forced = false;
  if ((options_.log || Env("ZEN_LOG") == "info") && rank == 0) {
    std::fprintf(stderr, "%s", FormatDecision(d).c_str());
  }
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
    return Delegate(options_.force).Sync(comm, local);
  }
  if (state.profiler.Observe(comm, local)) Decide(state, local, comm.rank());
  return Delegate(state.decision.chosen).Sync(comm, local);
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
    std::snprintf(line, sizeof line, "  %-12s %14.0f %14.0f %12.2f%s\n", p.scheme.c_str(),
                  p.recv_max, p.recv_mean, p.time_s * 1e6, p.scheme == d.chosen ? "  <" : "");
    os << line;
  }
  return os.str();
}

SchemeInfo AutoSchemeInfo() {
  return {"auto", kDescription, [](const SchemeOptions& o) {
            AutoOptions options;
            options.scheme = o;
            options.force = Env("ZEN_SCHEME");
            return std::make_unique<AutoScheme>(BuiltinSchemes(), options);
          }};
}

SchemeRegistry AllSchemes() {
  SchemeRegistry r = BuiltinSchemes();
  r.Add(AutoSchemeInfo());
  return r;
}

}  // namespace zen
