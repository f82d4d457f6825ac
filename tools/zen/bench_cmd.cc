// `zen bench`: run schemes on N real worker processes and print a table.
//
// Without --rank, the command is the launcher: it makes a FileStore in a
// temporary directory, starts N copies of itself with --rank 0..N-1 (rank 0
// prints the report), and fails as soon as any worker fails, killing the
// rest. With --rank R --world N --rendezvous URL it is one worker of a job
// that may span machines.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>

#include "tools/zen/bench.h"
#include "tools/zen/launcher.h"
#include "tools/zen/registry_view.h"
#include "tools/zen/testbed.h"
#include "zen/comm/gloo_communicator.h"
#include "zen/core/error.h"
#include "zen/workload/trace.h"

namespace zen::cli {
namespace {

// Exit status when every process ran but a result is wrong (an error row,
// rows mismatched or a relative error above kMaxRelError).
constexpr int kExitInexact = 3;

constexpr const char* kHelp = R"(usage: zen bench [--world N] [--trace FILE [--tensor NAME] | --synthetic SPEC]
                 [--schemes LIST|all] [--iters K] [--warmup W] [--json OUT] [--quiet]
                 [--testbed NxRATE] [--peers LIST|all]
                 [--rank R --rendezvous URL [--hostname ADDR]] [--timeout-s S]

Runs every scheme on N real worker processes (default 8) over Gloo TCP and
prints, per scheme: median/min time (slowest rank per iteration), bytes
sent/received per rank (max and mean, from the communicator's counters),
received bytes over the must-receive lower bound, the max relative error vs
the dense reference, and rows mismatched.

  --trace FILE       a zen-trace/1 file (default: the shipped GCIDE trace)
  --tensor NAME      tensor of the trace (default: its first)
  --synthetic SPEC   zipf:rows=R,width=W,density=D,skew=S[,seed=X]
  --schemes LIST     comma-separated scheme ids, or all (default)
  --iters K          measured iterations (default 5); --warmup W (default 1)
  --json OUT         also write the report as JSON (docs/benchmark.md)
  --quiet            no progress display (also off when stderr is no terminal)
  --testbed NxRATE   run on N network namespaces (root, iproute2) whose links
                     are shaped to RATE both ways, e.g. 8x500mbit: adds bytes
                     on the wire per rank and the time bound (docs/performance.md)
  --peers LIST       also run other libraries on the same hosts: torch-gloo-sparse,
                     torch-gloo-dense, or all (PyTorch dist.all_reduce, Gloo)
  --rank R           run one worker of a multi-machine job (with --world,
  --rendezvous URL   file:DIR or redis://HOST:PORT; --hostname: address to bind)
  --timeout-s S      per-operation transport timeout (default 60)
)";

const std::set<std::string> kValues = {"world", "trace", "tensor", "synthetic", "schemes",
                                       "iters", "warmup", "json", "rank", "rendezvous",
                                       "hostname", "timeout-s", "threads", "prefix",
                                       "testbed", "peers", "report-file", "wire-iface"};
const std::set<std::string> kSwitches = {"quiet", "progress"};

BenchConfig Config(const Flags& flags) {
  BenchConfig c;
  const std::string list = flags.Str("schemes", "all");
  const SchemeRegistry registry = CliSchemes();
  c.schemes = list == "all" ? registry.ids() : SplitList(list);
  for (const auto& s : c.schemes) {
    if (!registry.Find(s)) registry.Create(s);  // throws naming the known ids
  }
  c.iters = static_cast<int>(flags.Int("iters", 5));
  c.warmup = static_cast<int>(flags.Int("warmup", 1));
  if (c.iters < 1 || c.warmup < 0) throw InvalidArgument("--iters must be >= 1, --warmup >= 0");
  c.progress = flags.Has("progress");
  c.threads = static_cast<int>(flags.Int("threads", 0));
  c.wire_iface = flags.Str("wire-iface", "");
  return c;
}

void WriteJson(const Flags& flags, const nlohmann::json& report) {
  if (auto out = flags.Get("json")) {
    std::ofstream f(*out);
    f << report.dump(2) << "\n";
    if (!f) throw InvalidArgument("cannot write --json " + *out);
  }
}

// Exit status of a finished run: 0 when every result is exact, else 3
// (after naming each failure on stderr when `say`).
int Verdict(const nlohmann::json& report, bool say) {
  const std::vector<std::string> failures = ReportFailures(report);
  if (say) {
    for (const std::string& f : failures) std::fprintf(stderr, "zen bench: FAILED %s\n", f.c_str());
  }
  return failures.empty() ? 0 : kExitInexact;
}

int RunOneWorker(const Flags& flags, const Environment& env) {
  const int world = static_cast<int>(flags.Int("world", 8));
  const int rank = static_cast<int>(flags.Int("rank", 0));
  if (rank < 0 || rank >= world) {
    throw InvalidArgument("--rank " + std::to_string(rank) + " is outside [0, " +
                          std::to_string(world) + ")");
  }
  const BenchConfig config = Config(flags);
  const Workload workload = LoadWorkload(flags, world, env);
  GlooOptions options;
  options.rendezvous = flags.Str("rendezvous", "");
  if (options.rendezvous.empty()) throw InvalidArgument("--rank needs --rendezvous URL");
  options.hostname = flags.Str("hostname", "127.0.0.1");
  options.prefix = flags.Str("prefix", "zen-bench");
  options.timeout = std::chrono::milliseconds(flags.Int("timeout-s", 60) * 1000);
  auto comm = ConnectGloo(rank, world, options);
  const nlohmann::json report = RunWorker(*comm, workload, config);
  if (rank == 0) {
    if (auto file = flags.Get("report-file")) {  // the local launcher prints and judges
      std::ofstream f(*file);
      f << report.dump() << "\n";
      if (!f) throw InvalidArgument("cannot write --report-file " + *file);
      return 0;
    }
    PrintReport(report);
    std::fflush(stdout);
    WriteJson(flags, report);
  }
  if (flags.Has("report-file")) return 0;
  // Every rank holds the gathered report: each exits non-zero on a failure.
  return Verdict(report, rank == 0);
}

}  // namespace

int RunBench(Args args, const Environment& env) {
  Flags flags(args, kValues, kSwitches);
  if (flags.help()) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  if (flags.Has("rank")) return RunOneWorker(flags, env);
  LauncherSignals signals;  // SIGINT/SIGTERM/SIGHUP stop the workers, then unwind
  std::optional<TestbedSpec> link;
  if (auto spec = flags.Get("testbed")) link = ParseTestbedSpec(*spec);
  const int world = static_cast<int>(flags.Int("world", link ? link->hosts : 8));
  if (world < 1) throw InvalidArgument("--world must be >= 1");
  if (link && world != link->hosts) {
    throw InvalidArgument("--world " + std::to_string(world) + " differs from the " +
                          std::to_string(link->hosts) + " testbed hosts");
  }
  const BenchConfig config = Config(flags);  // fail fast on bad options, before spawning
  const std::vector<std::string> peers = ParsePeers(flags.Str("peers", ""));
  const Workload workload = LoadWorkload(flags, world, env);  // and on a bad workload
  const bool progress = !flags.Has("quiet") && isatty(STDERR_FILENO);
  LauncherSignals::ThrowIfInterrupted();

  std::unique_ptr<Testbed> bed;  // torn down on every way out
  if (link) bed = std::make_unique<Testbed>(*link);
  const LaunchPlan plan = bed ? bed->Plan() : LaunchPlan{};
  TempDir scratch;
  std::vector<std::string> worker_args(args.begin(), args.end());
  worker_args.insert(worker_args.end(), {"--world", std::to_string(world), "--report-file",
                                         scratch.path() + "/report.json"});
  if (bed) worker_args.insert(worker_args.end(), {"--wire-iface", kTestbedInterface});
  if (const int rc = LaunchLocalWorkers(worker_args, world, progress, plan); rc != 0) return 1;
  std::ifstream in(scratch.path() + "/report.json");
  if (!in) throw InvalidArgument("worker rank 0 wrote no report");
  nlohmann::json report = nlohmann::json::parse(in);

  if (!peers.empty()) {
    PeerRun run;
    run.peers = peers;
    run.world = world;
    run.iters = config.iters;
    run.warmup = config.warmup;
    run.timeout_s = static_cast<double>(flags.Int("timeout-s", 60));
    run.dir = scratch.path();
    run.trace_path = scratch.path() + "/workload.safetensors";
    run.tensor = "workload";
    run.iface = bed ? kTestbedInterface : "";
    run.plan = plan;
    Trace trace;
    trace.world_size = world;
    trace.metadata["generator"] = "zen bench (workload handed to the peers)";
    trace.Add(run.tensor, workload.per_rank);
    WriteTrace(run.trace_path, trace);
    for (nlohmann::json& row : RunPeers(run)) report["results"].push_back(std::move(row));
  }
  LauncherSignals::ThrowIfInterrupted();
  AnnotateReport(report, link ? &*link : nullptr, UsableCores());
  PrintReport(report);
  std::fflush(stdout);
  for (const std::string& w : CpuWarnings(report)) std::fprintf(stderr, "%s\n", w.c_str());
  WriteJson(flags, report);
  return Verdict(report, /*say=*/true);
}

}  // namespace zen::cli
