// The launcher's supervisor against a stopped worker: when
// one worker fails, the others get SIGTERM, which stays pending on a
// SIGSTOPped process; the supervisor must escalate to SIGKILL after its
// grace period instead of waiting forever.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "tools/zen/launcher.h"

namespace zen::cli {
namespace {

using Clock = std::chrono::steady_clock;

// SuperviseProcesses on a thread, bounded: the result, or -1000 when it has
// not returned within `limit` (rank 0, whose pid is in `pidfile`, is then
// killed, so that the supervisor returns and the test can end).
int SuperviseWithin(const std::vector<std::vector<std::string>>& argvs,
                    std::chrono::milliseconds grace, std::chrono::seconds limit,
                    const std::string& pidfile, double* seconds) {
  auto result = std::async(std::launch::async, [&] {
    return SuperviseProcesses(argvs, "worker", grace);
  });
  const auto t0 = Clock::now();
  const bool ready = result.wait_for(limit) == std::future_status::ready;
  *seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!ready) {
    FILE* f = std::fopen(pidfile.c_str(), "r");
    int pid = 0;
    if (f && std::fscanf(f, "%d", &pid) == 1 && pid > 0) kill(pid, SIGKILL);
    if (f) std::fclose(f);
  }
  const int rc = result.get();
  std::remove(pidfile.c_str());
  return ready ? rc : -1000;
}

std::string PidFile() {
  return ::testing::TempDir() + "zen-stopped-" + std::to_string(getpid());
}

// Rank 0 ignores SIGTERM and stops itself (a worker stopped by a debugger or
// `kill -STOP`); rank 1 fails after 0.3 s. The run ends, naming rank 1, within
// the grace period plus a margin, and rank 0 is gone (killed).
TEST(LauncherStoppedWorker, EscalatesToSigkillAfterTheGracePeriod) {
  const std::string pidfile = PidFile();
  const std::vector<std::vector<std::string>> argvs = {
      {"/bin/sh", "-c", "echo $$ > '" + pidfile + "'; trap '' TERM; kill -STOP $$; exec sleep 120"},
      {"/bin/sh", "-c", "sleep 0.3; exit 3"},
  };
  double seconds = 0;
  const int rc = SuperviseWithin(argvs, std::chrono::milliseconds(1000), std::chrono::seconds(30),
                                 pidfile, &seconds);
  ASSERT_NE(rc, -1000) << "the supervisor still waits on the stopped worker after 30 s";
  EXPECT_EQ(rc, 1);
  EXPECT_LT(seconds, 0.3 + 1.0 + 3.0) << "grace 1 s";
  EXPECT_GE(seconds, 0.3 + 1.0 - 0.1) << "killed before its grace period";
}

// A stopped worker that does not ignore SIGTERM dies of it at once (it is
// continued so that the pending SIGTERM is delivered): no grace period spent.
TEST(LauncherStoppedWorker, ContinuesAStoppedWorkerSoItGetsSigterm) {
  const std::string pidfile = PidFile();
  const std::vector<std::vector<std::string>> argvs = {
      {"/bin/sh", "-c", "echo $$ > '" + pidfile + "'; kill -STOP $$; exec sleep 120"},
      {"/bin/sh", "-c", "sleep 0.3; exit 3"},
  };
  double seconds = 0;
  const int rc = SuperviseWithin(argvs, std::chrono::milliseconds(20000), std::chrono::seconds(15),
                                 pidfile, &seconds);
  ASSERT_NE(rc, -1000) << "the supervisor still waits on the stopped worker";
  EXPECT_EQ(rc, 1);
  EXPECT_LT(seconds, 5.0);
}

}  // namespace
}  // namespace zen::cli
