#include "tools/zen/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include "zen/core/error.h"

namespace zen::cli {
namespace {

// Signal state of the launcher process. A signal handler can only reach
// process-wide state; it is confined to this file, set only while a
// LauncherSignals object lives, and read by the supervisor.
constexpr int kMaxChildren = 4096;
volatile sig_atomic_t g_signal = 0;
volatile sig_atomic_t g_children[kMaxChildren] = {};  // pids, 0 = free slot
constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction g_previous[3];
bool g_installed = false;

void Forward(int sig) {
  if (g_signal == 0) g_signal = sig;
  for (int i = 0; i < kMaxChildren; ++i) {
    const pid_t pid = g_children[i];
    if (pid > 0) kill(pid, sig);
  }
}

void BlockForwarded(sigset_t* old) {
  sigset_t set;
  sigemptyset(&set);
  for (int s : kForwarded) sigaddset(&set, s);
  sigprocmask(SIG_BLOCK, &set, old);
}

void Track(pid_t pid) {
  for (int i = 0; i < kMaxChildren; ++i) {
    if (g_children[i] == 0) {
      g_children[i] = pid;
      return;
    }
  }
}

void Untrack(pid_t pid) {
  for (int i = 0; i < kMaxChildren; ++i) {
    if (g_children[i] == pid) g_children[i] = 0;
  }
}

std::string SelfExe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw InvalidArgument("cannot resolve /proc/self/exe: " + ec.message());
  return p.string();
}

// In a fresh child: default signal dispositions, and death with the parent.
void BindToParent(pid_t parent, const sigset_t& mask) {
  for (int s : kForwarded) signal(s, SIG_DFL);
  sigprocmask(SIG_SETMASK, &mask, nullptr);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) _exit(126);
  // The parent may have died between fork() and prctl(): then no signal
  // will come, and the child was re-parented.
  if (getppid() != parent) _exit(126);
}

pid_t Spawn(const std::vector<std::string>& argv) {
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  const pid_t parent = getpid();
  sigset_t old;
  BlockForwarded(&old);  // no forward between fork() and Track()
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    sigprocmask(SIG_SETMASK, &old, nullptr);
    throw InvalidArgument(std::string("fork failed: ") + std::strerror(err));
  }
  if (pid == 0) {
    BindToParent(parent, old);
    execvp(cargv[0], cargv.data());
    std::fprintf(stderr, "zen bench: cannot start %s: %s\n", cargv[0], std::strerror(errno));
    _exit(127);
  }
  Track(pid);
  sigprocmask(SIG_SETMASK, &old, nullptr);
  return pid;
}

std::string Status(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("signal ") + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

// Waits for every process in `rank_of` after a signal was forwarded:
// SIGKILL for those still running after `grace`.
void ReapAfterSignal(std::map<pid_t, int>& rank_of, std::chrono::milliseconds grace) {
  const auto deadline = std::chrono::steady_clock::now() + grace;
  bool killed = false;
  while (!rank_of.empty()) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      Untrack(pid);
      rank_of.erase(pid);
      continue;
    }
    if (pid < 0 && errno != EINTR) break;
    if (!killed && std::chrono::steady_clock::now() >= deadline) {
      for (const auto& [p, _] : rank_of) kill(p, SIGKILL);
      killed = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Sends `sig` to every process in `rank_of`, then SIGCONT (a stopped
// process keeps a SIGTERM pending until continued: a worker stopped by a
// debugger or SIGSTOP would otherwise be waited for forever), and reaps
// them, with SIGKILL for those still running after `grace` (a worker that
// ignores or handles the signal without exiting).
void StopAll(std::map<pid_t, int>& rank_of, int sig, std::chrono::milliseconds grace) {
  for (const auto& [p, _] : rank_of) {
    kill(p, sig);
    kill(p, SIGCONT);
  }
  ReapAfterSignal(rank_of, grace);
}

}  // namespace

Interrupted::Interrupted(int sig)
    : std::runtime_error(std::string("interrupted by ") + strsignal(sig) +
                         "; workers stopped, temporary files removed"),
      signal_(sig) {}

LauncherSignals::LauncherSignals() {
  if (g_installed) throw InvalidArgument("LauncherSignals: already installed");
  g_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = Forward;
  sigemptyset(&sa.sa_mask);
  for (int s : kForwarded) sigaddset(&sa.sa_mask, s);
  sa.sa_flags = 0;  // no SA_RESTART: waitpid() returns EINTR
  for (size_t i = 0; i < std::size(kForwarded); ++i) sigaction(kForwarded[i], &sa, &g_previous[i]);
  g_installed = true;
}

LauncherSignals::~LauncherSignals() {
  for (size_t i = 0; i < std::size(kForwarded); ++i) sigaction(kForwarded[i], &g_previous[i], nullptr);
  g_installed = false;
}

int LauncherSignals::Received() { return g_signal; }

void LauncherSignals::ThrowIfInterrupted() {
  if (g_signal != 0) throw Interrupted(g_signal);
}

TempDir::TempDir(const std::string& base) {
  std::string templ = (base.empty() ? std::string("/tmp") : base) + "/zen-bench-XXXXXX";
  if (!mkdtemp(templ.data())) {
    throw InvalidArgument("cannot create a temporary directory under " + templ + ": " +
                          std::strerror(errno));
  }
  path_ = templ;
  // The guard: blocks on a pipe whose only writer is this process, and
  // removes the directory when it reads end-of-file, i.e. when this process
  // is gone (even by SIGKILL) or the TempDir is destroyed.
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return;  // best effort: the destructor still removes it
  const pid_t pid = fork();
  if (pid == 0) {
    for (int s : kForwarded) signal(s, SIG_IGN);
    setpgid(0, 0);  // not in the launcher's process group (terminal signals)
    dup2(fds[0], STDIN_FILENO);
    const int null = open("/dev/null", O_WRONLY);
    if (null >= 0) {
      dup2(null, STDOUT_FILENO);
      dup2(null, STDERR_FILENO);
    }
    close_range(3, UINT_MAX, 0);  // holds no other pipe's writer
    char c;
    while (read(STDIN_FILENO, &c, 1) != 0) {
      if (errno != EINTR) break;
    }
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    _exit(0);
  }
  close(fds[0]);
  if (pid < 0) {
    close(fds[1]);
    return;
  }
  guard_fd_ = fds[1];
  guard_pid_ = pid;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
  if (guard_fd_ >= 0) close(guard_fd_);
  if (guard_pid_ > 0) {
    while (waitpid(guard_pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

int SuperviseProcesses(const std::vector<std::vector<std::string>>& argv_per_rank,
                       const std::string& what, std::chrono::milliseconds grace) {
  LauncherSignals::ThrowIfInterrupted();
  std::map<pid_t, int> rank_of;
  for (size_t r = 0; r < argv_per_rank.size(); ++r) {
    rank_of[Spawn(argv_per_rank[r])] = static_cast<int>(r);
    if (LauncherSignals::Received()) break;
  }
  int failed_rank = -1;
  std::string failure;
  while (!rank_of.empty()) {
    if (LauncherSignals::Received()) {
      StopAll(rank_of, LauncherSignals::Received(), grace);
      break;
    }
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    Untrack(pid);
    auto it = rank_of.find(pid);
    if (it == rank_of.end()) continue;
    const int rank = it->second;
    rank_of.erase(it);
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) && failed_rank < 0) {
      failed_rank = rank;
      failure = Status(status);
      StopAll(rank_of, SIGTERM, grace);
    }
  }
  LauncherSignals::ThrowIfInterrupted();
  if (failed_rank >= 0) {
    std::fprintf(stderr, "zen bench: %s rank %d failed (%s); the others were stopped\n",
                 what.c_str(), failed_rank, failure.c_str());
    return 1;
  }
  return 0;
}

int LaunchLocalWorkers(Args args, int world, bool progress, const LaunchPlan& plan) {
  TempDir dir(plan.tmp_base);
  const std::string self = SelfExe();
  std::vector<std::vector<std::string>> argvs;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> argv;
    if (r < static_cast<int>(plan.prefix.size())) argv = plan.prefix[static_cast<size_t>(r)];
    argv.insert(argv.end(), {self, "bench"});
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--rank", std::to_string(r), "--rendezvous", "file:" + dir.path() + "/store"});
    if (r < static_cast<int>(plan.hostname.size()) && !plan.hostname[static_cast<size_t>(r)].empty()) {
      argv.insert(argv.end(), {"--hostname", plan.hostname[static_cast<size_t>(r)]});
    }
    if (r == 0 && progress) argv.push_back("--progress");
    argvs.push_back(std::move(argv));
  }
  return SuperviseProcesses(argvs, "worker");
}

int LaunchMpiWorkers(Args args, int world) {
  std::vector<std::string> argv = {"mpirun", "-np", std::to_string(world), "--oversubscribe"};
  if (geteuid() == 0) argv.push_back("--allow-run-as-root");
  argv.insert(argv.end(), {SelfExe(), "bench"});
  argv.insert(argv.end(), args.begin(), args.end());
  return SuperviseProcesses({argv}, "mpirun");
}

}  // namespace zen::cli
