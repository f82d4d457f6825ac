// `zen analyze TRACE [--json OUT] [--plot DIR]`: the sparsity analyzer
// (zen/analysis/trace_analyzer.h) on a zen-trace/1 file: a text report per
// tensor, optionally the JSON figures and PNG plots
// (tools/plots/plot_analysis.py, run with /usr/bin/python3).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "tools/zen/commands.h"
#include "tools/zen/data_files.h"
#include "tools/zen/flags.h"
#include "tools/zen/testbed.h"
#include "zen/analysis/cost_model.h"
#include "zen/analysis/profiler.h"
#include "zen/analysis/trace_analyzer.h"
#include "zen/core/error.h"

namespace zen::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kUsage =
    "usage: zen analyze TRACE [--world N] [--bandwidth RATE] [--latency-us L]\n"
    "                   [--json OUT] [--plot DIR] [--hash-seed S] [--bins B]\n"
    "  Characterizes a zen-trace/1 gradient trace, per tensor: per-rank and union\n"
    "  density, densification gamma(k), pairwise overlap, skew over 8 and n even\n"
    "  ranges, and the push/pull imbalance of range vs ZEN hash partitioning.\n"
    "  Ends with a verdict for one step of the model (its first), per tensor and\n"
    "  for the whole: the scheme `auto` picks, the predicted synchronization time\n"
    "  against a dense AllReduce, and the properties that decide it; at the\n"
    "  trace's world size and at --world N (extrapolated as `zen simulate` does).\n"
    "  --verdict       print the verdict alone, not the report before it\n"
    "  --world N       also judge at N ranks (default: the trace's only)\n"
    "  --bandwidth R   link rate of the verdict, tc syntax (default 25gbit)\n"
    "  --latency-us L  per communication round (default 5)\n"
    "  --json OUT     also write the figures as JSON\n"
    "  --plot DIR     write PNGs (densification, overlap histogram, skew heatmap)\n"
    "                 via plot_analysis.py, shipped with zen (<prefix>/share/zen/plots\n"
    "                 when installed); $ZEN_PLOT_SCRIPT or --plot-script PATH\n"
    "                 override where it is, $ZEN_PYTHON the interpreter\n"
    "                 (default /usr/bin/python3)\n"
    "  --hash-seed S  seed of the hash partition (default 24301)\n"
    "  --bins B       overlap histogram bins (default 20)\n";

// The JSON figures, written to `path` as they are formed.
void WriteJson(const std::string& path, const TraceAnalysis& analysis) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  WriteAnalysisJson(analysis, out);
  out.close();
  if (!out) throw InvalidArgument("cannot write '" + path + "'");
}

// The plotting script: --plot-script, else $ZEN_PLOT_SCRIPT, else the one
// shipped with this executable (<prefix>/share/zen/plots when installed, the
// source tree in a build tree; tools/zen/data_files.h).
std::string FindPlotScript(const Flags& flags, const Environment& env) {
  if (auto p = flags.Get("plot-script")) return *p;
  if (auto p = env.Get("ZEN_PLOT_SCRIPT")) return *p;
  const std::string installed = "plots/plot_analysis.py", source = "tools/plots/plot_analysis.py";
  std::string found = FindDataFile(installed, source);
  if (found.empty()) {
    throw InvalidArgument("cannot find plot_analysis.py (looked at " +
                          DataFileCandidates(installed, source) + "); pass --plot-script PATH");
  }
  return found;
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

int Plot(const Flags& flags, const Environment& env, const std::string& json_path,
         const std::string& dir) {
  const std::string python = env.Get("ZEN_PYTHON").value_or("/usr/bin/python3");
  const std::string cmd = ShellQuote(python) + " " + ShellQuote(FindPlotScript(flags, env)) + " " +
                          ShellQuote(json_path) + " " + ShellQuote(dir);
  std::fflush(stdout);
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    std::fprintf(stderr, "zen analyze: plotting failed (%s exited with %d)\n", cmd.c_str(),
                 WIFEXITED(rc) ? WEXITSTATUS(rc) : rc);
    return 1;
  }
  return 0;
}


// ---- The verdict: what `auto` picks and what it saves, per tensor and for
// one step of the model, at the trace's world size and at --world.

struct Judged {
  std::string chosen;
  double chosen_s = 0, allreduce_s = 0;
};

// Why a scheme wins, in the measured properties that decide it.
std::string Reason(const std::string& scheme, const TensorAnalysis& t, double gamma_n, int n) {
  char buf[256];
  const double d = 100 * t.mean_density;
  if (scheme == "dense") {
    std::snprintf(buf, sizeof buf,
                  "density %.2f%%, union %.0f%% at n = %d: the sum is nearly dense", d,
                  std::min(100.0, d * gamma_n), n);
  } else if (scheme == "zen") {
    if (t.mean_skewness >= 1.5) {
      std::snprintf(buf, sizeof buf,
                    "density %.2f%% and skew %.2f: ZEN's hash partition keeps every server's "
                    "share even where ranges pile up",
                    d, t.mean_skewness);
    } else {
      std::snprintf(buf, sizeof buf,
                    "density %.2f%% and overlap %.2f: each rank moves about (1 + gamma(n)/n) of "
                    "its rows",
                    d, t.overlap.mean);
    }
  } else if (scheme == "agsparse" || scheme == "sparcml") {
    std::snprintf(buf, sizeof buf,
                  "density %.2f%% and overlap %.2f: few rows, so gathering every rank's rows "
                  "costs least",
                  d, t.overlap.mean);
  } else {
    std::snprintf(buf, sizeof buf, "density %.2f%% and skew %.2f: even ranges balance", d,
                  t.mean_skewness);
  }
  return buf;
}

void PrintVerdict(TraceReader& reader, const TraceAnalysis& analysis, const Flags& flags) {
  const std::vector<std::string> names = SelectTraceTensors(reader.tensors(), "");
  std::vector<int> worlds = {reader.world_size()};
  if (flags.Has("world")) {
    const int64_t w = flags.Int("world", 0);
    if (w < 2 || w > (1 << 20)) throw UsageError("--world must be in [2, 2^20]");
    if (w != reader.world_size()) worlds.push_back(static_cast<int>(w));
  }
  Network net;
  const std::string rate = flags.Str("bandwidth", "25gbit");
  net.bandwidth_bytes_per_s = ParseRateBits(rate) / 8;
  net.latency_s = flags.Double("latency-us", 5) * 1e-6;
  if (reader.world_size() < 2) return;  // one rank synchronizes nothing
  std::map<std::string, const TensorAnalysis*> by_name;
  for (const TensorAnalysis& t : analysis.tensors) by_name[t.name] = &t;
  const SchemeRegistry registry = BuiltinSchemes();

  const StepName step = ParseStepName(names[0]);
  std::printf("\nverdict for %s%zu tensor%s, each synchronized on its own; %s per link, %.0f us "
              "per round\n",
              step.step >= 0 ? ("step " + std::to_string(step.step) + " of the model: ").c_str()
                             : "the model: ",
              names.size(), names.size() == 1 ? "" : "s", rate.c_str(), net.latency_s * 1e6);
  std::printf("%-28s %8s %8s %6s", "tensor", "density", "overlap", "skew");
  for (int w : worlds) {
    const std::string label = "n=" + std::to_string(w) + ": auto picks";
    std::printf(" | %-18s %8s %11s %6s", label.c_str(), "ms", "dense AR ms", "saves");
  }
  std::printf("\n");
  std::vector<Judged> total(worlds.size());
  std::vector<std::map<std::string, int>> picks(worlds.size());
  std::vector<std::string> reasons;
  for (const std::string& name : names) {
    const TensorAnalysis& t = *by_name.at(name);
    const Extrapolation x = FitExtrapolation(reader.ReadTensor(name));
    std::printf("%-28s %7.3f%% %8.2f %6.2f", ParseStepName(name).base.c_str(),
                100 * t.mean_density, t.overlap.mean, t.mean_skewness);
    for (size_t i = 0; i < worlds.size(); ++i) {
      const WorkloadProfile p = x.At(worlds[i]);
      const Selection sel = registry.Select(p, net);
      Judged j;
      j.chosen = sel.chosen;
      for (const Prediction& q : sel.predictions) {
        if (q.scheme == sel.chosen) j.chosen_s = q.time_s;
      }
      j.allreduce_s = PredictDenseAllReduce(p, net).time_s;
      std::printf(" | %-18s %8.3f %11.3f %5.1fx", j.chosen.c_str(), 1e3 * j.chosen_s,
                  1e3 * j.allreduce_s, j.chosen_s > 0 ? j.allreduce_s / j.chosen_s : 0.0);
      total[i].chosen_s += j.chosen_s;
      total[i].allreduce_s += j.allreduce_s;
      ++picks[i][j.chosen];
      if (i == 0) {
        reasons.push_back(ParseStepName(name).base + " -> " + j.chosen + ": " +
                          Reason(j.chosen, t, p.sparsity.gamma.back(), worlds[i]));
      }
    }
    std::printf("\n");
  }
  std::printf("%-28s %8s %8s %6s", "whole model", "", "", "");
  for (const Judged& j : total) {
    std::printf(" | %-18s %8.3f %11.3f %5.1fx", "", 1e3 * j.chosen_s, 1e3 * j.allreduce_s,
                j.chosen_s > 0 ? j.allreduce_s / j.chosen_s : 0.0);
  }
  std::printf("\n\n");
  for (size_t i = 0; i < worlds.size(); ++i) {
    const Judged& j = total[i];
    std::string use;
    if (picks[i].size() == 1) {
      use = picks[i].begin()->first;
    } else {
      use = "auto, which picks per tensor";
      for (const auto& [scheme, count] : picks[i])
        use += (use.back() == 'r' ? ": " : ", ") + scheme + " for " + std::to_string(count);
    }
    const double speedup = j.chosen_s > 0 ? j.allreduce_s / j.chosen_s : 0;
    if (speedup >= 1.1) {
      std::printf("Verdict at %d ranks: use %s. One step synchronizes in %.3f ms, predicted, "
                  "against %.3f ms for a dense AllReduce: %.1fx faster.\n",
                  worlds[i], use.c_str(), 1e3 * j.chosen_s, 1e3 * j.allreduce_s, speedup);
    } else {
      std::printf("Verdict at %d ranks: keep the dense AllReduce. The best zen can do (%s) is "
                  "predicted at %.3f ms against %.3f ms: no worthwhile saving.\n",
                  worlds[i], use.c_str(), 1e3 * j.chosen_s, 1e3 * j.allreduce_s);
    }
  }
  std::printf("Decided by (at %d ranks):\n", worlds[0]);
  for (const std::string& r : reasons) std::printf("  %s\n", r.c_str());
  std::printf("Every scheme, larger worlds: zen simulate %s --world 16,64,256,1024 --bandwidth "
              "%s\n",
              reader.path().c_str(), rate.c_str());
}

}  // namespace

int RunAnalyze(Args args, const Environment& env) {
  Flags flags(args,
              {"json", "plot", "hash-seed", "bins", "plot-script", "world", "bandwidth",
               "latency-us"},
              {"verdict"}, /*max_positional=*/1);
  if (flags.help()) {
    std::printf("%s", kUsage);
    return 0;
  }
  if (flags.positional().size() != 1) throw UsageError("needs one TRACE argument (see --help)");
  AnalyzerOptions options;
  options.hash_seed = static_cast<uint64_t>(flags.Int("hash-seed", 0x5EED));
  options.overlap_bins = static_cast<int>(flags.Int("bins", 20));
  if (options.overlap_bins < 1 || options.overlap_bins > 1000) {
    throw UsageError("--bins must be in [1, 1000]");
  }
  TraceReader reader(flags.positional()[0]);
  const TraceAnalysis analysis = AnalyzeTrace(reader, options);
  // Written as it is formed (the report of 10^5 tensors is tens of MB).
  if (!flags.Has("verdict")) WriteAnalysisText(analysis, std::cout);
  std::cout.flush();
  PrintVerdict(reader, analysis, flags);
  std::fflush(stdout);
  std::string json_path = flags.Str("json", "");
  if (!json_path.empty()) WriteJson(json_path, analysis);
  if (auto dir = flags.Get("plot")) {
    fs::create_directories(*dir);
    if (json_path.empty()) {
      json_path = (fs::path(*dir) / "analysis.json").string();
      WriteJson(json_path, analysis);
    }
    return Plot(flags, env, json_path, *dir);
  }
  return 0;
}

}  // namespace zen::cli
