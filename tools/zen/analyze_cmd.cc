// `zen analyze TRACE [--json OUT] [--plot DIR]`: the sparsity analyzer
// (zen/analysis/trace_analyzer.h) on a zen-trace/1 file: a text report per
// tensor, optionally the JSON figures and PNG plots
// (tools/plots/plot_analysis.py, run with /usr/bin/python3).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "tools/zen/commands.h"
#include "tools/zen/data_files.h"
#include "tools/zen/flags.h"
#include "zen/analysis/trace_analyzer.h"
#include "zen/core/error.h"

namespace zen::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kUsage =
    "usage: zen analyze TRACE [--json OUT] [--plot DIR] [--hash-seed S] [--bins B]\n"
    "  Characterizes a zen-trace/1 gradient trace, per tensor: per-rank and union\n"
    "  density, densification gamma(k), pairwise overlap, skew over 8 and n even\n"
    "  ranges, and the push/pull imbalance of range vs ZEN hash partitioning.\n"
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

}  // namespace

int RunAnalyze(Args args, const Environment& env) {
  Flags flags(args, {"json", "plot", "hash-seed", "bins", "plot-script"}, {}, /*max_positional=*/1);
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
  WriteAnalysisText(analysis, std::cout);
  std::cout.flush();
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
