// Two jobs on one rendezvous (issue 41, W1) with real processes
// (zen_fault_worker): job A (every value 1) and job B (every value 100), each
// of world 2, given the same file:DIR and no job id, their ranks started in a
// chosen order 0.3 s apart. No rank may return a sum that mixes the jobs (a
// worker checks its own sum against world x its value and exits 5 when it
// differs). Where the protocol can see the second job (its rank 0 claims a
// generation while the first job's is still forming) the rank 0s must fail
// at once, naming the directory and "?job=ID", and the other ranks must fail
// too, never succeed with a mixed sum. rendezvous.h documents the one order
// that no protocol can see without a job id.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Proc {
  pid_t pid = -1;
  std::string log;
  std::string name;
};

Proc Start(const std::vector<std::string>& args, const std::string& log, const std::string& name) {
  std::vector<std::string> argv = {ZEN_FAULT_WORKER};
  argv.insert(argv.end(), args.begin(), args.end());
  Proc p{-1, log, name};
  p.pid = ::fork();
  if (p.pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, STDERR_FILENO);
    ::dup2(fd, STDOUT_FILENO);
    std::vector<char*> c;
    for (const auto& a : argv) c.push_back(const_cast<char*>(a.c_str()));
    c.push_back(nullptr);
    ::execv(c[0], c.data());
    _exit(127);
  }
  return p;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// Exit code (-1 when killed at `limit`) and seconds from `since`.
std::pair<int, double> Join(const Proc& p, Clock::time_point since, std::chrono::seconds limit) {
  int status = 0;
  for (;;) {
    if (::waitpid(p.pid, &status, WNOHANG) == p.pid) break;
    if (Clock::now() - since > limit) {
      ::kill(p.pid, SIGKILL);
      ::waitpid(p.pid, &status, 0);
      return {-1, std::chrono::duration<double>(Clock::now() - since).count()};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1,
          std::chrono::duration<double>(Clock::now() - since).count()};
}

struct Outcome {
  int code = 0;
  double seconds = 0;  // from this process's start
  std::string log;
};

// Starts the four ranks in `order` ("A0", "B1", ...) `gap` apart, all on
// `url`, and returns each one's outcome by name.
std::vector<std::pair<std::string, Outcome>> RunTwoJobs(const std::vector<std::string>& order,
                                                        const std::string& url,
                                                        const std::string& logs, int timeout_ms,
                                                        std::chrono::milliseconds gap) {
  const std::string world = std::to_string(order.size() / 2);
  std::vector<Proc> procs;
  std::vector<Clock::time_point> started;
  for (const std::string& who : order) {
    const bool a = who[0] == 'A';
    const std::vector<std::string> args = {
        "--rank",     who.substr(1), "--world", world, "--store", url, "--timeout-ms",
        std::to_string(timeout_ms), "--rows", "4", "--width", "1", "--calls", "1",
        "--scheme", "agsparse", "--value", a ? "1" : "100"};
    started.push_back(Clock::now());
    procs.push_back(Start(args, logs + "/" + who + ".log", who));
    std::this_thread::sleep_for(gap);
  }
  std::vector<std::pair<std::string, Outcome>> out;
  for (size_t i = 0; i < procs.size(); ++i) {
    const auto [code, seconds] = Join(procs[i], started[i], std::chrono::seconds(60));
    out.push_back({procs[i].name, Outcome{code, seconds, Slurp(procs[i].log)}});
  }
  return out;
}

class TwoJobsTest : public ::testing::TestWithParam<std::vector<std::string>> {};

std::string Name(const ::testing::TestParamInfo<std::vector<std::string>>& info) {
  std::string n;
  for (const auto& s : info.param) n += s;
  return n;
}

// The orders in which the second job's rank 0 claims its generation while
// the first job's is still forming, or a rank finds its slot in a forming
// generation taken. The order first.
TEST_P(TwoJobsTest, ConcurrentJobsOnOneDirectoryFailAtOnceAndNeverMix) {
  const fs::path dir = fs::temp_directory_path() / ("zen-twojobs-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string store = (dir / "store").string();
  constexpr int kTimeoutMs = 5000;
  const auto outcomes =
      RunTwoJobs(GetParam(), "file:" + store, dir.string(), kTimeoutMs, std::chrono::milliseconds(300));
  for (const auto& [who, o] : outcomes) {
    std::printf("%s: exit %d after %.2f s: %s", who.c_str(), o.code, o.seconds,
                o.log.substr(o.log.rfind('\n', o.log.size() - 2) + 1).c_str());
    EXPECT_NE(o.code, 5) << who << " returned a sum that mixes the jobs: " << o.log;
    EXPECT_NE(o.code, 0) << who << " succeeded although another job shares its directory: "
                         << o.log;
    EXPECT_NE(o.code, -1) << who << " did not end: " << o.log;
    if (who[1] == '0') {
      // The rank 0s see the other job and fail well before the timeout.
      EXPECT_LT(o.seconds, kTimeoutMs / 1000.0 / 2) << who << ": " << o.log;
      EXPECT_NE(o.log.find("?job=ID"), std::string::npos) << who << ": " << o.log;
      EXPECT_NE(o.log.find(store), std::string::npos) << who << ": " << o.log;
    }
  }
  fs::remove_all(dir);
}

// The last order (world 3) is seen through the duplicate slot: B's rank 1
// joins A's forming generation, and A's rank 1 finds its slot taken.
INSTANTIATE_TEST_SUITE_P(Orders, TwoJobsTest,
                         ::testing::Values(std::vector<std::string>{"A0", "B0", "A1", "B1"},
                                           std::vector<std::string>{"A0", "B0", "B1", "A1"},
                                           std::vector<std::string>{"B0", "A0", "A1", "B1"},
                                           std::vector<std::string>{"A0", "B1", "A1", "A2", "B0",
                                                                    "B2"}),
                         Name);

// Jobs that do not overlap in time (the first is complete before the second
// starts) both succeed with their own sums, in either order of the second
// job's ranks: a rerun in the same directory stays legal.
TEST(TwoJobsSequentialTest, AJobAfterACompleteOneSucceeds) {
  const fs::path dir = fs::temp_directory_path() / ("zen-seqjobs-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string url = "file:" + (dir / "store").string();
  for (const auto& order : {std::vector<std::string>{"A0", "A1", "B0", "B1"},
                            std::vector<std::string>{"A0", "A1", "B1", "B0"}}) {
    const auto outcomes = RunTwoJobs(order, url, dir.string(), 10000, std::chrono::milliseconds(300));
    for (const auto& [who, o] : outcomes) {
      EXPECT_EQ(o.code, 0) << who << ": " << o.log;
      EXPECT_NE(o.log.find(who[0] == 'A' ? "sum 2\n" : "sum 200\n"), std::string::npos)
          << who << ": " << o.log;
    }
  }
  fs::remove_all(dir);
}

// Each job with its own ?job=ID shares the directory safely, whatever the
// order of starts.
TEST(TwoJobsSequentialTest, DistinctJobIdsShareADirectory) {
  const fs::path dir = fs::temp_directory_path() / ("zen-idjobs-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string store = (dir / "store").string();
  std::vector<Proc> procs;
  for (const std::string who : {"A0", "B1", "B0", "A1"}) {
    const bool a = who[0] == 'A';
    procs.push_back(Start({"--rank", who.substr(1), "--world", "2", "--store",
                           "file:" + store + (a ? "?job=a" : "?job=b"), "--timeout-ms", "10000",
                           "--rows", "4", "--width", "1", "--calls", "1", "--scheme", "agsparse",
                           "--value", a ? "1" : "100"},
                          dir.string() + "/" + who + ".log", who));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  for (const Proc& p : procs) {
    const auto [code, seconds] = Join(p, Clock::now(), std::chrono::seconds(60));
    const std::string log = Slurp(p.log);
    EXPECT_EQ(code, 0) << p.name << ": " << log;
    EXPECT_NE(log.find(p.name[0] == 'A' ? "sum 2\n" : "sum 200\n"), std::string::npos) << log;
  }
  fs::remove_all(dir);
}

}  // namespace
