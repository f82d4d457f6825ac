// Rendezvous failures seen by a user of `zen bench` (a real process): a rank
// that never shows up, and a Redis server that cannot be reached, must end
// the worker within the timeout plus 5 s with a message that says what was
// waited for and for how long.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <fstream>
#include <thread>
#include <utility>
#include <vector>
#include <chrono>
#include <cstdio>
#include <cstring>
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

// ---- issue 13.3 and 13.6 with real worker processes (zen_fault_worker) ----
namespace {

namespace fs = std::filesystem;

struct Worker {
  pid_t pid = -1;
  std::string log;
};

Worker StartWorker(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> argv = {ZEN_FAULT_WORKER};
  argv.insert(argv.end(), args.begin(), args.end());
  Worker w;
  w.log = log;
  w.pid = ::fork();
  if (w.pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, STDERR_FILENO);
    ::dup2(fd, STDOUT_FILENO);
    std::vector<char*> c;
    for (const auto& a : argv) c.push_back(const_cast<char*>(a.c_str()));
    c.push_back(nullptr);
    ::execv(c[0], c.data());
    _exit(127);
  }
  return w;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// Waits for the worker (at most `limit`, then SIGKILL); returns the exit
// code (-1 when killed) and the seconds waited.
std::pair<int, double> Join(const Worker& w, std::chrono::seconds limit) {
  const auto start = Clock::now();
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(w.pid, &status, WNOHANG);
    if (r == w.pid) break;
    if (Clock::now() - start > limit) {
      ::kill(w.pid, SIGKILL);
      ::waitpid(w.pid, &status, 0);
      return {-1, std::chrono::duration<double>(Clock::now() - start).count()};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1,
          std::chrono::duration<double>(Clock::now() - start).count()};
}

void Kill(const Worker& w) {
  ::kill(w.pid, SIGKILL);
  int status = 0;
  ::waitpid(w.pid, &status, 0);
}

class TempDir {
 public:
  explicit TempDir(const std::string& what)
      : path_(fs::temp_directory_path() /
              ("zen-rdvp-" + what + "-" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string path() const { return path_.string(); }

 private:
  fs::path path_;
};

const std::vector<std::string> kSmall = {"--rows", "1000", "--width", "2", "--calls", "1",
                                         "--scheme", "agsparse"};

std::vector<std::string> Args(int rank, int world, const std::string& store, int timeout_ms,
                              const std::string& hostname = "127.0.0.1") {
  std::vector<std::string> a = {"--rank",     std::to_string(rank),       "--world",
                                std::to_string(world), "--store",     store,
                                "--timeout-ms", std::to_string(timeout_ms), "--hostname",
                                hostname};
  a.insert(a.end(), kSmall.begin(), kSmall.end());
  return a;
}

// Rank 0 (bound to 127.0.0.2, so rank 1 on 127.0.0.1 accepts the pair)
// publishes its address and is stopped with SIGSTOP. With Gloo's own
// connect, rank 1 then waited 5x its timeout (10 s at 2 s); now it ends
// within the timeout plus 5 s, naming rank 0.
TEST(FaultRendezvousTest, StoppedPeerEndsTheWaitWithinTheTimeout) {
  TempDir dir("stopped");
  const Worker peer = StartWorker(Args(0, 2, dir.path(), 30000, "127.0.0.2"), dir.path() + "/0.log");
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // it has published
  ::kill(peer.pid, SIGSTOP);
  const Worker w = StartWorker(Args(1, 2, dir.path(), 2000), dir.path() + "/1.log");
  const auto [code, seconds] = Join(w, std::chrono::seconds(30));
  Kill(peer);
  const std::string log = Slurp(w.log);
  EXPECT_EQ(code, 3) << log;  // TransportError
  EXPECT_LE(seconds, 2 + 5) << log;
  EXPECT_NE(log.find("rank 0"), std::string::npos) << log;
  std::printf("stopped peer: rank 1 exit after %.2f s\n", seconds);
}

// The same, with rank 1 stopped the moment its address is in the store (it
// has published, rank 0 has not connected yet).
TEST(FaultRendezvousTest, PeerStoppedRightAfterPublishingEndsTheWait) {
  TempDir dir("published");
  const Worker w = StartWorker(Args(0, 2, dir.path(), 2000), dir.path() + "/0.log");
  const Worker peer = StartWorker(Args(1, 2, dir.path(), 30000, "127.0.0.2"), dir.path() + "/1.log");
  const std::string key = dir.path() + "/fault~0~addr~1";
  const auto t0 = Clock::now();
  while (!fs::exists(key) && Clock::now() - t0 < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  ::kill(peer.pid, SIGSTOP);
  const auto [code, seconds] = Join(w, std::chrono::seconds(30));
  Kill(peer);
  const std::string log = Slurp(w.log);
  EXPECT_EQ(code, 3) << log;
  EXPECT_LE(seconds, 2 + 5) << log;
  std::printf("peer stopped after publishing: rank 0 exit after %.2f s\n", seconds);
}

// Issue 13.6: --world 2 against --world 3: both name both world sizes
// (was "sizeof(impl_) == bytes.size(). 136 vs 204").
TEST(FaultRendezvousTest, WorldMismatchNamesBothSizes) {
  TempDir dir("world");
  const Worker a = StartWorker(Args(0, 2, dir.path(), 3000), dir.path() + "/0.log");
  const Worker b = StartWorker(Args(1, 3, dir.path(), 3000), dir.path() + "/1.log");
  const auto ra = Join(a, std::chrono::seconds(30));
  const auto rb = Join(b, std::chrono::seconds(30));
  for (const auto& [r, w] : {std::pair{ra, a}, std::pair{rb, b}}) {
    const std::string log = Slurp(w.log);
    EXPECT_EQ(r.first, 4) << log;  // a zen error other than TransportError
    EXPECT_NE(log.find("world size 2"), std::string::npos) << log;
    EXPECT_NE(log.find("world size 3"), std::string::npos) << log;
    EXPECT_LE(r.second, 3 + 5) << log;
  }
}

// Issue 17 and 13.6: two runs in one file: directory both succeed (the
// second never reads the first one's keys), and the directory zen created
// is 0700 with 0600 key files.
TEST(FaultRendezvousTest, RerunInTheSameDirectoryAndPrivateFiles) {
  TempDir dir("rerun");
  const std::string store = dir.path() + "/created";
  for (int run = 0; run < 2; ++run) {
    const Worker a = StartWorker(Args(0, 2, store, 10000), dir.path() + "/0.log");
    const Worker b = StartWorker(Args(1, 2, store, 10000), dir.path() + "/1.log");
    EXPECT_EQ(Join(a, std::chrono::seconds(30)).first, 0) << Slurp(dir.path() + "/0.log");
    EXPECT_EQ(Join(b, std::chrono::seconds(30)).first, 0) << Slurp(dir.path() + "/1.log");
  }
  EXPECT_EQ(fs::status(store).permissions() & fs::perms::all, fs::perms::owner_all);
  int files = 0;
  for (const auto& f : fs::directory_iterator(store)) {
    ++files;
    EXPECT_EQ(f.status().permissions() & fs::perms::all,
              fs::perms::owner_read | fs::perms::owner_write)
        << f.path();
  }
  EXPECT_GE(files, 8);
}

// Issue 13.3: a stranger connects to rank 0's listening port for rank 1
// (read from rank 0's published value) before rank 1 does, and holds the
// connection without a byte. Both ranks still end within the timeout plus
// 5 s. The value is parsed here independently of zen: 16-byte header
// ("ZRV1", world, rank, address size), then a sockaddr_in per peer.
TEST(FaultRendezvousTest, HostileFirstConnectionEndsWithinTheTimeout) {
  TempDir dir("hostile");
  const Worker w0 = StartWorker(Args(0, 2, dir.path(), 2000), dir.path() + "/0.log");
  const std::string key = dir.path() + "/fault~0~addr~0";
  const auto t0 = Clock::now();
  while (!fs::exists(key) && Clock::now() - t0 < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const std::string value = Slurp(key);
  ASSERT_GE(value.size(), 16u + 16u) << "no value published";
  ASSERT_EQ(value.substr(0, 4), "ZRV1");
  sockaddr_in target{};
  std::memcpy(&target, value.data() + 16, sizeof(target));
  ASSERT_EQ(target.sin_family, AF_INET);
  const int stranger = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(::connect(stranger, reinterpret_cast<sockaddr*>(&target), sizeof(target)), 0);
  const Worker w1 = StartWorker(Args(1, 2, dir.path(), 2000, "127.0.0.2"), dir.path() + "/1.log");
  const auto r0 = Join(w0, std::chrono::seconds(30));
  const auto r1 = Join(w1, std::chrono::seconds(30));
  ::close(stranger);
  EXPECT_EQ(r0.first, 3) << Slurp(w0.log);
  EXPECT_NE(r1.first, 0) << Slurp(w1.log);
  EXPECT_LE(r0.second, 2 + 5) << Slurp(w0.log);
  EXPECT_LE(r0.second + r1.second, 2 + 5) << Slurp(w1.log);  // rank 1 started after rank 0
  std::printf("hostile first connection: rank 0 exit after %.2f s (code %d), rank 1 code %d\n",
              r0.second, r0.first, r1.first);
}

// Issue 17: tcp:// (what env:// becomes under torchrun) with real
// processes: rank 0 starts last and hosts the store; the others retry
// until it is up. A second run on the same port works too.
TEST(FaultRendezvousTest, TcpStoreHostedByRankZeroAcrossProcesses) {
  TempDir dir("tcp");
  for (int run = 0; run < 2; ++run) {
    std::vector<Worker> ws;
    for (int r = 2; r >= 0; --r) {
      ws.push_back(StartWorker(Args(r, 3, "tcp://127.0.0.1:29851?job=p", 10000),
                               dir.path() + "/" + std::to_string(r) + ".log"));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    for (const Worker& w : ws) {
      const auto [code, seconds] = Join(w, std::chrono::seconds(60));
      EXPECT_EQ(code, 0) << "run " << run << ": " << Slurp(w.log);
    }
  }
}

// Known issue: a missing rank was reported only after the timeout rounded up
// to whole seconds plus one (3 s at 2 s, 2x at 1 s: Gloo's FileStore
// compares whole seconds); now within a few hundred ms of the timeout.
TEST(FaultRendezvousTest, MissingRankZeroIsReportedWithinTheTimeout) {
  const std::string dir =
      std::filesystem::temp_directory_path() / ("zen-rdv1-" + std::to_string(::getpid()));
  const Result r = RunBench("--rank 1 --world 2 --rendezvous file:" + dir +
                            " --schemes agsparse --synthetic zipf:rows=1000,width=2,density=0.01 "
                            "--iters 1 --quiet --timeout-s 2");
  std::filesystem::remove_all(dir);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_LE(r.seconds, 2 + 0.9) << r.output;
  EXPECT_NE(r.output.find("rendezvous"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("timeout 2000 ms"), std::string::npos) << r.output;
  std::printf("missing rank 0: exit after %.2f s\n", r.seconds);
}

}  // namespace
