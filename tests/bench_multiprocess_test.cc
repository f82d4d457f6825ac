// End-to-end: `zen bench` starts real worker processes that talk over Gloo
// TCP on loopback; every scheme's result must match the dense reference on
// every rank, and the byte figures must come from real traffic.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "zen/analysis/auto_scheme.h"

#ifndef ZEN_CLI
#error "ZEN_CLI must name the zen binary"
#endif

namespace {

struct BenchRun {
  int status = -1;
  nlohmann::json report;
};

BenchRun Bench(const std::string& args) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("zen-bench-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string json = (dir / "report.json").string();
  const std::string cmd = std::string(ZEN_CLI) + " bench --quiet --json " + json + " " + args +
                          " > " + (dir / "stdout").string() + " 2>&1";
  BenchRun run;
  run.status = std::system(cmd.c_str());
  std::ifstream in(json);
  if (in) run.report = nlohmann::json::parse(in);
  std::filesystem::remove_all(dir);
  return run;
}

TEST(BenchMultiProcess, EverySchemeExactOnEveryRank) {
  const BenchRun run = Bench(
      "--world 3 --iters 2 --warmup 1 --synthetic zipf:rows=20000,width=16,density=0.02,skew=1.1");
  ASSERT_EQ(run.status, 0);
  ASSERT_EQ(run.report["world_size"], 3);
  const auto ids = zen::AllSchemes().ids();
  ASSERT_EQ(run.report["results"].size(), ids.size());
  for (const auto& r : run.report["results"]) {
    SCOPED_TRACE(r["scheme"].get<std::string>());
    ASSERT_FALSE(r.contains("error")) << r["error"];
    EXPECT_LE(r["max_rel_error"].get<double>(), 1e-5);
    EXPECT_EQ(r["rows_mismatch"].get<int64_t>(), 0);
    EXPECT_GT(r["bytes_recv_max"].get<double>(), 0);
    EXPECT_GE(r["time_s_median"].get<double>(), r["time_s_min"].get<double>());
  }
}

TEST(BenchMultiProcess, AgSparseReceivesEveryOtherRanksCoo) {
  // Measured bytes against the definition: each rank receives the other
  // ranks' COO streams (8-byte id + 4 x width value bytes per row) plus the
  // size exchange and the metadata record.
  const BenchRun run = Bench(
      "--world 4 --iters 1 --warmup 0 --schemes agsparse "
      "--synthetic zipf:rows=50000,width=8,density=0.01,skew=0.5");
  ASSERT_EQ(run.status, 0);
  const auto& t = run.report["tensor"];
  const auto& r = run.report["results"][0];
  double total_nnz = 0;
  for (const auto& v : t["nnz_per_rank"]) total_nnz += v.get<double>();
  const double row_bytes = 8 + 4 * 8;
  for (size_t k = 0; k < 4; ++k) {
    const double others = total_nnz - t["nnz_per_rank"][k].get<double>();
    const double recv = r["bytes_recv_per_rank"][k].get<double>();
    EXPECT_GE(recv, others * row_bytes);
    EXPECT_LE(recv, others * row_bytes + 3 * 128);
  }
}

// --no-agreement: the schemes skip the metadata round, so each rank sends
// exactly its 56-byte record to each peer fewer per call, and the sums stay
// exact; the report says the round was off.
TEST(BenchMultiProcess, NoAgreementSendsTheRecordsFewer) {
  const std::string args =
      "--world 3 --iters 2 --warmup 1 --schemes agsparse,zen "
      "--synthetic zipf:rows=50000,width=8,density=0.01,skew=0.5";
  const BenchRun on = Bench(args);
  const BenchRun off = Bench(args + " --no-agreement");
  ASSERT_EQ(on.status, 0);
  ASSERT_EQ(off.status, 0);
  EXPECT_EQ(on.report["check_agreement"], true);
  EXPECT_EQ(off.report["check_agreement"], false);
  for (size_t k = 0; k < 2; ++k) {
    const auto& a = on.report["results"][k];
    const auto& b = off.report["results"][k];
    SCOPED_TRACE(a["scheme"].get<std::string>());
    EXPECT_LE(b["max_rel_error"].get<double>(), 1e-5);
    EXPECT_EQ(b["rows_mismatch"].get<int64_t>(), 0);
    for (size_t r = 0; r < 3; ++r) {
      EXPECT_EQ(a["bytes_sent_per_rank"][r].get<double>() - b["bytes_sent_per_rank"][r].get<double>(),
                56.0 * 2)
          << "rank " << r;
    }
  }
}

// --output dense: every scheme writes the sum into a dense buffer
// (Scheme::SyncInto) and the check reads that buffer; element-sparse rows so
// that zen's unsorted write path runs; a wrong form is a usage error.
TEST(BenchMultiProcess, DenseOutputExactForEveryScheme) {
  const BenchRun run = Bench(
      "--world 3 --iters 2 --warmup 1 --output dense "
      "--synthetic zipf:rows=200000,width=1,density=0.01,skew=1.1");
  ASSERT_EQ(run.status, 0);
  EXPECT_EQ(run.report["output"], "dense");
  ASSERT_EQ(run.report["results"].size(), zen::AllSchemes().ids().size());
  for (const auto& r : run.report["results"]) {
    SCOPED_TRACE(r["scheme"].get<std::string>());
    ASSERT_FALSE(r.contains("error")) << r["error"];
    EXPECT_LE(r["max_rel_error"].get<double>(), 1e-5);
    EXPECT_EQ(r["rows_mismatch"].get<int64_t>(), 0);
  }
  EXPECT_NE(Bench("--world 2 --output coo --synthetic zipf:rows=100").status, 0);
}

TEST(BenchMultiProcess, BadSchemeNameFailsBeforeSpawning) {
  const BenchRun run = Bench("--world 2 --schemes nosuch --synthetic zipf:rows=100");
  EXPECT_NE(run.status, 0);
}

// ---- the launcher and exit codes ----

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Starts `zen bench ARGS` (stdout, stderr to files in `dir`, TMPDIR=dir/tmp).
pid_t StartBench(const fs::path& dir, const std::vector<std::string>& args) {
  fs::create_directories(dir / "tmp");
  const pid_t pid = fork();
  if (pid == 0) {
    if (!freopen((dir / "out").c_str(), "w", stdout) || !freopen((dir / "err").c_str(), "w", stderr)) _exit(120);
    setenv("TMPDIR", (dir / "tmp").c_str(), 1);
    std::vector<char*> argv = {const_cast<char*>(ZEN_CLI), const_cast<char*>("bench")};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(ZEN_CLI, argv.data());
    _exit(127);
  }
  return pid;
}

std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The pids of the processes whose parent is `parent` and whose command line
// contains "--rank" (the workers).
std::set<pid_t> Workers(pid_t parent) {
  std::set<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != parent) continue;
    const std::string cmd = Slurp(e.path() / "cmdline");
    if (cmd.find("--rank") != std::string::npos) out.insert(static_cast<pid_t>(std::stoi(name)));
  }
  return out;
}

bool Alive(pid_t pid) {
  // Orphans are re-parented to this test (a child subreaper): reap them.
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  return kill(pid, 0) == 0;
}

// Kills the launcher with `sig` once its workers run, and checks that every
// worker dies and the temporary directories go, within a few seconds.
void KillLauncherWhileRunning(int sig) {
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  const fs::path dir = fs::temp_directory_path() / ("zen-bench-kill-" + std::to_string(getpid()));
  fs::remove_all(dir);
  const int world = 3;
  const pid_t launcher = StartBench(
      dir, {"--quiet", "--world", std::to_string(world), "--iters", "100000", "--schemes", "dense",
            "--synthetic", "zipf:rows=20000,width=16,density=0.02,skew=1.1"});
  std::set<pid_t> workers;
  for (auto t0 = Clock::now(); Clock::now() - t0 < std::chrono::seconds(30);) {
    workers = Workers(launcher);
    if (static_cast<int>(workers.size()) == world) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(static_cast<int>(workers.size()), world) << Slurp(dir / "err");
  ASSERT_FALSE(fs::is_empty(dir / "tmp"));  // the rendezvous store is there
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // measuring now
  ASSERT_EQ(kill(launcher, sig), 0);
  int status = 0;
  ASSERT_EQ(waitpid(launcher, &status, 0), launcher);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << "status " << status;
  std::set<pid_t> left = workers;
  for (auto t0 = Clock::now(); !left.empty() && Clock::now() - t0 < std::chrono::seconds(10);) {
    for (auto it = left.begin(); it != left.end();) it = Alive(*it) ? std::next(it) : left.erase(it);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(left.empty()) << left.size() << " workers outlived the launcher";
  for (pid_t p : left) kill(p, SIGKILL);
  bool clean = false;
  for (auto t0 = Clock::now(); !clean && Clock::now() - t0 < std::chrono::seconds(10);) {
    Alive(1);  // reap the directory guard
    clean = fs::is_empty(dir / "tmp");
    if (!clean) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(clean) << "temporary directories left behind in " << dir / "tmp";
  while (waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  fs::remove_all(dir);
}

TEST(BenchLauncher, SigtermStopsWorkersAndRemovesTemporaryFiles) { KillLauncherWhileRunning(SIGTERM); }
TEST(BenchLauncher, SigintStopsWorkersAndRemovesTemporaryFiles) { KillLauncherWhileRunning(SIGINT); }
TEST(BenchLauncher, SigkillStillTakesTheWorkersAndFilesAlong) { KillLauncherWhileRunning(SIGKILL); }

// Runs a 2-rank job by hand (`--rank` mode, as on two machines) where each
// rank gets its own extra arguments; returns both exit statuses.
std::vector<int> RankJob(const std::vector<std::string>& rank0, const std::vector<std::string>& rank1,
                         std::string* err0) {
  const fs::path dir = fs::temp_directory_path() / ("zen-bench-ranks-" + std::to_string(getpid()));
  fs::remove_all(dir);
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> args = {"--quiet", "--world", "2", "--rank", std::to_string(r),
                                     "--rendezvous", "file:" + (dir / "store").string(),
                                     "--iters", "1", "--warmup", "0", "--timeout-s", "30"};
    const auto& extra = r == 0 ? rank0 : rank1;
    args.insert(args.end(), extra.begin(), extra.end());
    pids.push_back(StartBench(dir / (r == 0 ? "r0" : "r1"), args));
  }
  std::vector<int> out;
  for (pid_t p : pids) {
    int status = 0;
    waitpid(p, &status, 0);
    out.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  *err0 = Slurp(dir / "r0" / "err") + Slurp(dir / "r0" / "out");
  fs::remove_all(dir);
  return out;
}

TEST(BenchRankMode, ExactRunExitsZeroOnEveryRank) {
  std::string err;
  const std::string spec = "zipf:rows=5000,width=4,density=0.02,skew=1.1";
  const auto status = RankJob({"--synthetic", spec}, {"--synthetic", spec}, &err);
  EXPECT_EQ(status, (std::vector<int>{0, 0})) << err;
}

TEST(BenchRankMode, MismatchErrorExitsNonZeroOnEveryRank) {
  // The ranks disagree on the tensor's shape: every scheme raises
  // MismatchError on every rank.
  std::string err;
  const auto status = RankJob({"--synthetic", "zipf:rows=5000,width=4,density=0.02"},
                              {"--synthetic", "zipf:rows=6000,width=4,density=0.02"}, &err);
  EXPECT_NE(status[0], 0) << err;
  EXPECT_NE(status[1], 0);
  EXPECT_NE(err.find("FAILED"), std::string::npos) << err;
}

TEST(BenchRankMode, InexactResultExitsNonZeroOnEveryRank) {
  // Same shape, other inputs on rank 1 (another seed): the sums are
  // well-formed but differ from each rank's reference (rows bad, relerr ~1).
  std::string err;
  const auto status = RankJob({"--synthetic", "zipf:rows=5000,width=4,density=0.02,seed=1"},
                              {"--synthetic", "zipf:rows=5000,width=4,density=0.02,seed=2"}, &err);
  EXPECT_NE(status[0], 0) << err;
  EXPECT_NE(status[1], 0);
  EXPECT_NE(err.find("inexact result"), std::string::npos) << err;
}

// ---- external launchers, transports, the sweep ----

// Runs a shell command; returns its exit status (128 + signal if killed).
int Shell(const std::string& cmd) {
  const int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

bool OnPath(const std::string& tool) { return Shell("command -v " + tool + " >/dev/null 2>&1") == 0; }

// Checks a report written by rank 0 of an externally launched job.
void ExpectExactReport(const fs::path& json, int world, size_t schemes) {
  std::ifstream in(json);
  ASSERT_TRUE(in) << "rank 0 wrote no " << json;
  const auto report = nlohmann::json::parse(in);
  EXPECT_EQ(report["world_size"], world);
  ASSERT_EQ(report["results"].size(), schemes);
  for (const auto& r : report["results"]) {
    SCOPED_TRACE(r["scheme"].get<std::string>());
    ASSERT_FALSE(r.contains("error")) << r["error"];
    EXPECT_EQ(r["rows_mismatch"].get<int64_t>(), 0);
    EXPECT_LE(r["max_rel_error"].get<double>(), 1e-5);
    EXPECT_GT(r["bytes_recv_max"].get<double>(), 0);
  }
}

const char* kSmall = "--quiet --iters 1 --warmup 1 --schemes zen,agsparse,sparcml "
                     "--synthetic zipf:rows=20000,width=8,density=0.02,skew=1.1";

TEST(BenchExternalLauncher, UnderTorchrunWithEnvRendezvous) {
  if (!OnPath("torchrun")) GTEST_SKIP() << "no torchrun";
  const fs::path dir = fs::temp_directory_path() / ("zen-torchrun-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const int port = 20000 + getpid() % 20000;
  // ZEN_RENDEZVOUS: a store this branch's ConnectGloo has (file:); with the
  // comm layer's tcp:// store the default (MASTER_ADDR:MASTER_PORT+1) works too.
  // --redirects/--tee 2: Debian's torchrun 1.13 fails on Python 3.11 without them.
  const std::string cmd = "cd " + dir.string() + " && ZEN_RENDEZVOUS=file:" + (dir / "store").string() +
                          " torchrun --redirects 2 --tee 2 --log_dir " + (dir / "logs").string() +
                          " --nproc_per_node 3 --master_port " + std::to_string(port) +
                          " --no_python " + ZEN_CLI + " bench --rendezvous env:// " + kSmall +
                          " --json " + (dir / "report.json").string() + " > " + (dir / "out").string() +
                          " 2>&1";
  ASSERT_EQ(Shell(cmd), 0) << Slurp(dir / "out");
  ExpectExactReport(dir / "report.json", 3, 3);
  // Rank 0 printed the launcher's table.
  EXPECT_NE(Slurp(dir / "out").find("median ms"), std::string::npos);
  fs::remove_all(dir);
}

TEST(BenchExternalLauncher, UnderMpirun) {
  if (!OnPath("mpirun")) GTEST_SKIP() << "no mpirun";
  const fs::path dir = fs::temp_directory_path() / ("zen-mpirun-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  // Gloo under mpirun: ranks from OMPI_COMM_WORLD_*, the store from ZEN_RENDEZVOUS.
  const std::string cmd = "cd " + dir.string() + " && ZEN_RENDEZVOUS=file:" + (dir / "store").string() +
                          " mpirun --allow-run-as-root --oversubscribe -np 3 -x ZEN_RENDEZVOUS " +
                          ZEN_CLI + " bench " + kSmall + " --json " + (dir / "report.json").string() +
                          " > " + (dir / "out").string() + " 2>&1";
  ASSERT_EQ(Shell(cmd), 0) << Slurp(dir / "out");
  ExpectExactReport(dir / "report.json", 3, 3);
  fs::remove_all(dir);
}

TEST(BenchExternalLauncher, EnvRendezvousWithoutALauncherIsAUsageError) {
  const std::string cmd = std::string("env -u RANK -u WORLD_SIZE -u OMPI_COMM_WORLD_SIZE -u PMI_SIZE ") +
                          ZEN_CLI + " bench --rendezvous env:// > /dev/null 2>&1";
  EXPECT_EQ(Shell(cmd), 2);
}

TEST(BenchTransport, MpiReportsTheSameTable) {
  const fs::path dir = fs::temp_directory_path() / ("zen-mpi-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string cmd = std::string(ZEN_CLI) + " bench --transport mpi --world 3 " + kSmall + " --json " +
                          (dir / "report.json").string() + " > " + (dir / "out").string() + " 2>&1";
  const int rc = Shell(cmd);
  const std::string out = Slurp(dir / "out");
  if (rc == 2 && out.find("--transport mpi: unknown transport") != std::string::npos) {
    fs::remove_all(dir);
    GTEST_SKIP() << "zen built without MPI";
  }
  ASSERT_EQ(rc, 0) << out;
  ExpectExactReport(dir / "report.json", 3, 3);
  EXPECT_NE(out.find("median ms"), std::string::npos);
  fs::remove_all(dir);
}

TEST(BenchSweep, RowsFromSmallToLargeWithBandwidths) {
  const BenchRun run = Bench(
      "--world 3 --iters 1 --warmup 0 --schemes zen,agsparse --sweep rows --sweep-range 1000:64000:4 "
      "--synthetic zipf:width=4,density=0.01,skew=1.1");
  ASSERT_EQ(run.status, 0);
  ASSERT_EQ(run.report["sweep"], "rows");
  const auto& points = run.report["points"];
  ASSERT_EQ(points.size(), 4u);  // 1000, 4000, 16000, 64000
  const int64_t want_rows[] = {1000, 4000, 16000, 64000};
  for (size_t i = 0; i < points.size(); ++i) {
    const auto& p = points[i];
    EXPECT_EQ(p["tensor"]["rows"].get<int64_t>(), want_rows[i]);
    ASSERT_EQ(p["results"].size(), 2u);
    for (const auto& r : p["results"]) {
      ASSERT_FALSE(r.contains("error")) << r["error"];
      EXPECT_EQ(r["rows_mismatch"].get<int64_t>(), 0);
      const double size = static_cast<double>(want_rows[i]) * 4 * 4;
      const double t = r["time_s_median"].get<double>();
      EXPECT_DOUBLE_EQ(r["size_bytes"].get<double>(), size);
      EXPECT_NEAR(r["algbw_GBps"].get<double>(), size / t / 1e9, 1e-12);
      EXPECT_NEAR(r["busbw_GBps"].get<double>(), size / t / 1e9 * 2 * 2 / 3, 1e-12);
    }
  }
}

TEST(BenchSweep, BadSweepIsAUsageError) {
  EXPECT_EQ(Bench("--sweep sizes").status >> 8, 2);
  EXPECT_EQ(Bench("--sweep rows --sweep-range 10:1:2").status >> 8, 2);
  EXPECT_EQ(Bench("--sweep density --sweep-range 0.1:2:2").status >> 8, 2);
}

}  // namespace
