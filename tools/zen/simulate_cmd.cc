// `zen simulate`: predict every scheme's time at world sizes no machine here
// has, from the cost model (zen/analysis/cost_model.h) and a sparsity profile
// measured on a trace (or a synthetic workload) and extrapolated.
//
// The extrapolation (zen/analysis/profiler.h, Extrapolation; docs/
// performance.md, "Beyond one machine") fits the union growth of the trace's
// ranks by a power law; --fit-ranks K fits on fewer ranks to test it against
// measured ranks.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tools/zen/commands.h"
#include "tools/zen/flags.h"
#include "tools/zen/testbed.h"
#include "zen/analysis/cost_model.h"
#include "zen/analysis/profiler.h"
#include "zen/core/error.h"
#include "zen/core/reduce.h"
#include "zen/workload/synthetic.h"
#include "zen/workload/trace.h"

namespace zen::cli {
namespace {

using nlohmann::json;

constexpr const char* kHelp =
    R"(usage: zen simulate (TRACE [--tensor NAME] [--step K] | --synthetic SPEC --ranks K)
                    [--world LIST] [--bandwidth RATE] [--latency-us L]
                    [--fit-ranks K] [--max-scan N] [--json OUT]

Predicts every modeled scheme's time (and bytes per rank) at each world size
from the cost model, with the sparsity profile measured on the trace and
extrapolated to larger worlds: gamma(k) by a power-law fit of the trace's
union-growth curve, range shares and skewness measured on the trace's ranks.
"allreduce" is the dense AllReduce a collective library runs (2 (n-1)/n of
the dense tensor in the fewer rounds of a ring and of halving-doubling), the
baseline of "best vs allreduce"; "dense" is zen's own dense ring scheme.
Then prints, per scheme, the first world size (scanning up to --max-scan)
where it stops beating the dense AllReduce.

  TRACE              a zen-trace/1 file (--profile TRACE is the same)
  --tensor NAME      one tensor, named as `zen analyze` and the recording name
                     it: step0.emb.weight, or emb.weight (at --step, default
                     its first step); default: the whole model, every tensor
                     of one step, each synchronized on its own, times summed
  --step K           the step of the whole model or of --tensor NAME
  --synthetic SPEC   profile a synthetic workload of --ranks K ranks instead
  --world LIST       comma-separated world sizes (default 16,64,256,1024)
  --bandwidth RATE   link rate, tc syntax: 25gbit, 500mbit (default 25gbit)
  --latency-us L     per communication round (default 5)
  --fit-ranks K      fit on the first K ranks only (default: all of the trace)
  --max-scan N       largest world of the crossover scan (default 4096)
  --json OUT         also write every prediction as JSON
)";

// One tensor's ranks.
struct Item {
  std::string name;
  std::vector<SparseTensor> ranks;
};

struct Base {
  std::string source;
  std::vector<Item> items;
};

Base LoadBase(const Flags& flags) {
  Base b;
  if (auto spec = flags.Get("synthetic")) {
    if (!flags.positional().empty() || flags.Has("profile"))
      throw UsageError("give either a TRACE or --synthetic, not both");
    const SyntheticSpec s = ParseSyntheticSpec(*spec);
    const int k = static_cast<int>(flags.Int("ranks", 8));
    if (k < 1) throw InvalidArgument("--ranks must be >= 1");
    b.source = "synthetic " + ToString(s) + " x " + std::to_string(k) + " ranks";
    b.items.push_back({ToString(s), GenerateSynthetic(s, k)});
    return b;
  }
  std::optional<std::string> path = flags.Get("profile");
  if (!flags.positional().empty()) {
    if (path) throw UsageError("give the TRACE once (positionally, or as --profile TRACE)");
    path = flags.positional()[0];
  }
  if (!path) throw UsageError("give a TRACE or --synthetic SPEC (see --help)");
  TraceReader reader(*path);
  if (reader.tensors().empty()) throw InvalidArgument("trace " + *path + " holds no tensor");
  const std::vector<std::string> names =
      SelectTraceTensors(reader.tensors(), flags.Str("tensor", ""), flags.Int("step", -1));
  if (names.size() == 1) {
    b.source = "trace " + *path + " tensor " + names[0];
  } else {
    const StepName step = ParseStepName(names[0]);
    b.source = "trace " + *path + " whole model: " + std::to_string(names.size()) + " tensors" +
               (step.step >= 0 ? " of step " + std::to_string(step.step) : std::string());
  }
  for (const std::string& name : names) b.items.push_back({name, reader.ReadTensor(name)});
  return b;
}

std::vector<int> WorldList(const Flags& flags) {
  std::vector<int> out;
  for (const auto& w : SplitList(flags.Str("world", "16,64,256,1024"))) {
    char* end = nullptr;
    const long v = std::strtol(w.c_str(), &end, 10);
    if (*end != '\0' || v < 1 || v > (1 << 20))
      throw InvalidArgument("--world entry '" + w + "' must be 1..2^20");
    out.push_back(static_cast<int>(v));
  }
  if (out.empty()) throw InvalidArgument("--world needs at least one size");
  return out;
}

// 2..16, then about 4 steps per doubling.
std::vector<int> ScanGrid(int max_n) {
  std::vector<int> g;
  for (int n = 2; n <= std::min(16, max_n); ++n) g.push_back(n);
  for (double x = 16 * std::pow(2.0, 0.25); x <= max_n + 0.5; x *= std::pow(2.0, 0.25)) {
    const int n = static_cast<int>(std::lround(x));
    if (n > g.back()) g.push_back(n);
  }
  return g;
}

// speedup_vs_dense: against zen's dense ring scheme.
json PredictionJson(const Prediction& p, double dense_s) {
  return {{"scheme", p.scheme},
          {"time_s", p.time_s},
          {"recv_max", p.recv_max},
          {"recv_mean", p.recv_mean},
          {"sent_max", p.sent_max},
          {"rounds", p.rounds},
          {"speedup_vs_dense", p.time_s > 0 ? dense_s / p.time_s : 0.0}};
}


// One tensor's fitted extrapolation (zen/analysis/profiler.h).
struct Modeled {
  std::string name;
  Extrapolation x;
  double density = 0;
};

Modeled Model(const Item& item, int fit) {
  Modeled m;
  m.name = item.name;
  m.x = FitExtrapolation(std::vector<SparseTensor>(item.ranks.begin(), item.ranks.begin() + fit));
  double nnz = 0;
  for (const auto& t : m.x.ranks) nnz += static_cast<double>(t.nnz());
  m.density = nnz / fit / static_cast<double>(m.x.ranks[0].rows());
  return m;
}

// The whole workload at one world size: every tensor synchronized on its
// own, times and bytes summed per scheme; the dense AllReduce baseline
// summed alike.
struct WorldPrediction {
  std::vector<Prediction> schemes;
  Prediction allreduce;
  double lower_bound_s = 0;
};

WorldPrediction PredictWorld(const std::vector<Modeled>& models, int world, const Network& net) {
  WorldPrediction out;
  out.allreduce.scheme = "allreduce";
  for (const Modeled& m : models) {
    const WorkloadProfile p = m.x.At(world);
    const std::vector<Prediction> pred = PredictAll(p, net);
    if (out.schemes.empty()) {
      out.schemes = pred;
    } else {
      for (size_t i = 0; i < pred.size(); ++i) {
        Prediction& a = out.schemes[i];
        a.time_s += pred[i].time_s;
        a.recv_max += pred[i].recv_max;
        a.recv_mean += pred[i].recv_mean;
        a.sent_max += pred[i].sent_max;
        a.rounds += pred[i].rounds;
      }
    }
    const Prediction d = PredictDenseAllReduce(p, net);
    out.allreduce.time_s += d.time_s;
    out.allreduce.recv_max += d.recv_max;
    out.allreduce.recv_mean += d.recv_mean;
    out.allreduce.sent_max += d.sent_max;
    out.allreduce.rounds += d.rounds;
    out.lower_bound_s += SyncTimeLowerBound(p, net);
  }
  return out;
}

}  // namespace

int RunSimulate(Args args, const Environment&) {
  Flags flags(args,
              {"profile", "tensor", "step", "synthetic", "ranks", "world", "bandwidth",
               "latency-us", "fit-ranks", "max-scan", "json"},
              {}, /*max_positional=*/1);
  if (flags.help()) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  const Base base = LoadBase(flags);
  const int ranks = static_cast<int>(base.items[0].ranks.size());
  const int fit = static_cast<int>(flags.Int("fit-ranks", ranks));
  if (fit < 2 || fit > ranks) {
    throw InvalidArgument("--fit-ranks " + std::to_string(fit) + " must be in [2, " +
                          std::to_string(ranks) + "] (the ranks of the workload)");
  }
  const std::vector<int> worlds = WorldList(flags);
  Network net;
  const std::string rate = flags.Str("bandwidth", "25gbit");
  net.bandwidth_bytes_per_s = ParseRateBits(rate) / 8;
  net.latency_s = flags.Double("latency-us", 5) * 1e-6;

  std::vector<Modeled> models;
  for (const Item& item : base.items) models.push_back(Model(item, fit));
  const bool single = models.size() == 1;

  std::printf("profile   %s\n", base.source.c_str());
  json tensors = json::array();
  for (size_t i = 0; i < models.size(); ++i) {
    const Modeled& m = models[i];
    const SparseTensor& t0 = m.x.ranks[0];
    if (single) {
      std::printf("tensor    rows %lld  width %lld  density %.4f%%  fitted on %d ranks\n",
                  static_cast<long long>(t0.rows()), static_cast<long long>(t0.width()),
                  100 * m.density, fit);
      std::printf("gamma(k)  measured");
      for (double g : m.x.gamma) std::printf(" %.3f", g);
      std::printf("\n          fit k^%.4f (max residual %.1f%%); blocks k^%.4f (%.1f%%)\n",
                  m.x.rows_fit.beta, 100 * m.x.rows_fit.max_rel_residual, m.x.blocks_fit.beta,
                  100 * m.x.blocks_fit.max_rel_residual);
      if (fit < ranks) {
        const std::vector<double> truth = RowGrowthCurve(base.items[i].ranks);
        const double at = m.x.rows_fit.At(static_cast<double>(truth.size()));
        std::printf(
            "holdout   gamma(%zu): measured %.3f, fit of %d ranks predicts %.3f (%+.1f%%)\n",
            truth.size(), truth.back(), fit, at, 100 * (at / truth.back() - 1));
      }
    } else {
      if (i == 0) {
        std::printf("%-36s %10s %6s %9s %9s %8s\n", "tensor", "rows", "width", "density",
                    "gamma(K)", "fit k^b");
      }
      std::printf("%-36s %10lld %6lld %8.3f%% %9.2f %8.3f\n", m.name.c_str(),
                  static_cast<long long>(t0.rows()), static_cast<long long>(t0.width()),
                  100 * m.density, m.x.gamma.back(), m.x.rows_fit.beta);
    }
    tensors.push_back({{"name", m.name},
                       {"rows", t0.rows()},
                       {"width", t0.width()},
                       {"density", m.density},
                       {"gamma_measured", m.x.gamma},
                       {"gamma_beta", m.x.rows_fit.beta},
                       {"gamma_fit_max_residual", m.x.rows_fit.max_rel_residual},
                       {"block_gamma_measured", m.x.block_gamma},
                       {"block_gamma_beta", m.x.blocks_fit.beta}});
  }
  std::printf("network   %s per link, %.1f us per round\n\n", rate.c_str(), net.latency_s * 1e6);

  const Modeled& m0 = models[0];
  json out = {{"source", base.source},
              {"rows", m0.x.ranks[0].rows()},
              {"width", m0.x.ranks[0].width()},
              {"fit_ranks", fit},
              {"gamma_measured", m0.x.gamma},
              {"gamma_beta", m0.x.rows_fit.beta},
              {"gamma_fit_max_residual", m0.x.rows_fit.max_rel_residual},
              {"block_gamma_measured", m0.x.block_gamma},
              {"block_gamma_beta", m0.x.blocks_fit.beta},
              {"tensors", tensors},
              {"bandwidth_bits_per_s", net.bandwidth_bytes_per_s * 8},
              {"latency_s", net.latency_s}};
  const std::vector<std::string> schemes = ModeledSchemes();
  std::printf("%-7s %-6s", "world", "prof");
  if (single) std::printf(" %9s %9s", "gamma(n)", "skew");
  std::printf(" %13s", "allreduce ms");
  for (const auto& s : schemes) std::printf(" %12s", (s + " ms").c_str());
  std::printf("   best vs allreduce\n");
  json rows = json::array();
  for (int w : worlds) {
    const WorldPrediction wp = PredictWorld(models, w, net);
    const double baseline = wp.allreduce.time_s, dense = wp.schemes[0].time_s;
    const bool exact = m0.x.Exact(w);
    std::printf("%-7d %-6s", w, exact ? "exact" : "fit");
    json row = {{"world", w},
                {"profile", exact ? "exact" : "extrapolated"},
                {"allreduce", PredictionJson(wp.allreduce, dense)},
                {"lower_bound_s", wp.lower_bound_s},
                {"predictions", json::array()}};
    if (single) {
      const WorkloadProfile p = m0.x.At(w);
      std::printf(" %9.2f %9.2f", p.sparsity.gamma[static_cast<size_t>(w - 1)],
                  p.sparsity.skewness);
      row["gamma_n"] = p.sparsity.gamma[static_cast<size_t>(w - 1)];
      row["skewness"] = p.sparsity.skewness;
    }
    std::printf(" %13.3f", 1e3 * baseline);
    const Prediction* best = &wp.schemes[0];
    for (const Prediction& q : wp.schemes) {
      std::printf(" %12.3f", 1e3 * q.time_s);
      json j = PredictionJson(q, dense);
      j["speedup_vs_allreduce"] = q.time_s > 0 ? baseline / q.time_s : 0.0;
      row["predictions"].push_back(j);
      if (q.time_s < best->time_s) best = &q;
    }
    std::printf("   %s %.2fx\n", best->scheme.c_str(), baseline / best->time_s);
    rows.push_back(row);
  }
  out["worlds"] = rows;

  // Where each scheme stops beating the dense AllReduce.
  const int max_scan = static_cast<int>(flags.Int("max-scan", 4096));
  std::printf("\ncrossover with dense AllReduce (scan n = 2..%d):\n", max_scan);
  std::map<std::string, int> crossover;
  std::map<std::string, bool> beaten_once;
  for (int n : ScanGrid(max_scan)) {
    const WorldPrediction wp = PredictWorld(models, n, net);
    for (const Prediction& q : wp.schemes) {
      if (crossover.count(q.scheme)) continue;
      if (q.time_s < wp.allreduce.time_s)
        beaten_once[q.scheme] = true;
      else if (beaten_once[q.scheme])
        crossover[q.scheme] = n;
    }
  }
  json cross = json::object();
  for (const auto& s : schemes) {
    if (crossover.count(s)) {
      std::printf("  %-11s stops beating it at n = %d\n", s.c_str(), crossover[s]);
      cross[s] = crossover[s];
    } else if (beaten_once[s]) {
      std::printf("  %-11s beats it at every n up to %d\n", s.c_str(), max_scan);
      cross[s] = nullptr;
    } else {
      std::printf("  %-11s never beats it in 2..%d\n", s.c_str(), max_scan);
      cross[s] = 0;
    }
  }
  out["crossover_with_dense"] = cross;
  if (auto path = flags.Get("json")) {
    std::ofstream f(*path);
    f << out.dump(2) << "\n";
    if (!f) throw InvalidArgument("cannot write --json " + *path);
  }
  return 0;
}

}  // namespace zen::cli
