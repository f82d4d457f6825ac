// `zen analyze TRACE [--json OUT] [--plot DIR]`: the sparsity analyzer
// (zen/analysis/trace_analyzer.h) on a zen-trace/1 file: a text report per
// tensor, optionally the JSON figures and PNG plots
// (tools/plots/plot_analysis.py, run with /usr/bin/python3).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tools/zen/commands.h"
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
    "                 via tools/plots/plot_analysis.py; $ZEN_PLOT_SCRIPT or\n"
    "                 --plot-script PATH override where it is, $ZEN_PYTHON the\n"
    "                 interpreter (default /usr/bin/python3)\n"
    "  --hash-seed S  seed of the hash partition (default 24301)\n"
    "  --bins B       overlap histogram bins (default 20)\n";

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw InvalidArgument("zen analyze: cannot write '" + path + "'");
}

// The plotting script: flag, environment, then next to the source tree or
// install prefix of this executable, then the working directory.
std::string FindPlotScript(const Flags& flags) {
  if (auto p = flags.Get("plot-script")) return *p;
  if (const char* env = std::getenv("ZEN_PLOT_SCRIPT"); env && *env) return env;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  std::vector<fs::path> candidates;
  if (!ec) {
    candidates.push_back(exe.parent_path() / "../../tools/plots/plot_analysis.py");
    candidates.push_back(exe.parent_path() / "../share/zen/plot_analysis.py");
  }
  candidates.push_back("tools/plots/plot_analysis.py");
  for (const fs::path& c : candidates) {
    if (fs::exists(c, ec)) return fs::weakly_canonical(c, ec).string();
  }
  throw InvalidArgument(
      "zen analyze --plot: cannot find tools/plots/plot_analysis.py; pass --plot-script PATH");
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

int Plot(const Flags& flags, const std::string& json_path, const std::string& dir) {
  const char* py = std::getenv("ZEN_PYTHON");
  const std::string python = py && *py ? py : "/usr/bin/python3";
  const std::string cmd = ShellQuote(python) + " " + ShellQuote(FindPlotScript(flags)) + " " +
                          ShellQuote(json_path) + " " + ShellQuote(dir);
  std::fflush(stdout);
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    std::fprintf(stderr, "zen analyze: plotting failed (%s exited with %d)\n", cmd.c_str(), rc);
    return 1;
  }
  return 0;
}

}  // namespace

int RunAnalyze(Args args) {
  Flags flags(args, {"json", "plot", "hash-seed", "bins", "plot-script"}, {"help"});
  if (flags.Has("help")) {
    std::printf("%s", kUsage);
    return 0;
  }
  if (flags.positional().size() != 1) {
    std::fprintf(stderr, "%s", kUsage);
    return 2;
  }
  AnalyzerOptions options;
  options.hash_seed = static_cast<uint64_t>(flags.Int("hash-seed", 0x5EED));
  options.overlap_bins = static_cast<int>(flags.Int("bins", 20));
  if (options.overlap_bins < 1 || options.overlap_bins > 1000) {
    throw InvalidArgument("zen analyze: --bins must be in [1, 1000]");
  }
  TraceReader reader(flags.positional()[0]);
  const TraceAnalysis analysis = AnalyzeTrace(reader, options);
  std::printf("%s", FormatAnalysisText(analysis).c_str());
  const std::string json = AnalysisToJson(analysis);
  std::string json_path = flags.Str("json", "");
  if (!json_path.empty()) WriteText(json_path, json);
  if (auto dir = flags.Get("plot")) {
    fs::create_directories(*dir);
    if (json_path.empty()) {
      json_path = (fs::path(*dir) / "analysis.json").string();
      WriteText(json_path, json);
    }
    return Plot(flags, json_path, *dir);
  }
  return 0;
}

}  // namespace zen::cli
