// Rendezvous and connection behaviour of the Gloo backend. Point-to-point and
// collective semantics are covered for both backends in transport_test.cc and
// collectives_test.cc.
#include "zen/comm/gloo_communicator.h"
#include "zen/comm/file_store.h"
#include "zen/comm/rendezvous.h"
#include "zen/comm/rendezvous_url.h"

#include <gloo/rendezvous/hash_store.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "zen/comm/collectives.h"
#include "zen/core/error.h"

namespace zen {
namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// Runs connect(rank) and a small allgather on `world` threads; returns the
// error text of each rank ("" when it succeeded).
std::vector<std::string> ConnectAndGather(
    int world, const std::function<std::unique_ptr<Communicator>(int)>& connect,
    int ranks_started = -1) {
  if (ranks_started < 0) ranks_started = world;
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks_started; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto comm = connect(r);
        EXPECT_EQ(comm->rank(), r);
        EXPECT_EQ(comm->size(), world);
        const std::vector<int64_t> all = AllGatherInt(*comm, 100 + r);
        for (int p = 0; p < world; ++p) EXPECT_EQ(all[p], 100 + p);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = std::string("!") + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

std::string UniquePrefix(const std::string& what) {
  return what + "-" + std::to_string(::getpid()) + "-" +
         std::to_string(Clock::now().time_since_epoch().count());
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "zen-comm-XXXXXX").string();
    char* made = ::mkdtemp(tmpl.data());
    if (made == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = made;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(GlooCommunicatorTest, FileStoreRendezvousWithThreads) {
  TempDir dir;
  GlooOptions opt;
  opt.rendezvous = "file:" + dir.path() + "/not/yet/there";  // created by OpenStore
  opt.prefix = UniquePrefix("file");
  opt.timeout = Millis(10000);
  const auto errors = ConnectAndGather(4, [&](int r) { return ConnectGloo(r, 4, opt); });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  EXPECT_TRUE(std::filesystem::is_directory(dir.path() + "/not/yet/there"));
}

TEST(GlooCommunicatorTest, TwoJobsShareAStoreThroughPrefixes) {
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  GlooOptions a, b;
  a.prefix = "job-a";
  b.prefix = "job-b";
  a.timeout = b.timeout = Millis(10000);
  std::vector<std::string> ea, eb;
  std::thread ta(
      [&] { ea = ConnectAndGather(3, [&](int r) { return ConnectGloo(r, 3, store, a); }); });
  std::thread tb(
      [&] { eb = ConnectAndGather(2, [&](int r) { return ConnectGloo(r, 2, store, b); }); });
  ta.join();
  tb.join();
  for (const auto& e : ea) EXPECT_EQ(e, "");
  for (const auto& e : eb) EXPECT_EQ(e, "");
}

// Sends and receives are posted on Gloo's loop thread (gloo_communicator.cc):
// a post Gloo refuses there must still reach the caller, at Wait, as a
// TransportError naming the peer. After a timed-out wait Gloo has closed
// every pair of the communicator, so the next send is refused.
TEST(GlooCommunicatorTest, RefusedPostIsTransportErrorAtWait) {
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  GlooOptions opt;
  opt.prefix = UniquePrefix("refused");
  opt.timeout = Millis(1500);
  std::atomic<bool> done{false};
  std::string first, second;
  std::thread peer([&] {
    try {
      auto comm = ConnectGloo(1, 2, store, opt);
      while (!done.load()) std::this_thread::sleep_for(Millis(5));
    } catch (...) {
    }
  });
  try {
    auto comm = ConnectGloo(0, 2, store, opt);
    ByteBuffer got(8);
    try {
      comm->Recv(1, 5, got)->Wait();  // rank 1 never sends: times out
    } catch (const TransportError& e) {
      first = e.what();
    }
    const ByteBuffer out(16, std::byte{1});
    const auto start = Clock::now();
    try {
      comm->Send(1, 6, out)->Wait();
    } catch (const TransportError& e) {
      second = e.what();
    }
    EXPECT_LT(std::chrono::duration_cast<Millis>(Clock::now() - start).count(), 1000)
        << "the refused post waited for the timeout";
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
  done = true;
  peer.join();
  EXPECT_NE(first.find("tag 5"), std::string::npos) << first;
  ASSERT_FALSE(second.empty()) << "a send on a closed communicator succeeded";
  EXPECT_NE(second.find("send to peer 1"), std::string::npos) << second;
  EXPECT_NE(second.find("tag 6"), std::string::npos) << second;
  EXPECT_NE(second.find("rank 0"), std::string::npos) << second;
  EXPECT_NE(second.find("posting"), std::string::npos) << second;
}

TEST(GlooCommunicatorTest, WorldOfOneConnectsWithoutPeers) {
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  auto comm = ConnectGloo(0, 1, store, GlooOptions{});
  EXPECT_EQ(AllGatherInt(*comm, 7), std::vector<int64_t>{7});
  EXPECT_EQ(comm->counters().messages_sent(), 0u);
}

// Rank 2 never shows up: ranks 0 and 1 give up after the timeout, and the
// error says what they waited for and how long.
TEST(GlooCommunicatorTest, RendezvousTimeoutNamesTheMissingRank) {
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  GlooOptions opt;
  opt.prefix = "missing";
  opt.timeout = Millis(300);
  const auto start = Clock::now();
  const auto errors = ConnectAndGather(
      3, [&](int r) { return ConnectGloo(r, 3, store, opt); }, /*ranks_started=*/2);
  const auto took = std::chrono::duration_cast<Millis>(Clock::now() - start);
  EXPECT_LT(took.count(), 300 + 1500);
  for (int r = 0; r < 2; ++r) {
    const std::string& e = errors[r];
    EXPECT_NE(e.find("rendezvous"), std::string::npos) << e;
    EXPECT_NE(e.find("'missing/"), std::string::npos) << e;  // the key, with its prefix
    EXPECT_NE(e.find("address of rank 2"), std::string::npos) << e;
    EXPECT_NE(e.find("300 ms"), std::string::npos) << e;
    EXPECT_NE(e.find("rank " + std::to_string(r)), std::string::npos) << e;
  }
}

// A rank waiting at rendezvous says so every WaitProgress::every, naming
// the ranks not arrived yet (here rank 2 of 3, which never starts).
TEST(GlooCommunicatorTest, WaitingRanksNameWhoIsMissing) {
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::mutex m;
  std::vector<std::string> lines[2];
  const auto errors = ConnectAndGather(
      3,
      [&](int r) {
        GlooOptions opt;
        opt.prefix = "progress";
        opt.timeout = Millis(1200);
        opt.progress.every = Millis(200);
        opt.progress.notice = [&, r](const std::string& line) {
          std::lock_guard<std::mutex> lock(m);
          lines[r].push_back(line);
        };
        return ConnectGloo(r, 3, store, opt);
      },
      /*ranks_started=*/2);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("address of rank 2"), std::string::npos) << errors[r];
    // About one line per 200 ms of the 1200 ms waited.
    EXPECT_GE(lines[r].size(), 3u) << "rank " << r;
    EXPECT_LE(lines[r].size(), 7u) << "rank " << r;
    for (const std::string& line : lines[r]) {
      EXPECT_NE(line.find("zen: rank " + std::to_string(r) + " has waited"), std::string::npos)
          << line;
      EXPECT_NE(line.find("rank 2 of 3 (not arrived yet)"), std::string::npos) << line;
      EXPECT_EQ(line.find("rank 1 of 3"), std::string::npos) << line;
    }
  }
  // The default is silent: nothing to call.
  EXPECT_FALSE(GlooOptions{}.progress.notice);
}

// Rank 0 of a world of 1000 whose peers never come: one deadline covers
// the whole connect, the teardown of its 999 listening pairs after the
// failure included.
TEST(GlooCommunicatorTest, LargeWorldConnectEndsWithinTheTimeout) {
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  GlooOptions opt;
  opt.timeout = Millis(1000);
  const auto start = Clock::now();
  try {
    ConnectGloo(0, 1000, store, opt);
    ADD_FAILURE() << "connected without peers";
  } catch (const TransportError& e) {
    const auto took = std::chrono::duration_cast<Millis>(Clock::now() - start);
    EXPECT_LE(took.count(), 1000 + 1000) << e.what();
    std::printf("world 1000, no peers: TransportError after %lld ms\n",
                static_cast<long long>(took.count()));
  }
}

// A world that needs more descriptors (one listening socket per peer) than
// the process may open is refused up front, naming the limit.
TEST(GlooCommunicatorTest, WorldBeyondTheDescriptorLimitIsRefusedAtOnce) {
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = std::min<rlim_t>(saved.rlim_cur, 256);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  GlooOptions opt;
  opt.timeout = Millis(30000);
  const auto start = Clock::now();
  std::string what;
  try {
    ConnectGloo(0, 300, store, opt);
  } catch (const Error& e) {
    what = e.what();
  }
  const auto took = std::chrono::duration_cast<Millis>(Clock::now() - start);
  ::setrlimit(RLIMIT_NOFILE, &saved);
  EXPECT_NE(what.find("RLIMIT_NOFILE"), std::string::npos) << what;
  EXPECT_NE(what.find("world size 300"), std::string::npos) << what;
  EXPECT_LE(took.count(), 500) << what;
}

TEST(GlooCommunicatorTest, RejectsBadArguments) {
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  GlooOptions opt;
  EXPECT_THROW(ConnectGloo(2, 2, store, opt), InvalidArgument);
  EXPECT_THROW(ConnectGloo(0, 0, store, opt), InvalidArgument);
  EXPECT_THROW(ConnectGloo(0, 2, nullptr, opt), InvalidArgument);
  opt.timeout = Millis(0);
  EXPECT_THROW(ConnectGloo(0, 2, store, opt), InvalidArgument);
  opt = GlooOptions{};
  opt.hostname = "";
  EXPECT_THROW(ConnectGloo(0, 2, store, opt), InvalidArgument);
}

TEST(GlooCommunicatorTest, UnknownInterfaceAddressIsTransportError) {
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  GlooOptions opt;
  opt.hostname = "no-such-host.invalid";
  try {
    ConnectGloo(0, 2, store, opt);
    FAIL() << "connected";
  } catch (const TransportError& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-host.invalid"), std::string::npos) << e.what();
  }
}

TEST(GlooCommunicatorTest, OpenStoreRejectsUnknownUrls) {
  EXPECT_THROW(OpenStore("tcp://x:1"), InvalidArgument);
  EXPECT_THROW(OpenStore("file:"), InvalidArgument);
  EXPECT_THROW(OpenStore(""), InvalidArgument);
#ifdef ZEN_HAVE_REDIS
  EXPECT_THROW(OpenStore("redis://host-without-port"), InvalidArgument);
  EXPECT_THROW(OpenStore("redis://host:70000"), InvalidArgument);
  EXPECT_THROW(OpenStore("redis://host:12ab"), InvalidArgument);
#endif
}

// A store that lets rank 1 publish and then freezes it (every later call
// blocks until the test ends): a peer stopped after publishing its address.
class FreezeAfterPublish final : public gloo::rendezvous::Store {
 public:
  explicit FreezeAfterPublish(std::shared_ptr<gloo::rendezvous::Store> inner)
      : inner_(std::move(inner)) {}
  ~FreezeAfterPublish() override { Release(); }
  void Release() {
    std::lock_guard<std::mutex> lock(m_);
    released_ = true;
    cv_.notify_all();
  }
  void set(const std::string& key, const std::vector<char>& data) override {
    Gate();
    inner_->set(key, data);
    if (key.find("/addr/") != std::string::npos) {
      std::lock_guard<std::mutex> lock(m_);
      frozen_ = true;
    }
  }
  std::vector<char> get(const std::string& key) override {
    Gate();
    return inner_->get(key);
  }
  void wait(const std::vector<std::string>& keys) override {
    Gate();
    inner_->wait(keys);
  }
  void wait(const std::vector<std::string>& keys, const Millis& timeout) override {
    Gate();
    inner_->wait(keys, timeout);
  }

 private:
  void Gate() {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [&] { return !frozen_ || released_; });
  }
  std::shared_ptr<gloo::rendezvous::Store> inner_;
  std::mutex m_;
  std::condition_variable cv_;
  bool frozen_ = false;
  bool released_ = false;
};

// Rank 1 publishes its address and stops. Rank 0 binds
// 127.0.0.1 and rank 1 127.0.0.2, so rank 0 is the accepting side of the
// pair, where Gloo alone waits 5x the timeout; zen ends within the timeout.
TEST(GlooCommunicatorTest, PeerStoppedAfterPublishingEndsWithinTheTimeout) {
  auto hash = std::make_shared<gloo::rendezvous::HashStore>();
  auto frozen = std::make_shared<FreezeAfterPublish>(hash);
  GlooOptions o0, o1;
  o0.prefix = o1.prefix = "stopped";
  o0.timeout = Millis(1000);
  o1.timeout = Millis(5000);
  o1.hostname = "127.0.0.2";
  std::thread peer([&] {
    try {
      ConnectGloo(1, 2, frozen, o1);
    } catch (...) {
    }
  });
  // Rank 1 waits for rank 0 to open the run, publishes, and freezes.
  const auto start = Clock::now();
  std::string error;
  try {
    ConnectGloo(0, 2, hash, o0);
  } catch (const TransportError& e) {
    error = e.what();
  }
  const auto took = std::chrono::duration_cast<Millis>(Clock::now() - start);
  frozen->Release();
  peer.join();
  EXPECT_NE(error, "");
  EXPECT_LT(took.count(), 1000 + 2000) << error;  // Gloo alone: 5000 ms
  EXPECT_NE(error.find("rank 1"), std::string::npos) << error;
  EXPECT_NE(error.find("timeout 1000 ms"), std::string::npos) << error;
}

// A stranger connects to rank 0's listening port before rank 1
// does and holds the connection. Both ranks still end within the timeout.
TEST(GlooCommunicatorTest, HostileFirstConnectionEndsWithinTheTimeout) {
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  GlooOptions o0, o1;
  o0.prefix = o1.prefix = "hostile";
  o0.timeout = o1.timeout = Millis(1500);
  o1.hostname = "127.0.0.2";
  std::atomic<bool> stop{false};
  int stranger = -1;
  std::thread attacker([&] {
    // Wait for rank 0's published address, connect to its port for rank 1.
    while (!stop && !StoreHas(*store, "hostile/0/addr/0")) std::this_thread::sleep_for(Millis(1));
    if (stop) return;
    const auto bytes = store->get("hostile/0/addr/0");
    const RendezvousValue v = DecodeRendezvousValue(bytes, 2, 0, -1, "hostile/0/addr/0");
    sockaddr_storage ss;
    std::memcpy(&ss, v.AddressFor(1).data(), sizeof(ss));
    stranger = ::socket(AF_INET, SOCK_STREAM, 0);
    ::connect(stranger, reinterpret_cast<sockaddr*>(&ss), sizeof(sockaddr_in));
  });
  std::vector<std::string> errors(2);
  std::vector<Millis> took(2);
  std::thread r1([&] {
    std::this_thread::sleep_for(Millis(200));  // let the stranger be first
    const auto start = Clock::now();
    try {
      ConnectGloo(1, 2, store, o1);
    } catch (const std::exception& e) {
      errors[1] = e.what();
    }
    took[1] = std::chrono::duration_cast<Millis>(Clock::now() - start);
  });
  const auto start = Clock::now();
  try {
    ConnectGloo(0, 2, store, o0);
  } catch (const std::exception& e) {
    errors[0] = e.what();
  }
  took[0] = std::chrono::duration_cast<Millis>(Clock::now() - start);
  r1.join();
  stop = true;
  attacker.join();
  if (stranger >= 0) ::close(stranger);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r], "") << "rank " << r;
    EXPECT_LT(took[r].count(), 1500 + 2500) << "rank " << r << ": " << errors[r];  // Gloo: 7500
  }
}

// A rank started with another world size gets a MismatchError
// naming both sizes.
TEST(GlooCommunicatorTest, WorldSizeMismatchNamesBothSizes) {
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  GlooOptions opt;
  opt.prefix = "mismatch";
  opt.timeout = Millis(2000);
  std::string e0, e1;
  std::thread t([&] {
    try {
      ConnectGloo(1, 3, store, opt);
    } catch (const MismatchError& e) {
      e1 = e.what();
    } catch (const std::exception& e) {
      e1 = std::string("other: ") + e.what();
    }
  });
  try {
    ConnectGloo(0, 2, store, opt);
  } catch (const MismatchError& e) {
    e0 = e.what();
  } catch (const std::exception& e) {
    e0 = std::string("other: ") + e.what();
  }
  t.join();
  for (const std::string& e : {e0, e1}) {
    EXPECT_NE(e.find("world size 2"), std::string::npos) << e;
    EXPECT_NE(e.find("world size 3"), std::string::npos) << e;
    EXPECT_EQ(e.find("other: "), std::string::npos) << e;
  }
}

// The published values hold no uninitialized bytes: everything
// past the IPv4 sockaddr and before the sequence number is zero.
TEST(GlooCommunicatorTest, PublishedAddressesHaveZeroPadding) {
  TempDir dir;
  GlooOptions opt;
  opt.rendezvous = "file:" + dir.path() + "/store";
  opt.timeout = Millis(10000);
  const auto errors = ConnectAndGather(3, [&](int r) { return ConnectGloo(r, 3, opt); });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  FileStore store(dir.path() + "/store");
  for (int r = 0; r < 3; ++r) {
    const std::string key = "zen/0/addr/" + std::to_string(r);
    const auto v = DecodeRendezvousValue(store.get(key), 3, r, -1, key);
    for (int p = 0; p < 3; ++p) {
      if (p == r) continue;
      const auto a = v.AddressFor(p);
      ASSERT_EQ(a.size(), sizeof(sockaddr_storage) + 8);
      for (size_t i = sizeof(sockaddr_in); i < sizeof(sockaddr_storage); ++i) {
        ASSERT_EQ(a[i], 0) << "rank " << r << " peer " << p << " byte " << i;
      }
    }
  }
}

// Key files are 0600 and a directory zen creates is 0700.
TEST(GlooCommunicatorTest, StoreFilesArePrivate) {
  TempDir dir;
  GlooOptions opt;
  opt.rendezvous = "file:" + dir.path() + "/a/b";
  opt.timeout = Millis(10000);
  const auto errors = ConnectAndGather(2, [&](int r) { return ConnectGloo(r, 2, opt); });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  namespace fs = std::filesystem;
  for (const std::string& d : {dir.path() + "/a", dir.path() + "/a/b"}) {
    EXPECT_EQ(fs::status(d).permissions() & fs::perms::all, fs::perms::owner_all) << d;
  }
  int files = 0;
  for (const auto& f : fs::directory_iterator(dir.path() + "/a/b")) {
    ++files;
    EXPECT_EQ(f.status().permissions() & fs::perms::all,
              fs::perms::owner_read | fs::perms::owner_write)
        << f.path();
  }
  EXPECT_GE(files, 4);  // gen/0, two addresses, ready
}

// Timeouts beyond 30 days (1e30 s) are refused with the value.
TEST(GlooCommunicatorTest, AbsurdTimeoutsAreRefused) {
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  GlooOptions opt;
  opt.timeout = Millis(std::numeric_limits<int64_t>::max());
  try {
    ConnectGloo(0, 2, store, opt);
    FAIL() << "accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(std::numeric_limits<int64_t>::max())),
              std::string::npos)
        << e.what();
  }
  opt.timeout = Millis(-5);
  EXPECT_THROW(ConnectGloo(0, 2, store, opt), InvalidArgument);
}

// A rerun with the same file: directory connects (a new
// generation), also after a partial run in which rank 1 never came.
TEST(GlooCommunicatorTest, RerunWithTheSameDirectoryNeverMeetsLeftovers) {
  TempDir dir;
  GlooOptions opt;
  opt.rendezvous = "file:" + dir.path();
  opt.timeout = Millis(10000);
  for (int run = 0; run < 2; ++run) {
    const auto errors = ConnectAndGather(3, [&](int r) { return ConnectGloo(r, 3, opt); });
    for (const auto& e : errors) EXPECT_EQ(e, "") << "run " << run;
  }
  GlooOptions short_opt = opt;
  short_opt.timeout = Millis(300);
  const auto partial = ConnectAndGather(
      3, [&](int r) { return ConnectGloo(r, 3, short_opt); }, /*ranks_started=*/1);
  EXPECT_NE(partial[0], "");
  const auto errors = ConnectAndGather(3, [&](int r) { return ConnectGloo(r, 3, opt); });
  for (const auto& e : errors) EXPECT_EQ(e, "") << "after the partial run";
  FileStore store(dir.path());
  EXPECT_TRUE(store.Has("zen/gen/3"));  // runs 0, 1, the partial run 2, then 3
  EXPECT_TRUE(store.Has("zen/3/ready"));
}

// A run that died half-way (ranks 0 and 1 of 3 published,
// then gave up) leaves a generation that looks like a forming one. The rerun's
// rank 1, started before its rank 0, finds its slot there taken, marks the
// duplicate, sees nobody answer within the grace, and joins the new run; the
// new rank 0 waits the grace once for the old generation. All connect.
TEST(GlooCommunicatorTest, RerunAfterARunThatDiedHalfWayConnects) {
  TempDir dir;
  GlooOptions opt;
  opt.rendezvous = "file:" + dir.path();
  opt.timeout = Millis(300);
  const auto partial = ConnectAndGather(
      3, [&](int r) { return ConnectGloo(r, 3, opt); }, /*ranks_started=*/2);
  EXPECT_NE(partial[0], "");
  EXPECT_NE(partial[1], "");
  opt.timeout = Millis(10000);
  const auto start = Clock::now();
  const auto errors = ConnectAndGather(3, [&](int r) {
    if (r == 0) std::this_thread::sleep_for(Millis(300));  // the others start first
    return ConnectGloo(r, 3, opt);
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  EXPECT_LT(std::chrono::duration_cast<Millis>(Clock::now() - start).count(), 5000);
  FileStore store(dir.path());
  EXPECT_TRUE(store.Has("zen/0/dup"));  // rank 1 saw its old slot taken
  EXPECT_FALSE(store.Has("zen/0/abort"));
  EXPECT_TRUE(store.Has("zen/1/ready"));
}

// Two torchrun generations (restart count 0 then 1) on one
// store: the second connects through its own keys, and a job id in the URL
// and in the options must agree.
TEST(GlooCommunicatorTest, ElasticGenerationsOnOneStoreDoNotCollide) {
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  for (int restart = 0; restart < 2; ++restart) {
    std::map<std::string, std::string> env = {{"RANK", "0"},
                                              {"WORLD_SIZE", "2"},
                                              {"MASTER_ADDR", "127.0.0.1"},
                                              {"MASTER_PORT", "29500"},
                                              {"TORCHELASTIC_RUN_ID", "abc"},
                                              {"TORCHELASTIC_RESTART_COUNT",
                                               std::to_string(restart)}};
    const auto launch = RendezvousFromEnv(env);
    ASSERT_TRUE(launch);
    GlooOptions opt;
    opt.job = launch->job;
    opt.timeout = Millis(10000);
    const auto errors = ConnectAndGather(2, [&](int r) { return ConnectGloo(r, 2, store, opt); });
    for (const auto& e : errors) EXPECT_EQ(e, "") << "restart " << restart;
    EXPECT_TRUE(StoreHas(*store, "zen/" + launch->job + "/0/ready"));
    EXPECT_FALSE(StoreHas(*store, "zen/" + launch->job + "/1/ready"));
  }
  GlooOptions opt;
  opt.job = "a";
  opt.rendezvous = "file:/tmp/x?job=b";
  EXPECT_THROW(ConnectGloo(0, 2, opt), InvalidArgument);
}

}  // namespace
}  // namespace zen

namespace zen {
namespace {

// Tcp:// (what env:// becomes under torchrun): rank 0 hosts zen's
// TCP store; ranks started before it retry until it is up; a second run on
// another port works the same.
TEST(GlooCommunicatorTest, TcpStoreHostedByRankZero) {
  for (int port : {29817, 29818}) {
    GlooOptions opt;
    opt.rendezvous = "tcp://127.0.0.1:" + std::to_string(port) + "?job=t";
    opt.timeout = Millis(10000);
    const auto errors = ConnectAndGather(4, [&](int r) {
      if (r == 0) std::this_thread::sleep_for(Millis(300));  // others start first
      return ConnectGloo(r, 4, opt);
    });
    for (int r = 0; r < 4; ++r) EXPECT_EQ(errors[r], "") << "rank " << r << " port " << port;
  }
}

TEST(GlooCommunicatorTest, TcpStoreWithoutRankZeroTimesOut) {
  GlooOptions opt;
  opt.rendezvous = "tcp://127.0.0.1:29819";
  opt.timeout = Millis(500);
  const auto start = Clock::now();
  try {
    ConnectGloo(1, 2, opt);
    FAIL() << "connected";
  } catch (const TransportError& e) {
    EXPECT_NE(std::string(e.what()).find("TCP store at 127.0.0.1:29819"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::duration_cast<Millis>(Clock::now() - start).count(), 500 + 500);
}

// Hostile bytes on the store port: the server drops the connection and the
// job still connects.
TEST(GlooCommunicatorTest, TcpStoreSurvivesGarbage) {
  GlooOptions opt;
  opt.rendezvous = "tcp://127.0.0.1:29820";
  opt.timeout = Millis(10000);
  std::thread junk([] {
    std::this_thread::sleep_for(Millis(100));
    for (int i = 0; i < 3; ++i) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(29820);
      a.sin_addr.s_addr = htonl(0x7f000001);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
        const char bad[] = "\x02\xff\xff\xff\xffGET / HTTP/1.0\r\n\r\n";
        (void)!::send(fd, bad, sizeof(bad), MSG_NOSIGNAL);
      }
      ::close(fd);
    }
  });
  const auto errors = ConnectAndGather(2, [&](int r) { return ConnectGloo(r, 2, opt); });
  junk.join();
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

}  // namespace
}  // namespace zen
