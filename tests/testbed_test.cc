// The multi-host testbed (`zen testbed`, scripts/testbed which runs it, and
// `zen bench --testbed NxRATE`) and the PyTorch peers, end to end with real
// processes and real namespaces.
//
// Tests that need root and iproute2 (and the right to create network
// namespaces) skip cleanly where those are missing; the peer tests skip when
// the interpreter the zen CLI runs its torch peers with cannot import torch:
// $ZEN_PYTHON (scripts/test exports the venv's, torch 2.13), else
// /usr/bin/python3 (the CLI's own rule, tools/zen/testbed.cc).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#ifndef ZEN_CLI
#error "ZEN_CLI must name the zen binary"
#endif
#ifndef ZEN_SOURCE_DIR
#error "ZEN_SOURCE_DIR must name the source tree"
#endif

namespace {

namespace fs = std::filesystem;

std::string Output(const std::string& cmd, int* status = nullptr) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, got);
  const int st = pclose(p);
  if (status) *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

std::set<std::string> TestbedNamespaces() {
  std::set<std::string> out;
  std::stringstream lines(Output("ip netns list"));
  std::string line;
  while (std::getline(lines, line)) {
    const std::string name = line.substr(0, line.find(' '));
    if (name.rfind("zentb", 0) == 0) out.insert(name);
  }
  return out;
}

// Root, iproute2, and namespaces / bridges actually creatable here.
std::string WhyNoTestbed() {
  if (geteuid() != 0) return "not root";
  int st = 0;
  Output("command -v ip && command -v tc", &st);
  if (st != 0) return "iproute2 (ip, tc) missing";
  Output("ip link add zentbprb-br type bridge", &st);
  Output("ip link del zentbprb-br");
  if (st != 0) return "cannot create a bridge here (no CAP_NET_ADMIN?)";
  Output("ip netns add zentbprb-h0", &st);
  Output("ip netns del zentbprb-h0");
  if (st != 0) return "cannot create a network namespace here";
  return "";
}

// The interpreter `zen bench --peers` runs (the same rule as the CLI's).
std::string PeerPython() {
  const char* env = std::getenv("ZEN_PYTHON");
  return env && *env ? env : "/usr/bin/python3";
}

bool HaveTorch() {
  int st = 0;
  std::string cmd = PeerPython();
  cmd += " -c 'import torch, numpy'";
  Output(cmd, &st);
  return st == 0;
}

struct BenchRun {
  int status = -1;
  std::string output;
  nlohmann::json report;
};

BenchRun Bench(const std::string& args) {
  const fs::path dir = fs::temp_directory_path() / ("zen-testbed-test-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string json = (dir / "report.json").string();
  BenchRun run;
  run.output =
      Output(std::string(ZEN_CLI) + " bench --quiet --json " + json + " " + args, &run.status);
  std::ifstream in(json);
  if (in) run.report = nlohmann::json::parse(in);
  fs::remove_all(dir);
  return run;
}

// scripts/testbed, running the zen binary under test (one implementation:
// the script is `zen testbed`).
std::string Script() {
  return "env ZEN=" + std::string(ZEN_CLI) + " " + std::string(ZEN_SOURCE_DIR) + "/scripts/testbed";
}

const char* kSmall = "--synthetic zipf:rows=60000,width=32,density=0.03,skew=1.0";

#define SKIP_WITHOUT_TESTBED()                                        \
  do {                                                                \
    const std::string why = WhyNoTestbed();                           \
    if (!why.empty()) GTEST_SKIP() << "testbed unavailable: " << why; \
  } while (0)

TEST(Testbed, ScriptUpDownLeavesNothing) {
  SKIP_WITHOUT_TESTBED();
  const std::string script = Script();
  int st = 0;
  const std::string up = Output(script + " up 2 200mbit t1", &st);
  ASSERT_EQ(st, 0) << up;
  EXPECT_TRUE(TestbedNamespaces().count("zentbt1-h0"));
  EXPECT_TRUE(TestbedNamespaces().count("zentbt1-h1"));
  // Loopback up, address set, both veth ends shaped.
  EXPECT_NE(Output("ip -n zentbt1-h1 link show lo").find("UP"), std::string::npos);
  EXPECT_NE(Output("ip -n zentbt1-h1 addr show zentb0").find("10.77.0.2/24"), std::string::npos);
  EXPECT_NE(Output("tc -n zentbt1-h0 qdisc show dev zentb0").find("rate 200Mbit"),
            std::string::npos);
  EXPECT_NE(Output("tc qdisc show dev zentbt1-v0").find("rate 200Mbit"), std::string::npos);
  const std::string status = Output(script + " status", &st);
  EXPECT_EQ(st, 0) << status;
  EXPECT_NE(status.find("zentbt1-h1"), std::string::npos) << status;
  EXPECT_NE(status.find("zentbt1-v1: qdisc tbf"), std::string::npos) << status;
  Output(script + " down t1", &st);
  EXPECT_EQ(st, 0);
  EXPECT_FALSE(TestbedNamespaces().count("zentbt1-h0"));
  EXPECT_EQ(Output("ip -o link show").find("zentbt1-"), std::string::npos);
  Output(script + " down t1", &st);  // idempotent
  EXPECT_EQ(st, 0);
}

TEST(Testbed, ScriptRefusesWithoutRoot) {
  int st = 0;
  Output("command -v setpriv", &st);
  if (geteuid() != 0 || st != 0) GTEST_SKIP() << "needs root and setpriv to drop privileges";
  const std::string drop = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
  const std::string script = Script();
  Output(drop + "test -x " + std::string(ZEN_SOURCE_DIR) + "/scripts/testbed", &st);
  if (st != 0) GTEST_SKIP() << "the checkout is not readable by an unprivileged user: " << script;
  Output(drop + "test -x " + std::string(ZEN_CLI), &st);
  if (st != 0) GTEST_SKIP() << "the zen binary is not executable by an unprivileged user";
  const std::string out = Output(drop + script + " up 2 1gbit", &st);
  EXPECT_NE(st, 0);
  EXPECT_NE(out.find("root"), std::string::npos) << out;
}

TEST(Testbed, BenchRefusesWithoutRoot) {
  int st = 0;
  Output("command -v setpriv", &st);
  if (geteuid() != 0 || st != 0) GTEST_SKIP() << "needs root and setpriv to drop privileges";
  const std::string out = Output("setpriv --reuid=65534 --regid=65534 --clear-groups " +
                                     std::string(ZEN_CLI) + " bench --testbed 2x1gbit " + kSmall,
                                 &st);
  EXPECT_NE(st, 0);
  EXPECT_NE(out.find("needs root"), std::string::npos) << out;
}

// The script and `zen testbed` are one implementation: the script's
// answers are the binary's, bad arguments fail before anything is built.
TEST(Testbed, ScriptRunsTheZenImplementation) {
  int st = 0;
  const std::string help = Output(std::string(ZEN_CLI) + " testbed --help", &st);
  EXPECT_EQ(st, 0) << help;
  EXPECT_NE(help.find("zentb<TAG>-h<i>"), std::string::npos) << help;
  const auto before = TestbedNamespaces();
  const std::string bad_tag = Output(Script() + " up 2 1gbit TOO-LONG", &st);
  EXPECT_EQ(st, 2) << bad_tag;
  EXPECT_NE(bad_tag.find("zen testbed: TAG 'TOO-LONG' must be at most 4 of [0-9a-z]"),
            std::string::npos)
      << bad_tag;
  const std::string bad_rate = Output(Script() + " up 2 500mbps", &st);
  EXPECT_EQ(st, 2) << bad_rate;
  EXPECT_NE(bad_rate.find("mbit"), std::string::npos) << bad_rate;
  EXPECT_EQ(TestbedNamespaces(), before);
  const std::string missing =
      Output("env ZEN=/nonexistent/zen " + std::string(ZEN_SOURCE_DIR) + "/scripts/testbed status",
             &st);
  EXPECT_NE(st, 0);
  EXPECT_NE(missing.find("no zen binary"), std::string::npos) << missing;
}

TEST(Testbed, BadSpecFailsBeforeAnythingIsBuilt) {
  const BenchRun run = Bench("--testbed 2x500mbps " + std::string(kSmall));
  EXPECT_EQ(run.status, 2) << run.output;
  EXPECT_NE(run.output.find("mbit"), std::string::npos) << run.output;
}

TEST(Testbed, ShapedLinksBoundTimeAndWireBytesCoverPayload) {
  SKIP_WITHOUT_TESTBED();
  const auto before = TestbedNamespaces();
  // Lower bound here ~1.9 MB per rank: 8 ms at 2 Gbit/s, more than the
  // bucket (128 KiB) can hide.
  const BenchRun run =
      Bench("--testbed 3x2gbit --iters 2 --warmup 1 --schemes agsparse,zen " + std::string(kSmall));
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_EQ(TestbedNamespaces(), before) << "the testbed was not removed";
  const auto& r = run.report;
  ASSERT_TRUE(r.contains("link"));
  EXPECT_EQ(r["link"]["hosts"], 3);
  EXPECT_DOUBLE_EQ(r["link"]["rate_bits_per_s"].get<double>(), 2e9);
  const double bound_bytes = r["tensor"]["lower_bound_bytes_max"].get<double>();
  EXPECT_NEAR(r["lower_bound_time_s"].get<double>(), bound_bytes * 8 / 2e9, 1e-9);
  for (const auto& s : r["results"]) {
    SCOPED_TRACE(s["scheme"].get<std::string>());
    ASSERT_FALSE(s.contains("error")) << s["error"];
    EXPECT_EQ(s["rows_mismatch"].get<int64_t>(), 0);
    EXPECT_LE(s["max_rel_error"].get<double>(), 1e-5);
    // Physics: no rank receives faster than its shaped link (minus the
    // bucket of 131072 bytes and one 64 KiB segment already in flight).
    const double floor_s = (bound_bytes - 131072 - 65536) * 8 / 2e9;
    EXPECT_GE(s["time_s_min"].get<double>(), floor_s);
    // The interface saw at least the payload the communicator counted.
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_GE(s["wire_bytes_recv_per_rank"][k].get<double>(),
                s["bytes_recv_per_rank"][k].get<double>());
      EXPECT_GE(s["wire_bytes_sent_per_rank"][k].get<double>(),
                s["bytes_sent_per_rank"][k].get<double>());
    }
    EXPECT_NEAR(s["time_over_bound"].get<double>(),
                s["time_s_median"].get<double>() / r["lower_bound_time_s"].get<double>(), 1e-9);
  }
}

TEST(Testbed, KilledLauncherLeavesNoNamespaces) {
  SKIP_WITHOUT_TESTBED();
  const auto before = TestbedNamespaces();
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setpgid(0, 0);
    const int null = ::open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    execl(ZEN_CLI, ZEN_CLI, "bench", "--quiet", "--testbed", "2x100mbit", "--iters", "50",
          "--schemes", "dense", "--synthetic", "zipf:rows=400000,width=16,density=0.01", nullptr);
    _exit(127);
  }
  setpgid(pid, pid);
  bool appeared = false;
  for (int i = 0; i < 200 && !appeared; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    appeared = TestbedNamespaces().size() > before.size();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // workers are up
  kill(-pid, SIGKILL);  // the launcher and its workers, no chance to clean up
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(appeared) << "the testbed never came up";
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    gone = TestbedNamespaces() == before;
  }
  EXPECT_TRUE(gone) << "the watchdog did not remove the testbed";
}

TEST(Peers, LoopbackRowsCheckedAndBytesNotInvented) {
  if (!HaveTorch()) GTEST_SKIP() << PeerPython() << " cannot import torch";
  const BenchRun run =
      Bench("--world 2 --iters 2 --warmup 1 --schemes agsparse --peers all " + std::string(kSmall));
  ASSERT_EQ(run.status, 0) << run.output;
  ASSERT_EQ(run.report["results"].size(), 4u);
  for (size_t i = 1; i < 4; ++i) {
    const auto& p = run.report["results"][i];
    const std::string peer = p["scheme"].get<std::string>();
    SCOPED_TRACE(peer);
    ASSERT_FALSE(p.contains("error")) << p["error"];
    EXPECT_EQ(p["rows_mismatch"].get<int64_t>(), 0);
    EXPECT_LE(p["max_rel_error"].get<double>(), 1e-5);
    EXPECT_EQ(p["times_s"].size(), 2u);
    if (peer == "zen-process-group") {  // zen's engine counts its payload
      ASSERT_TRUE(p.contains("bytes_recv_max"));
      EXPECT_GT(p["bytes_recv_max"].get<double>(), 0);
    } else {
      EXPECT_FALSE(p.contains("bytes_recv_max"));  // torch: no payload counters
    }
    EXPECT_FALSE(p.contains("wire_bytes_recv_max"));  // loopback: no interface counters
  }
  EXPECT_NE(run.output.find("n/a"), std::string::npos);
}

TEST(Peers, OnTestbedWireBytesMatchTheAllgather) {
  SKIP_WITHOUT_TESTBED();
  if (!HaveTorch()) GTEST_SKIP() << PeerPython() << " cannot import torch";
  const BenchRun run = Bench(
      "--testbed 2x2gbit --iters 2 --warmup 1 --schemes agsparse "
      "--peers torch-gloo-sparse " +
      std::string(kSmall));
  ASSERT_EQ(run.status, 0) << run.output;
  const auto& ag = run.report["results"][0];
  const auto& torch = run.report["results"][1];
  ASSERT_EQ(torch["scheme"], "torch-gloo-sparse");
  ASSERT_FALSE(torch.contains("error")) << torch["error"];
  EXPECT_EQ(torch["rows_mismatch"].get<int64_t>(), 0);
  // Both allgather the other rank's COO rows: the wire volumes agree to 10%.
  const double a = ag["wire_bytes_recv_max"].get<double>(),
               t = torch["wire_bytes_recv_max"].get<double>();
  EXPECT_NEAR(t / a, 1.0, 0.1);
}

}  // namespace
