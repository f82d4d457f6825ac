// Rendezvous failures seen by a user of `zen bench` (a real process): a rank
// that never shows up, and a Redis server that cannot be reached, must end
// the worker within the timeout plus 5 s with a message that says what was
// waited for and for how long.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

namespace {

using Clock = std::chrono::steady_clock;

struct Result {
  int status = 0;
  double seconds = 0;
  std::string output;
};

Result RunBench(const std::string& args) {
  const auto start = Clock::now();
  const std::string cmd = std::string(ZEN_CLI) + " bench " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  Result r;
  std::array<char, 4096> buf;
  while (p && std::fgets(buf.data(), buf.size(), p)) r.output += buf.data();
  r.status = p ? ::pclose(p) : -1;
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

const char* kWork =
    " --schemes agsparse --synthetic zipf:rows=1000,width=2,density=0.01 --iters 1 "
    "--quiet --timeout-s 1";

TEST(FaultRendezvousTest, MissingRankNamesWhatWasAwaitedAndForHowLong) {
  const std::string dir =
      std::filesystem::temp_directory_path() / ("zen-rdv-" + std::to_string(::getpid()));
  const Result r = RunBench("--rank 0 --world 2 --rendezvous file:" + dir + kWork);
  std::filesystem::remove_all(dir);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_LE(r.seconds, 1 + 5) << r.output;
  EXPECT_NE(r.output.find("rendezvous"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("timeout 1000 ms"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1"), std::string::npos) << r.output;
  std::printf("missing rank: exit after %.2f s: %s", r.seconds, r.output.c_str());
}

TEST(FaultRendezvousTest, UnreachableRedisNamesTheAddressAndTheWait) {
  // Port 1 on loopback: nothing listens there (connection refused).
  const Result r =
      RunBench(std::string("--rank 0 --world 2 --rendezvous redis://127.0.0.1:1") + kWork);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_LE(r.seconds, 1 + 5) << r.output;
  if (r.output.find("no Redis support") != std::string::npos)
    GTEST_SKIP() << "built without hiredis";
  EXPECT_NE(r.output.find("Redis"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("127.0.0.1:1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("timeout 1000 ms"), std::string::npos) << r.output;
  std::printf("unreachable redis: exit after %.2f s: %s", r.seconds, r.output.c_str());
}

}  // namespace
