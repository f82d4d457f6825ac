#include "tools/zen/testbed.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tools/zen/bench.h"
#include "tools/zen/launcher.h"
#include "zen/core/error.h"

#ifndef ZEN_DEFAULT_TRACE
#define ZEN_DEFAULT_TRACE ""
#endif

namespace zen::cli {
namespace {

using nlohmann::json;

// Runs argv (no shell) and returns its exit status; quiet: no stdout/stderr.
int RunCommand(const std::vector<std::string>& argv, bool quiet) {
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    if (quiet) {
      const int null = open("/dev/null", O_WRONLY);
      if (null >= 0) {
        dup2(null, STDOUT_FILENO);
        dup2(null, STDERR_FILENO);
      }
    }
    execvp(cargv[0], cargv.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

// Output of a command (stdout only), empty on failure.
std::string CommandOutput(const std::vector<std::string>& argv) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    const int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    execvp(cargv[0], cargv.data());
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t got;
  while ((got = read(fds[0], buf, sizeof buf)) > 0 || (got < 0 && errno == EINTR)) {
    if (got > 0) out.append(buf, static_cast<size_t>(got));
  }
  close(fds[0]);
  if (pid > 0) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  return out;
}

// iproute2 lives in the system directories (no $PATH: the CLI reads its
// environment in main only).
bool OnPath(const std::string& tool) {
  std::stringstream dirs("/usr/sbin:/sbin:/usr/bin:/bin:/usr/local/sbin:/usr/local/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (!dir.empty() && access((dir + "/" + tool).c_str(), X_OK) == 0) return true;
  }
  return false;
}

// Names (first word of each line / "N: name@peer:" of `ip -o link`) with prefix.
std::vector<std::string> Matching(const std::string& listing, const std::string& prefix,
                                  bool ip_link_format) {
  std::vector<std::string> out;
  std::stringstream lines(listing);
  std::string line;
  while (std::getline(lines, line)) {
    std::string name;
    if (ip_link_format) {
      const size_t a = line.find(": ");
      if (a == std::string::npos) continue;
      const size_t b = line.find_first_of(":@", a + 2);
      name = line.substr(a + 2, b == std::string::npos ? std::string::npos : b - a - 2);
    } else {
      name = line.substr(0, line.find(' '));
    }
    if (name.rfind(prefix, 0) == 0) out.push_back(name);
  }
  return out;
}

// The bucket holds 2 ms of traffic by default (at least 128 KiB so that
// 64 KiB GSO packets pass whole; a smaller bucket makes tbf segment them),
// or the spec's burst; the queue holds 100 ms, so that the 7 flows of an
// all-to-all fit without tail drops. Same as scripts/testbed.
std::vector<std::string> ShapeArgs(const std::string& ns, const std::string& dev, double bits,
                                   int64_t burst_bytes) {
  const auto burst = burst_bytes > 0 ? burst_bytes
                                     : std::max<int64_t>(131072, static_cast<int64_t>(bits / 8 / 500));
  std::vector<std::string> argv = {"tc"};
  if (!ns.empty()) argv.insert(argv.end(), {"-n", ns});
  argv.insert(argv.end(), {"qdisc", "replace", "dev", dev, "root", "tbf", "rate",
                           std::to_string(static_cast<int64_t>(bits)) + "bit", "burst",
                           std::to_string(burst), "latency", "100ms"});
  return argv;
}

std::string Joined(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

}  // namespace

double ParseRateBits(std::string_view rate) {
  static const std::pair<const char*, double> kUnits[] = {
      {"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}};
  for (const auto& [unit, scale] : kUnits) {
    const std::string_view u(unit);
    if (rate.size() <= u.size() || rate.substr(rate.size() - u.size()) != u) continue;
    const std::string number(rate.substr(0, rate.size() - u.size()));
    char* end = nullptr;
    const double v = std::strtod(number.c_str(), &end);
    if (end == number.c_str() || *end != '\0' || !(v > 0) || !std::isfinite(v)) break;
    return v * scale;
  }
  throw InvalidArgument("rate '" + std::string(rate) +
                        "' must be a positive number with a unit: bit, kbit, mbit or gbit "
                        "(e.g. 500mbit)");
}

namespace {

// "burst=32k" -> 32768 (bytes; k and m are KiB and MiB).
int64_t ParseBurst(std::string_view option) {
  const std::string_view key = "burst=";
  const std::string text(option.substr(option.rfind(key, 0) == 0 ? key.size() : 0));
  char* end = nullptr;
  const long long v = option.rfind(key, 0) == 0 ? std::strtoll(text.c_str(), &end, 10) : -1;
  int64_t scale = 1;
  if (end != nullptr && (*end == 'k' || *end == 'm') && end[1] == '\0') {
    scale = *end == 'k' ? 1024 : 1024 * 1024;
    ++end;
  }
  if (end == nullptr || end == text.c_str() || *end != '\0' || v < 1 || v > (int64_t{1} << 30) / scale ||
      v * scale < 2048) {
    throw InvalidArgument("--testbed option '" + std::string(option) +
                          "' must be burst=BYTES (k or m for KiB or MiB, 2048 bytes to 1 GiB), "
                          "e.g. 8x500mbit,burst=32k");
  }
  return static_cast<int64_t>(v) * scale;
}

}  // namespace

TestbedSpec ParseTestbedSpec(std::string_view text) {
  const size_t x = text.find('x');
  if (x == std::string_view::npos || x == 0) {
    throw InvalidArgument("--testbed '" + std::string(text) + "' must be NxRATE, e.g. 8x500mbit");
  }
  TestbedSpec spec;
  const std::string hosts(text.substr(0, x));
  char* end = nullptr;
  const long n = std::strtol(hosts.c_str(), &end, 10);
  if (*end != '\0' || n < 1 || n > 254) {
    throw InvalidArgument("--testbed host count '" + hosts + "' must be 1..254");
  }
  spec.hosts = static_cast<int>(n);
  std::string_view rest = text.substr(x + 1);
  const size_t comma = rest.find(',');
  spec.rate = std::string(rest.substr(0, comma));
  spec.rate_bits_per_s = ParseRateBits(spec.rate);
  if (comma != std::string_view::npos) spec.burst_bytes = ParseBurst(rest.substr(comma + 1));
  return spec;
}

void RemoveTestbedObjects(const std::string& start) {
  for (const auto& ns : Matching(CommandOutput({"ip", "netns", "list"}), start, false)) {
    RunCommand({"ip", "netns", "del", ns}, true);
  }
  for (const auto& link : Matching(CommandOutput({"ip", "-o", "link", "show"}), start, true)) {
    RunCommand({"ip", "link", "del", link}, true);
  }
}

void TestbedDown(const std::string& prefix) { RemoveTestbedObjects(prefix + "-"); }

void CheckTestbedPrivileges(std::string_view what) {
  if (geteuid() != 0) {
    throw InvalidArgument(std::string(what) +
                          " needs root: network namespaces, veth pairs, a bridge and tc shaping "
                          "need CAP_NET_ADMIN (run as root, or use plain `zen bench` on loopback)");
  }
  if (!OnPath("ip") || !OnPath("tc")) {
    throw InvalidArgument(std::string(what) +
                          " needs iproute2 ('ip' and 'tc'): apt-get install iproute2");
  }
}

std::string TestbedPrefix(std::string_view tag) {
  const bool ok = tag.size() <= 4 && std::all_of(tag.begin(), tag.end(), [](char c) {
                    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z');
                  });
  if (!ok) throw InvalidArgument("TAG '" + std::string(tag) + "' must be at most 4 of [0-9a-z]");
  return "zentb" + std::string(tag);
}

void TestbedUp(const std::string& prefix, const TestbedSpec& spec) {
  if (spec.hosts < 1 || !(spec.rate_bits_per_s > 0)) {
    throw InvalidArgument("testbed needs >= 1 host and a positive rate");
  }
  TestbedDown(prefix);
  const auto run = [](const std::vector<std::string>& argv) {
    if (RunCommand(argv, false) != 0) {
      throw TransportError("testbed setup failed: `" + Joined(argv) + "`");
    }
  };
  try {
    const std::string br = prefix + "-br";
    run({"ip", "link", "add", br, "type", "bridge"});
    run({"ip", "link", "set", br, "up"});
    for (int i = 0; i < spec.hosts; ++i) {
      const std::string ns = prefix + "-h" + std::to_string(i);
      const std::string veth = prefix + "-v" + std::to_string(i);
      run({"ip", "netns", "add", ns});
      run({"ip", "link", "add", veth, "type", "veth", "peer", "name", kTestbedInterface, "netns",
           ns});
      run({"ip", "link", "set", veth, "master", br, "up"});
      run({"ip", "-n", ns, "link", "set", "lo", "up"});
      run({"ip", "-n", ns, "addr", "add", Testbed::Address(i) + "/24", "dev", kTestbedInterface});
      run({"ip", "-n", ns, "link", "set", kTestbedInterface, "up"});
      // A link idle between iterations must not fall back to slow start
      // (a per-namespace setting; datacenter stacks turn it off too).
      run({"ip", "netns", "exec", ns, "sysctl", "-q", "-w",
           "net.ipv4.tcp_slow_start_after_idle=0"});
      run(ShapeArgs(ns, kTestbedInterface, spec.rate_bits_per_s, spec.burst_bytes));
      run(ShapeArgs("", veth, spec.rate_bits_per_s, spec.burst_bytes));
    }
  } catch (...) {
    TestbedDown(prefix);
    throw;
  }
}

std::string TestbedStatus() {
  std::string out;
  for (const auto& ns : Matching(CommandOutput({"ip", "netns", "list"}), "zentb", false)) {
    out += ns + "\n";
  }
  if (out.empty()) out = "no zentb namespaces\n";
  for (const auto& link : Matching(CommandOutput({"ip", "-o", "link", "show"}), "zentb", true)) {
    std::stringstream qdiscs(CommandOutput({"tc", "qdisc", "show", "dev", link}));
    std::string line;
    while (std::getline(qdiscs, line)) out += link + ": " + line + "\n";
  }
  return out;
}

Testbed::Testbed(const TestbedSpec& spec) : spec_(spec) {
  CheckTestbedPrivileges("--testbed");
  if (spec_.hosts < 1 || !(spec_.rate_bits_per_s > 0)) {
    throw InvalidArgument("testbed needs >= 1 host and a positive rate");
  }
  // A tag no other testbed uses: base 36 of the pid, then the next free one.
  const std::string listing = CommandOutput({"ip", "netns", "list"});
  for (unsigned t = static_cast<unsigned>(getpid()) % 46656;; t = (t + 1) % 46656) {
    std::string tag;
    for (unsigned v = t, i = 0; i < 3; ++i, v /= 36)
      tag += "0123456789abcdefghijklmnopqrstuvwxyz"[v % 36];
    if (Matching(listing, "zentb" + tag + "-", false).empty()) {
      prefix_ = "zentb" + tag;
      break;
    }
  }
  StartWatchdog();
  TestbedUp(prefix_, spec_);  // removes what it made when it fails
}

// A child that waits for this process to end (its pipe reaches EOF, however
// we die) and then removes the testbed; it ignores the terminal's signals.
void Testbed::StartWatchdog() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return;  // RAII alone still cleans up
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return;
  }
  if (pid == 0) {
    setsid();  // out of the job's process group: a group kill does not reach it
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    close(fds[1]);
    char c;
    while (read(fds[0], &c, 1) < 0 && errno == EINTR) {
    }
    TestbedDown(prefix_);
    _exit(0);
  }
  close(fds[0]);
  watchdog_fd_ = fds[1];
  watchdog_pid_ = pid;
}

Testbed::~Testbed() {
  TestbedDown(prefix_);
  if (watchdog_fd_ >= 0) close(watchdog_fd_);
  if (watchdog_pid_ > 0) {
    int status = 0;
    while (waitpid(watchdog_pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

std::string Testbed::Namespace(int host) const { return prefix_ + "-h" + std::to_string(host); }

std::string Testbed::Address(int host) { return "10.77.0." + std::to_string(host + 1); }

LaunchPlan Testbed::Plan() const {
  LaunchPlan plan;
  for (int i = 0; i < spec_.hosts; ++i) {
    plan.prefix.push_back({"ip", "netns", "exec", Namespace(i)});
    plan.hostname.push_back(Address(i));
  }
  return plan;
}

int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
}

void AnnotateReport(json& report, const TestbedSpec* link, int cores,
                    const std::string& glibc_tunables) {
  const double bound_bytes = report["tensor"]["lower_bound_bytes_max"].get<double>();
  double bound_time = 0;
  const double rate = link ? link->rate_bits_per_s : 0;
  if (rate > 0) {
    bound_time = bound_bytes * 8 / rate;
    report["link"] = {{"hosts", link->hosts}, {"rate", link->rate}, {"rate_bits_per_s", rate},
                      {"burst_bytes", link->burst_bytes}};
    report["lower_bound_time_s"] = bound_time;
  }
  report["cores"] = cores;
  report["worker_glibc_tunables"] = glibc_tunables;
  double load[1] = {0};
  if (getloadavg(load, 1) == 1) report["load_average_1m"] = load[0];
  for (json& r : report["results"]) {
    if (r.contains("error")) continue;
    const double median = r["time_s_median"].get<double>();
    if (r.contains("bytes_recv_max") && bound_bytes > 0) {
      r["recv_over_bound"] = r["bytes_recv_max"].get<double>() / bound_bytes;
    }
    if (bound_time > 0) r["time_over_bound"] = median / bound_time;
    double cpu_sum = 0, cpu_max = 0;
    for (const auto& c : r["cpu_s_per_rank"]) {
      cpu_sum += c.get<double>();
      cpu_max = std::max(cpu_max, c.get<double>());
    }
    if (median <= 0) continue;
    // The least wall time this scheme's CPU work needs here: all ranks'
    // CPU seconds spread over the cores, and never less than the busiest
    // rank's own.
    const double cpu_floor = std::max(cpu_sum / cores, cpu_max);
    r["cpu_utilization"] = cpu_sum / (cores * median);
    r["cpu_max_rank_over_wall"] = cpu_max / median;
    r["cpu_floor_s"] = cpu_floor;
    if (rate > 0 && r.contains("wire_bytes_recv_max")) {
      // The least time the link needs for the bytes this scheme moved.
      const double wire =
          std::max(r["wire_bytes_recv_max"].get<double>(), r["wire_bytes_sent_max"].get<double>());
      r["network_floor_s"] = wire * 8 / rate;
      r["cpu_bound"] = cpu_floor > r["network_floor_s"].get<double>();
    } else {
      r["cpu_bound"] = cpu_floor > 0.7 * median;
    }
  }
}

std::vector<std::string> CpuWarnings(const json& report) {
  std::vector<std::string> out;
  for (const json& r : report["results"]) {
    if (!r.value("cpu_bound", false)) continue;
    char buf[400];
    const int n =
        std::snprintf(buf, sizeof buf,
                      "warning: %s is CPU-bound here: its CPU work needs >= %.1f ms on %d cores "
                      "(median wall %.1f ms",
                      r["scheme"].get<std::string>().c_str(), 1e3 * r["cpu_floor_s"].get<double>(),
                      report["cores"].get<int>(), 1e3 * r["time_s_median"].get<double>());
    std::string line(buf, static_cast<size_t>(std::max(0, n)));
    if (r.contains("network_floor_s")) {
      std::snprintf(buf, sizeof buf, ", its bytes need %.1f ms on the link",
                    1e3 * r["network_floor_s"].get<double>());
      line += buf;
    }
    out.push_back(line + ")");
  }
  if (report.value("load_average_1m", 0.0) > report["cores"].get<int>()) {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "warning: load average %.1f on %d cores: other processes shared the CPU, "
                  "timings are disturbed",
                  report["load_average_1m"].get<double>(), report["cores"].get<int>());
    out.push_back(buf);
  }
  return out;
}

std::vector<std::string> KnownPeers() {
  return {"torch-gloo-sparse", "torch-gloo-dense", "zen-process-group"};
}

std::vector<std::string> ParsePeers(const std::string& list) {
  if (list == "all") return KnownPeers();
  const std::vector<std::string> known = KnownPeers();
  std::vector<std::string> out = SplitList(list);
  for (const auto& p : out) {
    if (std::find(known.begin(), known.end(), p) == known.end()) {
      throw InvalidArgument("unknown peer '" + p +
                            "' (known: torch-gloo-sparse, torch-gloo-dense, zen-process-group)");
    }
  }
  return out;
}

namespace {

// The runner given, else tools/peers/torch_peer.py of the source tree (the
// tree the default trace path was compiled from).
std::string PeerRunnerPath(const std::string& given) {
  if (!given.empty()) return given;
  const std::filesystem::path trace(ZEN_DEFAULT_TRACE);
  const auto root = trace.parent_path().parent_path().parent_path();
  return (root / "tools" / "peers" / "torch_peer.py").string();
}

}  // namespace

std::vector<json> RunPeers(const PeerRun& run) {
  const std::string runner = PeerRunnerPath(run.runner);
  if (!std::filesystem::exists(runner)) {
    throw InvalidArgument("peer runner " + runner + " not found (set ZEN_TORCH_PEER)");
  }
  std::string peers;
  for (const auto& p : run.peers) peers += (peers.empty() ? "" : ",") + p;
  std::vector<std::vector<std::string>> argvs;
  for (int r = 0; r < run.world; ++r) {
    std::vector<std::string> argv;
    if (r < static_cast<int>(run.plan.prefix.size()))
      argv = run.plan.prefix[static_cast<size_t>(r)];
    argv.insert(argv.end(), {"env", "GLOO_SOCKET_IFNAME=" + (run.iface.empty() ? "lo" : run.iface),
                             "OMP_NUM_THREADS=1", run.python, runner});
    argv.insert(argv.end(), {"--rank",      std::to_string(r),
                             "--world",     std::to_string(run.world),
                             "--init",      "file://" + run.dir + "/peer-store",
                             "--trace",     run.trace_path,
                             "--tensor",    run.tensor,
                             "--peers",     peers,
                             "--iters",     std::to_string(run.iters),
                             "--warmup",    std::to_string(run.warmup),
                             "--timeout-s", std::to_string(run.timeout_s),
                             "--out",       run.dir + "/peer-r" + std::to_string(r) + ".json"});
    if (!run.iface.empty()) argv.insert(argv.end(), {"--iface", run.iface});
    argvs.push_back(std::move(argv));
  }
  if (SuperviseProcesses(argvs, "peer") != 0) {
    throw TransportError("the peer runs (" + peers + ") failed; see the messages above");
  }
  std::vector<std::vector<json>> by_rank;
  for (int r = 0; r < run.world; ++r) {
    const std::string path = run.dir + "/peer-r" + std::to_string(r) + ".json";
    std::ifstream in(path);
    if (!in) throw FormatError("peer rank " + std::to_string(r) + " wrote no result " + path);
    by_rank.push_back(json::parse(in));
    if (by_rank.back().size() != run.peers.size()) {
      throw FormatError("peer rank " + std::to_string(r) + " reported " +
                        std::to_string(by_rank.back().size()) + " results for " +
                        std::to_string(run.peers.size()) + " peers");
    }
  }
  std::vector<json> rows;
  for (size_t k = 0; k < run.peers.size(); ++k) {
    std::vector<json> ranks;
    for (const auto& r : by_rank) ranks.push_back(r[k]);
    rows.push_back(CombineRanks(ranks));
  }
  return rows;
}

}  // namespace zen::cli
