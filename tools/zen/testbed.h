// tools/zen/testbed.h — an N-host network on one machine for `zen bench
// --testbed NxRATE`: network namespaces on one bridge, each link shaped to
// RATE both ways with `tc tbf`, torn down when the Testbed object goes away
// (and by a watchdog process if this one dies first).
//
// This is the one implementation of the testbed: `zen testbed up/down/status`
// (testbed_cmd.cc) and scripts/testbed, which runs it, build the same
// layout (docs/performance.md, "Testbed"): host i is namespace <prefix>-h<i>
// with loopback up and one interface `zentb0` = 10.77.0.<i+1>/24; its veth
// peer <prefix>-v<i> sits on the bridge <prefix>-br. Every name starts with
// "zentb", so nothing else is touched.
//
// Usage:
//   zen::cli::TestbedSpec spec = zen::cli::ParseTestbedSpec("8x500mbit");
//   zen::cli::Testbed bed(spec);            // root + iproute2, else InvalidArgument
//   LaunchPlan plan = bed.Plan();           // ip netns exec <ns> ..., bind 10.77.0.<i+1>
//   ...                                     // run workers
//   // ~Testbed removes namespaces, veths and bridge.
//
// The report helpers attach what the testbed knows to a `zen bench` report:
// the link rate, the time lower bound, ratios to the bound and a CPU check.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "tools/zen/launcher.h"

namespace zen::cli {

// The interface every host has inside its namespace; workers read its
// counters (/sys/class/net/zentb0/statistics) to measure bytes on the wire.
inline constexpr const char* kTestbedInterface = "zentb0";

struct TestbedSpec {
  int hosts = 0;
  std::string rate;  // tc syntax, e.g. "500mbit"
  double rate_bits_per_s = 0;
  // The tbf bucket in bytes; 0 means the default, max(128 KiB, 2 ms at the
  // rate). After an idle gap a message up to the bucket's size passes at the
  // veth's speed, not the rate: 124 KB crosses a default 500 Mbit/s link in
  // about 0.2 ms where the rate needs 2 ms. A small bucket (32k) shapes
  // small messages too, at some cost in bulk throughput (docs/performance.md,
  // "Testbed").
  int64_t burst_bytes = 0;
};

// "8x500mbit" -> {8, "500mbit", 5e8, 0}; "8x500mbit,burst=32k" sets the
// bucket (bytes, or k/m for KiB/MiB, at least 2048). InvalidArgument naming
// the bad part.
TestbedSpec ParseTestbedSpec(std::string_view text);
// "500mbit" / "2gbit" / "100kbit" / "1000bit" -> bits per second.
double ParseRateBits(std::string_view rate);

// InvalidArgument naming `what` when not root or iproute2 is missing.
void CheckTestbedPrivileges(std::string_view what);

// "zentb" + tag; InvalidArgument unless tag is at most 4 of [0-9a-z].
std::string TestbedPrefix(std::string_view tag);

// Builds the testbed under `prefix` (replacing one of that prefix), or
// throws TransportError naming the failed command after removing what was
// made. Stays up until TestbedDown(prefix). Callers check privileges.
void TestbedUp(const std::string& prefix, const TestbedSpec& spec);

// The zentb namespaces and the shaping of every zentb link, one per line.
std::string TestbedStatus();

class Testbed {
 public:
  // Brings the testbed up (TestbedUp) under a fresh prefix zentb<tag>. Throws
  // InvalidArgument when not root or iproute2 is missing, TransportError
  // when a command fails (after removing what was made).
  explicit Testbed(const TestbedSpec& spec);
  ~Testbed();
  Testbed(const Testbed&) = delete;
  Testbed& operator=(const Testbed&) = delete;

  const TestbedSpec& spec() const { return spec_; }
  const std::string& prefix() const { return prefix_; }
  std::string Namespace(int host) const;
  static std::string Address(int host);  // 10.77.0.<host+1>

  // Worker i runs under `ip netns exec <ns_i>` and binds Address(i).
  LaunchPlan Plan() const;

 private:
  void StartWatchdog();

  TestbedSpec spec_;
  std::string prefix_;
  int watchdog_fd_ = -1;
  int watchdog_pid_ = -1;
};

// Removes every namespace and link whose name starts with prefix + "-"
// (TestbedDown) or with `start` (RemoveTestbedObjects("zentb"): every
// testbed). Never throw; safe to call on a testbed that is half built or gone.
void TestbedDown(const std::string& prefix);
void RemoveTestbedObjects(const std::string& start);

// Adds to a `zen bench` report: "link" (hosts, rate, bits/s) when link is
// given, "lower_bound_time_s" = lower_bound_bytes_max x 8 / rate, the load
// average, and per result "recv_over_bound", "time_over_bound" and the CPU
// check: "cpu_floor_s" = max(sum of per-rank CPU seconds / cores, busiest
// rank's), "network_floor_s" = the scheme's wire bytes (max of sent and
// received over ranks) over the rate, and "cpu_bound" when the CPU floor
// exceeds the network floor (on loopback: 0.7 x the median time).
// cores: CPUs this process may use.
// glibc_tunables: the caller's GLIBC_TUNABLES (zen sets none), recorded as
// worker_glibc_tunables.
void AnnotateReport(nlohmann::json& report, const TestbedSpec* link, int cores,
                    const std::string& glibc_tunables);

// The warnings AnnotateReport's CPU check implies, one line per scheme.
std::vector<std::string> CpuWarnings(const nlohmann::json& report);

// CPUs this process may run on (sched_getaffinity), at least 1.
int UsableCores();

// ---- Peers: other libraries' collectives on the same hosts and links ----
// tools/peers/torch_peer.py (PyTorch's dist.all_reduce over Gloo) runs one
// process per host with the same warm-up, iterations, barrier and check
// against the dense reference; each peer becomes one report row.

// The peers there are: torch-gloo-sparse, torch-gloo-dense, zen-process-group.
std::vector<std::string> KnownPeers();
// "all", "" (none) or a comma-separated list; InvalidArgument naming an
// unknown peer.
std::vector<std::string> ParsePeers(const std::string& list);

struct PeerRun {
  std::vector<std::string> peers;
  int world = 0;
  int iters = 5, warmup = 1;
  double timeout_s = 60;
  std::string trace_path, tensor;  // the workload, written as a zen-trace
  std::string dir;                 // scratch: store and per-rank results
  std::string iface;               // testbed interface (wire counters), or "" (loopback)
  LaunchPlan plan;                 // the zen workers' hosts
  std::string python = "/usr/bin/python3";  // $ZEN_PYTHON (main's environment)
  std::string runner;  // $ZEN_TORCH_PEER; empty: tools/peers/torch_peer.py of the source tree
};

// Runs the peers and returns their report rows (CombineRanks format).
// TransportError when a peer process fails.
std::vector<nlohmann::json> RunPeers(const PeerRun& run);

}  // namespace zen::cli
