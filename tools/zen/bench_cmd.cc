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
#include "tools/zen/bench_sweep.h"
#include "tools/zen/launcher.h"
#include "tools/zen/registry_view.h"
#include "tools/zen/testbed.h"
#include "zen/comm/launch_env.h"
#include "zen/comm/transport.h"
#include "zen/core/error.h"
#include "zen/workload/synthetic.h"
#include "zen/workload/trace.h"
#include "zen/version.h"

namespace zen::cli {
namespace {

// Exit status when every process ran but a result is wrong (an error row,
// rows mismatched or a relative error above kMaxRelError).
constexpr int kExitInexact = 3;

constexpr const char* kHelp = R"(usage: zen bench [--world N] [--trace FILE [--tensor NAME] | --synthetic SPEC]
                 [--schemes LIST|all] [--iters K] [--warmup W] [--output sparse|dense]
                 [--json OUT] [--quiet] [--no-agreement]
                 [--sweep rows|density [--sweep-range FROM:TO:F]]
                 [--transport gloo|mpi] [--testbed NxRATE] [--peers LIST|all]
                 [--rank R --rendezvous URL [--hostname ADDR]] [--timeout-s S]

Runs every scheme on N real worker processes (default 8) over Gloo TCP (or
MPI) and prints, per scheme: median/min time (slowest rank per iteration),
bytes sent/received per rank (max and mean, from the communicator's
counters), received bytes over the must-receive lower bound, the max
relative error vs the reference sum, and rows mismatched. Exits 0 when every
result is exact, 3 when one is not (or a scheme raised), 1 when a process
failed, 2 on a wrong command line (docs/benchmark.md).

  --trace FILE       a zen-trace/1 file (default: the shipped GCIDE trace)
  --tensor NAME      tensor of the trace, as `zen analyze` names it: step0.name
                     or name (its first step); default: the trace's first
  --synthetic SPEC   zipf:rows=R,width=W,density=D,skew=S[,seed=X]
  --schemes LIST     comma-separated scheme ids, or all (default)
  --iters K          measured iterations (default 5); --warmup W (default 1)
  --output FORM      sparse (default): each scheme returns the sorted sum
                     (Scheme::Sync); dense: it writes the sum into a dense
                     buffer, zeros elsewhere (Scheme::SyncInto, the top-k
                     hook's contract; the buffer is allocated once)
  --json OUT         also write the report as JSON (docs/benchmark.md)
  --no-agreement     the schemes skip their metadata round before each call
                     (SchemeOptions::check_agreement): the collective alone,
                     what a tensor costs in a batch of the engine, whose one
                     round agrees on the whole batch; not the peers
  --quiet            no progress: without it, the size point and scheme
                     running go to stderr (one line each when stderr is not
                     a terminal, e.g. a CI log), and a sweep prints each
                     result row as it completes
  -n K, -w W         nccl-tests' names of --iters K and --warmup W
  -b MIN -e MAX -f F nccl-tests' sweep of the dense size in bytes (K, M, G
                     suffixes): --sweep rows from MIN / (4 x width) to
                     MAX / (4 x width) rows, times F each step
  --sweep KIND       a size sweep like nccl-tests: rows (4096 to 4194304, x4)
                     or density (1e-4 to 0.3, x4) of the --synthetic spec, with
                     algbw/busbw columns next to recv/LB
  --sweep-range R    FROM:TO:FACTOR of the sweep
  --transport T      gloo (default) or mpi (when built with MPI; the launcher
                     then starts the workers with mpirun -np N --oversubscribe)
  --testbed NxRATE   run on N network namespaces (root, iproute2) whose links
                     are shaped to RATE both ways, e.g. 8x500mbit: adds bytes
                     on the wire per rank and the time bound (docs/performance.md)
  --peers LIST       also run other libraries on the same hosts: torch-gloo-sparse,
                     torch-gloo-dense (PyTorch dist.all_reduce, Gloo), zen-process-group
                     (zen over torch's collectives, what runs on NCCL), or all
  --rank R           run one worker of a multi-machine job (with --world,
  --rendezvous URL   file:DIR or redis://HOST:PORT; --hostname: address to bind)
  --rendezvous env://  one worker started by torchrun (RANK, WORLD_SIZE,
                     MASTER_ADDR, MASTER_PORT) or mpirun (OMPI_COMM_WORLD_RANK,
                     OMPI_COMM_WORLD_SIZE; also automatic under either);
                     $ZEN_RENDEZVOUS overrides the store (e.g. file:DIR)
  --timeout-s S      per-operation transport timeout (default 60)
)";

const std::set<std::string> kValues = {"world", "trace", "tensor", "synthetic", "schemes",
                                       "iters", "warmup", "json", "rank", "rendezvous",
                                       "hostname", "timeout-s", "threads", "prefix",
                                       "testbed", "peers", "report-file", "wire-iface",
                                       "transport", "sweep", "sweep-range", "output"};
const std::set<std::string> kSwitches = {"quiet", "progress", "no-agreement"};

// The JSON report's layout version (docs/benchmark.md); raised when a field
// changes meaning or goes away.
constexpr int kJsonSchemaVersion = 2;

// nccl-tests' size in bytes: a number with an optional K, M or G (powers of
// 1024), as its -b/-e take it.
double NcclBytes(const std::string& flag, const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  double scale = 1;
  if (used > 0 && used + 1 == text.size()) {
    const char c = static_cast<char>(std::toupper(static_cast<unsigned char>(text.back())));
    scale = c == 'K' ? 1024.0 : c == 'M' ? 1048576.0 : c == 'G' ? 1073741824.0 : 0;
    if (scale > 0) ++used;
  }
  if (used == 0 || used != text.size() || !(v > 0)) {
    throw UsageError(flag + " " + text + ": expected a size in bytes (e.g. 8, 64K, 128M)");
  }
  return v * scale;
}

// nccl-tests' short options as zen's: -n K -> --iters K, -w W -> --warmup
// W, -b/-e/-f (bytes of the dense tensor) -> --sweep rows --sweep-range in
// rows of the --synthetic spec's width. Other arguments pass unchanged.
std::vector<std::string> ExpandNcclAliases(Args args) {
  std::vector<std::string> out;
  std::optional<std::string> b, e, f;
  bool after_dashes = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string a(args[i]);
    const bool alias = !after_dashes && (a == "-n" || a == "-w" || a == "-b" || a == "-e" || a == "-f");
    if (a == "--") after_dashes = true;
    if (!alias) {
      out.push_back(a);
      continue;
    }
    if (i + 1 >= args.size()) throw UsageError(a + " needs a value");
    const std::string v(args[++i]);
    if (a == "-n") out.insert(out.end(), {"--iters", v});
    if (a == "-w") out.insert(out.end(), {"--warmup", v});
    if (a == "-b") b = v;
    if (a == "-e") e = v;
    if (a == "-f") f = v;
  }
  if (!b && !e && !f) return out;
  Flags plain(out, kValues, kSwitches);
  if (plain.Has("sweep-range")) throw UsageError("give -b/-e/-f or --sweep-range, not both");
  if (plain.Str("sweep", "rows") != "rows") {
    throw UsageError("-b/-e/-f sweep the size (--sweep rows), not --sweep " + plain.Str("sweep", ""));
  }
  const SyntheticSpec base =
      ParseSyntheticSpec(plain.Str("synthetic", "zipf:width=64,density=0.01,skew=1.1"));
  const double row_bytes = 4.0 * static_cast<double>(base.width);
  const double lo = NcclBytes("-b", b.value_or("8M")), hi = NcclBytes("-e", e.value_or(b ? *b : "8M"));
  double factor = 2;
  if (f) {
    try {
      factor = std::stod(*f);
    } catch (const std::exception&) {
      factor = 0;
    }
  }
  if (!(factor > 1)) throw UsageError("-f " + f.value_or("") + ": the step factor must be > 1");
  const double from = std::max(1.0, std::round(lo / row_bytes)), to = std::max(from, std::round(hi / row_bytes));
  char range[96];
  std::snprintf(range, sizeof range, "%.0f:%.0f:%g", from, to, factor);
  if (!plain.Has("sweep")) out.insert(out.end(), {"--sweep", "rows"});
  out.insert(out.end(), {"--sweep-range", range});
  return out;
}

BenchConfig Config(const Flags& flags, const Environment& env) {
  BenchConfig c;
  c.env = env;
  const std::string list = flags.Str("schemes", "all");
  const SchemeRegistry registry = CliSchemes(env);
  c.schemes = list == "all" ? registry.ids() : SplitList(list);
  if (c.schemes.empty()) {
    throw UsageError("--schemes '" + list + "' names no scheme (give ids separated by commas, or all)");
  }
  for (const auto& s : c.schemes) {
    if (registry.Find(s)) continue;
    try {
      registry.Create(s);  // throws naming the known ids
    } catch (const InvalidArgument& e) {
      throw UsageError(std::string("--schemes: ") + e.what());
    }
  }
  c.iters = static_cast<int>(flags.Int("iters", 5));
  c.warmup = static_cast<int>(flags.Int("warmup", 1));
  if (c.iters < 1 || c.warmup < 0) throw InvalidArgument("--iters must be >= 1, --warmup >= 0");
  c.progress = flags.Has("progress");
  c.threads = static_cast<int>(flags.Int("threads", 0));
  c.wire_iface = flags.Str("wire-iface", "");
  const std::string output = flags.Str("output", "sparse");
  if (output != "sparse" && output != "dense") {
    throw UsageError("--output " + output + ": expected sparse or dense");
  }
  c.output_dense = output == "dense";
  c.check_agreement = !flags.Has("no-agreement");
  return c;
}

void WriteJson(const Flags& flags, const nlohmann::json& report) {
  if (auto out = flags.Get("json")) {
    nlohmann::json versioned = report;
    versioned["zen_version"] = kVersion;
    versioned["schema_version"] = kJsonSchemaVersion;
    std::ofstream f(*out);
    f << versioned.dump(2) << "\n";
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

// The --transport entry of the transport table (zen/comm/transport.h); an
// unknown name is a UsageError listing the ones this build has.
TransportInfo Transport(const Flags& flags) {
  const std::string id = flags.Str("transport", "gloo");
  const TransportRegistry transports = BuiltinTransports();
  if (const TransportInfo* t = transports.Find(id)) return *t;
  std::string known;
  for (const std::string& k : transports.ids()) known += (known.empty() ? "" : ", ") + k;
  throw UsageError("--transport " + id + ": unknown transport (this build has: " + known +
                   "; one that needs an optional library, as MPI does, exists only in builds with it)");
}

// Whether this process was started by an external launcher that set its
// rank: mpirun (Open MPI, MPICH/Hydra) or torchrun (TORCHELASTIC_RUN_ID
// besides RANK / WORLD_SIZE).
bool StartedByLauncher(const Environment& env) {
  return env.Get("OMPI_COMM_WORLD_SIZE") || env.Get("PMI_SIZE") ||
         (env.Get("RANK") && env.Get("WORLD_SIZE") && env.Get("TORCHELASTIC_RUN_ID"));
}

// The workloads of this run: one, or one per --sweep size.
std::vector<Workload> Workloads(const Flags& flags, int world, const Environment& env) {
  std::vector<Workload> out;
  const std::vector<SyntheticSpec> points = SweepPoints(flags);
  for (const SyntheticSpec& s : points) out.push_back({"synthetic " + ToString(s), GenerateSynthetic(s, world)});
  if (points.empty()) out.push_back(LoadWorkload(flags, world, env));
  return out;
}

// Whether a sweep's rows are printed by worker rank 0 as they complete
// (not with --quiet: then the table comes whole at the end).
bool StreamsRows(const Flags& flags) { return flags.Has("sweep") && !flags.Has("quiet"); }

// Runs every workload (one, or the sweep's) and returns the report: a
// single run's, or {"sweep": KIND, "points": [one report per size]}.
nlohmann::json RunAll(Communicator& comm, const Flags& flags, const std::vector<Workload>& workloads,
                      const BenchConfig& config) {
  if (!flags.Has("sweep")) return RunWorker(comm, workloads.at(0), config);
  nlohmann::json points = nlohmann::json::array();
  const std::vector<SyntheticSpec> specs = SweepPoints(flags);
  bool header_printed = false;
  for (size_t i = 0; i < workloads.size(); ++i) {
    BenchConfig point = config;
    char label[160];
    std::snprintf(label, sizeof label, "size point %zu of %zu (rows %lld, density %.2e)", i + 1,
                  workloads.size(), static_cast<long long>(specs[i].rows), specs[i].density);
    point.point = label;
    // Rows stream as they complete (a sweep takes minutes): the sweep's
    // header before the first row, then each (size, scheme) row; the
    // printer of the whole report then skips them (StreamsRows).
    if (StreamsRows(flags) && comm.rank() == 0) {
      point.on_row = [&](const nlohmann::json& row, const nlohmann::json& tensor) {
        nlohmann::json p = {{"tensor", tensor},        {"world_size", comm.size()},
                            {"iters", config.iters},   {"warmup", config.warmup},
                            {"results", nlohmann::json::array({row})}};
        AddBandwidths(p);
        PrintSweep({{"sweep", flags.Str("sweep", "")}, {"points", nlohmann::json::array({p})}},
                   /*header=*/!header_printed);
        header_printed = true;
        std::fflush(stdout);
      };
    }
    nlohmann::json report = RunWorker(comm, workloads[i], point);
    AddBandwidths(report);
    points.push_back(std::move(report));
  }
  return {{"sweep", flags.Str("sweep", "")}, {"points", points}};
}

void Print(const Flags& flags, const nlohmann::json& report) {
  if (report.contains("sweep")) {
    if (!StreamsRows(flags)) PrintSweep(report);
  } else {
    PrintReport(report);
  }
}

// One worker: --rank R --rendezvous URL, or started by torchrun / mpirun
// (`launch`), over Gloo or MPI.
int RunOneWorker(const Flags& flags, const Environment& env, const std::optional<LaunchInfo>& launch) {
  const TransportInfo transport = Transport(flags);
  const BenchConfig config = Config(flags, env);
  std::unique_ptr<Communicator> comm;
  std::vector<Workload> workloads;
  ConnectOptions options;
  options.timeout = std::chrono::milliseconds(flags.Int("timeout-s", 60) * 1000);
  options.secret = env.Get("ZEN_STORE_SECRET").value_or("");
  if (!flags.Has("quiet")) {
    options.progress.notice = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  }
  if (transport.ranks_from_launcher) {
    comm = transport.factory(-1, -1, options);
    if (flags.Has("world") && flags.Int("world", 0) != comm->size()) {
      throw UsageError("--world " + flags.Str("world", "") + " differs from MPI's world size " +
                       std::to_string(comm->size()));
    }
    workloads = Workloads(flags, comm->size(), env);
  } else {
    int world = static_cast<int>(flags.Int("world", 8));
    int rank = static_cast<int>(flags.Int("rank", 0));
    options.rendezvous = flags.Str("rendezvous", "");
    options.prefix = flags.Str("prefix", "zen-bench");
    if (launch) {
      if (flags.Has("rank")) throw UsageError("--rank is set by " + launch->launcher + "; drop it");
      if (flags.Has("world") && world != launch->size) {
        throw UsageError("--world " + std::to_string(world) + " differs from " + launch->launcher +
                         "'s world size " + std::to_string(launch->size));
      }
      world = launch->size;
      rank = launch->rank;
      options.rendezvous = launch->rendezvous;
      if (options.rendezvous == "mpi://") {
        throw UsageError("Gloo under mpirun needs a store: set ZEN_RENDEZVOUS=file:DIR (a shared "
                         "directory) or redis://HOST:PORT, or use --transport mpi");
      }
      options.job = launch->job;
      options.secret = launch->secret;
    }
    if (world < 1) throw UsageError("--world must be >= 1");
    if (rank < 0 || rank >= world) {
      throw UsageError("--rank " + std::to_string(rank) + " is outside [0, " + std::to_string(world) + ")");
    }
    if (options.rendezvous.empty()) throw UsageError("--rank needs --rendezvous URL");
    workloads = Workloads(flags, world, env);  // fail on a bad workload before connecting
    options.hostname = flags.Str("hostname", env.Get("ZEN_HOSTNAME").value_or("127.0.0.1"));
    comm = transport.factory(rank, world, options);
  }
  const int rank = comm->rank();
  const nlohmann::json report = RunAll(*comm, flags, workloads, config);
  if (rank == 0) {
    if (auto file = flags.Get("report-file")) {  // the local launcher prints and judges
      std::ofstream f(*file);
      f << report.dump() << "\n";
      if (!f) throw InvalidArgument("cannot write --report-file " + *file);
      return 0;
    }
    Print(flags, report);
    std::fflush(stdout);
    WriteJson(flags, report);
  }
  if (flags.Has("report-file")) return 0;
  // Every rank holds the gathered report: each exits non-zero on a failure.
  return Verdict(report, rank == 0);
}

}  // namespace

int RunBench(Args raw_args, const Environment& env) {
  const std::vector<std::string> expanded = ExpandNcclAliases(raw_args);
  const Args args(expanded);
  Flags flags(args, kValues, kSwitches);
  if (flags.help()) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  const std::string rendezvous = flags.Str("rendezvous", "");
  if (rendezvous == "env://" || rendezvous == "mpi://" ||
      (!flags.Has("rank") && rendezvous.empty() && StartedByLauncher(env))) {
    std::optional<LaunchInfo> launch = RendezvousFromEnv(env.vars);
    if (!launch && !Transport(flags).ranks_from_launcher) {
      throw UsageError("--rendezvous " + (rendezvous.empty() ? std::string("env://") : rendezvous) +
                       ": no launcher variables (torchrun: RANK, WORLD_SIZE, MASTER_ADDR, "
                       "MASTER_PORT; mpirun: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE)");
    }
    return RunOneWorker(flags, env, launch);
  }
  if (flags.Has("rank")) return RunOneWorker(flags, env, std::nullopt);
  LauncherSignals signals;  // SIGINT/SIGTERM/SIGHUP stop the workers, then unwind
  std::optional<TestbedSpec> link;
  if (auto spec = flags.Get("testbed")) link = ParseTestbedSpec(*spec);
  const int world = static_cast<int>(flags.Int("world", link ? link->hosts : 8));
  if (world < 1) throw InvalidArgument("--world must be >= 1");
  if (link && world != link->hosts) {
    throw InvalidArgument("--world " + std::to_string(world) + " differs from the " +
                          std::to_string(link->hosts) + " testbed hosts");
  }
  const BenchConfig config = Config(flags, env);  // fail fast on bad options, before spawning
  const TransportInfo transport = Transport(flags);
  const std::vector<std::string> peers = ParsePeers(flags.Str("peers", ""));
  const bool sweep = !SweepPoints(flags).empty();
  if (sweep && !peers.empty()) throw UsageError("--sweep and --peers cannot be combined");
  if (transport.ranks_from_launcher && (link || !peers.empty())) {
    throw UsageError("--transport " + transport.id + " runs on this machine's launcher: no --testbed or --peers");
  }
  // ... and on a bad workload (a sweep's sizes are generated by the workers),
  // or one that does not fit this machine's memory: each worker holds every
  // rank's tensor, and so does this process.
  if (auto spec = flags.Get("synthetic"); spec && !sweep && !transport.ranks_from_launcher && !link) {
    CheckSyntheticFits(ParseSyntheticSpec(*spec),
                       static_cast<uint64_t>(world) * static_cast<uint64_t>(world + 1),
                       MachineMemoryBytes());
  }
  const std::optional<Workload> workload =
      sweep ? std::nullopt : std::optional<Workload>(LoadWorkload(flags, world, env));
  if (workload && config.output_dense && !link && !workload->per_rank.empty()) {
    const SparseTensor& t = workload->per_rank.front();
    CheckDenseOutputFits(t.rows(), t.width(), static_cast<uint64_t>(world), MachineMemoryBytes());
  }
  // Rank 0's progress on stderr: a line that updates in place on a
  // terminal, one plain line per scheme otherwise (CI logs).
  const bool progress = !flags.Has("quiet");
  LauncherSignals::ThrowIfInterrupted();

  std::unique_ptr<Testbed> bed;  // torn down on every way out
  if (link) bed = std::make_unique<Testbed>(*link);
  LaunchPlan plan = bed ? bed->Plan() : LaunchPlan{};
  plan.tmp_base = env.Get("TMPDIR").value_or("/tmp");
  TempDir scratch(plan.tmp_base);
  std::vector<std::string> worker_args(args.begin(), args.end());
  worker_args.insert(worker_args.end(), {"--world", std::to_string(world), "--report-file",
                                         scratch.path() + "/report.json"});
  if (bed) worker_args.insert(worker_args.end(), {"--wire-iface", kTestbedInterface});
  const int rc = transport.ranks_from_launcher ? LaunchMpiWorkers(worker_args, world)
                                               : LaunchLocalWorkers(worker_args, world, progress, plan);
  if (rc != 0) return 1;
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
    run.python = env.Get("ZEN_PYTHON").value_or("/usr/bin/python3");
    run.runner = env.Get("ZEN_TORCH_PEER").value_or("");
    run.plan = plan;
    Trace trace;
    trace.world_size = world;
    trace.metadata["generator"] = "zen bench (workload handed to the peers)";
    trace.Add(run.tensor, workload->per_rank);
    WriteTrace(run.trace_path, trace);
    for (nlohmann::json& row : RunPeers(run)) report["results"].push_back(std::move(row));
  }
  LauncherSignals::ThrowIfInterrupted();
  const std::string tunables = env.Get("GLIBC_TUNABLES").value_or("");
  if (sweep) {
    for (nlohmann::json& point : report["points"]) {
      AnnotateReport(point, link ? &*link : nullptr, UsableCores(), tunables);
    }
    if (!StreamsRows(flags)) PrintSweep(report);
  } else {
    AnnotateReport(report, link ? &*link : nullptr, UsableCores(), tunables);
    PrintReport(report);
    std::fflush(stdout);
    for (const std::string& w : CpuWarnings(report)) std::fprintf(stderr, "%s\n", w.c_str());
  }
  std::fflush(stdout);
  WriteJson(flags, report);
  return Verdict(report, /*say=*/true);
}

}  // namespace zen::cli
