#include "tools/zen/launcher.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>

#include "zen/core/error.h"

namespace zen::cli {
namespace {

std::string SelfExe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw InvalidArgument("cannot resolve /proc/self/exe: " + ec.message());
  return p.string();
}

pid_t Spawn(const std::vector<std::string>& argv) {
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw InvalidArgument(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    execvp(cargv[0], cargv.data());
    std::fprintf(stderr, "zen bench: cannot start %s: %s\n", cargv[0], std::strerror(errno));
    _exit(127);
  }
  return pid;
}

std::string Status(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("signal ") + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

}  // namespace

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string templ = std::string(base && *base ? base : "/tmp") + "/zen-bench-XXXXXX";
  if (!mkdtemp(templ.data())) {
    throw InvalidArgument("cannot create a temporary directory under " + templ + ": " +
                          std::strerror(errno));
  }
  path_ = templ;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string WorkerMallocTuning() {
  if (const char* mine = std::getenv("GLIBC_TUNABLES")) return mine;
  if (std::getenv("MALLOC_TRIM_THRESHOLD_") || std::getenv("MALLOC_MMAP_THRESHOLD_")) return "";
  // Measured (docs/performance.md, "Allocator"): with glibc's defaults a
  // worker returns freed buffers to the kernel after every sync and faults
  // them back in on the next, which doubled every scheme's time on 8 ranks.
  const char* tuned = "glibc.malloc.trim_threshold=268435456:glibc.malloc.mmap_threshold=67108864";
  setenv("GLIBC_TUNABLES", tuned, /*overwrite=*/0);
  return tuned;
}

int SuperviseProcesses(const std::vector<std::vector<std::string>>& argv_per_rank,
                       const std::string& what) {
  WorkerMallocTuning();
  std::map<pid_t, int> rank_of;
  for (size_t r = 0; r < argv_per_rank.size(); ++r) {
    rank_of[Spawn(argv_per_rank[r])] = static_cast<int>(r);
  }
  int failed_rank = -1;
  std::string failure;
  while (!rank_of.empty()) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    auto it = rank_of.find(pid);
    if (it == rank_of.end()) continue;
    const int rank = it->second;
    rank_of.erase(it);
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) && failed_rank < 0) {
      failed_rank = rank;
      failure = Status(status);
      for (const auto& [other, _] : rank_of) kill(other, SIGTERM);
    }
  }
  if (failed_rank >= 0) {
    std::fprintf(stderr, "zen bench: %s rank %d failed (%s); the others were stopped\n",
                 what.c_str(), failed_rank, failure.c_str());
    return 1;
  }
  return 0;
}

int LaunchLocalWorkers(Args args, int world, bool progress, const LaunchPlan& plan) {
  TempDir dir;
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

}  // namespace zen::cli
