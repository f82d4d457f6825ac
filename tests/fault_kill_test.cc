// A peer SIGKILLed in the middle of a synchronization (during ZEN's push,
// during its pull, during agsparse's allgather), with real processes over
// Gloo TCP: every surviving rank must raise TransportError, and exit, within
// the configured timeout plus 5 s of the death. Nothing may hang.
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
#include <map>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

struct Ended {
  int status = 0;
  Clock::time_point at;
  std::string log;
};

pid_t Spawn(const std::vector<std::string>& argv, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, STDERR_FILENO);
    ::dup2(fd, STDOUT_FILENO);
    std::vector<char*> c;
    for (const auto& a : argv) c.push_back(const_cast<char*>(a.c_str()));
    c.push_back(nullptr);
    ::execv(c[0], c.data());
    _exit(127);
  }
  return pid;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// Runs `world` workers, rank `victim` with --kill-at phase; returns how each
// ended. A watchdog kills everything after `limit` so the test cannot hang.
std::vector<Ended> RunJob(const std::string& scheme, int world, int victim,
                          const std::string& phase, int timeout_ms, std::chrono::seconds limit) {
  const fs::path dir = fs::temp_directory_path() /
                       ("zen-fault-" + std::to_string(::getpid()) + "-" + scheme + "-" + phase);
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::map<pid_t, int> rank_of;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> argv = {ZEN_FAULT_WORKER,
                                     "--rank",
                                     std::to_string(r),
                                     "--world",
                                     std::to_string(world),
                                     "--store",
                                     (dir / "store").string(),
                                     "--scheme",
                                     scheme,
                                     "--timeout-ms",
                                     std::to_string(timeout_ms)};
    if (r == victim) argv.insert(argv.end(), {"--kill-at", phase});
    rank_of[Spawn(argv, (dir / ("rank" + std::to_string(r) + ".log")).string())] = r;
  }
  std::vector<Ended> ended(static_cast<size_t>(world));
  const auto deadline = Clock::now() + limit;
  while (!rank_of.empty()) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0 && rank_of.count(pid)) {
      const int r = rank_of[pid];
      ended[static_cast<size_t>(r)] = {status, Clock::now(), {}};
      rank_of.erase(pid);
      continue;
    }
    if (Clock::now() > deadline) {
      for (const auto& [p, r] : rank_of) {
        ADD_FAILURE() << "rank " << r << " still running after " << limit.count() << " s: a hang";
        ::kill(p, SIGKILL);
      }
      limit = std::chrono::seconds(1000000);  // reap the killed ones
    }
    ::usleep(2000);
  }
  for (int r = 0; r < world; ++r) {
    ended[static_cast<size_t>(r)].log =
        Slurp((dir / ("rank" + std::to_string(r) + ".log")).string());
  }
  fs::remove_all(dir);
  return ended;
}

void ExpectSurvivorsFailFast(const std::string& scheme, const std::string& phase) {
  const int world = 4, victim = 2, timeout_ms = 3000;
  const std::vector<Ended> e =
      RunJob(scheme, world, victim, phase, timeout_ms, std::chrono::seconds(60));
  const Ended& v = e[victim];
  ASSERT_TRUE(WIFSIGNALED(v.status) && WTERMSIG(v.status) == SIGKILL)
      << "the victim was not killed at " << phase << ": " << v.log;
  for (int r = 0; r < world; ++r) {
    if (r == victim) continue;
    const Ended& s = e[static_cast<size_t>(r)];
    const double after = std::chrono::duration<double>(s.at - v.at).count();
    EXPECT_TRUE(WIFEXITED(s.status) && WEXITSTATUS(s.status) == 3)
        << "rank " << r << " did not end with TransportError: " << s.log;
    EXPECT_NE(s.log.find("TransportError after"), std::string::npos) << s.log;
    EXPECT_LE(after, timeout_ms / 1000.0 + 5) << "rank " << r << ": " << s.log;
    std::printf("%s, kill at %s: rank %d raised TransportError %.2f s after the death\n",
                scheme.c_str(), phase.c_str(), r, after);
  }
}

TEST(FaultKillTest, PeerKilledDuringZenPush) { ExpectSurvivorsFailFast("zen", "push"); }
TEST(FaultKillTest, PeerKilledDuringZenPull) { ExpectSurvivorsFailFast("zen", "pull"); }
TEST(FaultKillTest, PeerKilledDuringAgsparseAllgather) {
  ExpectSurvivorsFailFast("agsparse", "push");
}

}  // namespace
