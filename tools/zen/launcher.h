// tools/zen/launcher.h — starts the N worker processes of a local
// `zen bench` run and supervises them.
//
// Each worker is this same binary with the caller's arguments plus
// `--rank R --rendezvous file:DIR`. A worker may be wrapped in a command
// prefix (the testbed runs worker i under `ip netns exec HOST_i`) and bound
// to its own address. The first worker to fail stops the run: the others
// are killed and the launcher returns non-zero, naming the rank and status.
//
// The workers die with the launcher, however it ends:
//   - every child asks the kernel for SIGKILL when its parent dies
//     (prctl(PR_SET_PDEATHSIG)), and exits at once if the parent is already
//     gone when it gets there;
//   - while a LauncherSignals object lives, SIGINT / SIGTERM / SIGHUP are
//     forwarded to every child (with SIGCONT, for stopped ones); the
//     supervisor then waits for them (SIGKILL after 5 s) and throws
//     Interrupted, so destructors run (temporary directories, testbed) and
//     main() dies of the same signal;
//   - when a worker fails, the others get SIGTERM and SIGCONT, then SIGKILL
//     after 5 s (kStopGrace): a stopped or hung worker is never waited for
//     forever;
//   - a TempDir is also removed by a small guard process when the launcher
//     is killed with SIGKILL (the guard sees its pipe from the launcher
//     close).
// Workers get the caller's environment unchanged: no allocator tuning is
// added, so the figures are what a user's job gets.
//
// Usage:
//   LauncherSignals signals;          // in the launcher only
//   TempDir dir;                      // removed on every way out
//   int rc = LaunchLocalWorkers(args, world, /*progress=*/false);
//   LauncherSignals::ThrowIfInterrupted();
#pragma once

#include <sys/types.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "tools/zen/commands.h"

namespace zen::cli {

// How long stopped workers get between SIGTERM and SIGKILL.
inline constexpr std::chrono::milliseconds kStopGrace{5000};

// The launcher got SIGINT / SIGTERM / SIGHUP; its children are stopped.
class Interrupted : public std::runtime_error {
 public:
  explicit Interrupted(int sig);
  int signal() const { return signal_; }

 private:
  int signal_;
};

// Installs the forwarding handlers of SIGINT, SIGTERM and SIGHUP for its
// lifetime (restoring the previous ones after). One at a time.
class LauncherSignals {
 public:
  LauncherSignals();
  ~LauncherSignals();
  LauncherSignals(const LauncherSignals&) = delete;
  LauncherSignals& operator=(const LauncherSignals&) = delete;

  // The signal received so far, 0 if none.
  static int Received();
  // Throws Interrupted if a signal was received.
  static void ThrowIfInterrupted();
};

// A fresh directory under $TMPDIR (else /tmp), removed with its contents
// when the object goes away, or by its guard process when this process is
// killed.
class TempDir {
 public:
  // A fresh directory under `base` (main passes $TMPDIR, else /tmp).
  explicit TempDir(const std::string& base = "/tmp");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int guard_fd_ = -1;
  pid_t guard_pid_ = -1;
};

struct LaunchPlan {
  std::vector<std::vector<std::string>> prefix;  // per rank, may be empty
  std::vector<std::string> hostname;             // per rank, empty: 127.0.0.1
  std::string tmp_base = "/tmp";                 // where the run's TempDir goes
};

int LaunchLocalWorkers(Args args, int world, bool progress, const LaunchPlan& plan = {});

// The same through MPI: one `mpirun -np N --oversubscribe zen bench ARGS`
// (plus --allow-run-as-root as root), supervised like a worker.
int LaunchMpiWorkers(Args args, int world);

// Starts one process per argv (rank = position) and waits for all; the first
// failure stops the rest and returns 1, naming `what` and the rank. Throws
// Interrupted after stopping them when the launcher got a signal. Stopping
// is SIGTERM (or the launcher's signal) and SIGCONT, then SIGKILL for any
// process still there after `grace`: a stopped or hung worker never makes
// the launcher wait forever.
int SuperviseProcesses(const std::vector<std::vector<std::string>>& argv_per_rank,
                       const std::string& what,
                       std::chrono::milliseconds grace = kStopGrace);

}  // namespace zen::cli
