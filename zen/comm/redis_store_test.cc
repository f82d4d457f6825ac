// redis_store.h: a Redis address that accepts connections and never
// answers (a stopped server, another program on the port) ends every
// request within the store's timeout, with a TransportError naming the
// server and the time waited; so does a rendezvous through it.
#include "zen/comm/redis_store.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "zen/comm/collectives.h"
#include "zen/comm/gloo_communicator.h"
#include "zen/core/error.h"

namespace zen {
namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// A socket listening on 127.0.0.1 that never accepts: the kernel completes
// the connections, nobody ever replies.
class SilentListener {
 public:
  SilentListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        ::listen(fd_, 64) != 0) {
      ADD_FAILURE() << "cannot listen";
      return;
    }
    socklen_t n = sizeof(a);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &n);
    port_ = ntohs(a.sin_port);
  }
  ~SilentListener() {
    if (fd_ >= 0) ::close(fd_);
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

Millis Since(Clock::time_point t) {
  return std::chrono::duration_cast<Millis>(Clock::now() - t);
}

TEST(RedisStoreTest, UnreachableRedisSaysWhereAndHowLong) {
#ifndef ZEN_HAVE_REDIS
  GTEST_SKIP() << "built without hiredis";
#else
  const auto start = Clock::now();
  try {
    OpenStore("redis://127.0.0.1:1", Millis(300));  // nothing listens on port 1
    FAIL() << "connected to port 1";
  } catch (const TransportError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("Redis"), std::string::npos) << what;
    EXPECT_NE(what.find("127.0.0.1:1"), std::string::npos) << what;
    EXPECT_NE(what.find("timeout 300 ms"), std::string::npos) << what;
    EXPECT_NE(what.find("waited"), std::string::npos) << what;
  }
  const auto took = std::chrono::duration_cast<Millis>(Clock::now() - start);
  EXPECT_GE(took.count(), 300);
  EXPECT_LT(took.count(), 300 + 1000);  // attempts are bounded by the time left
#endif
}

// Runs when the environment names a Redis server: ZEN_TEST_REDIS=host:port.
TEST(RedisStoreTest, RedisRendezvous) {
  const char* where = std::getenv("ZEN_TEST_REDIS");
  if (where == nullptr || *where == '\0') GTEST_SKIP() << "ZEN_TEST_REDIS is not set";
#ifndef ZEN_HAVE_REDIS
  GTEST_SKIP() << "built without hiredis";
#else
  GlooOptions opt;
  opt.rendezvous = std::string("redis://") + where;
  opt.prefix = "redis-" + std::to_string(::getpid()) + "-" +
               std::to_string(Clock::now().time_since_epoch().count());  // keys outlive the test
  opt.timeout = Millis(10000);
  // Twice with the same prefix: the second run claims a new generation and
  // never reads the first run's keys (Redis keys outlive the job).
  for (int run = 0; run < 2; ++run) {
    std::vector<std::string> errors(3);
    std::vector<std::thread> threads;
    for (int r = 0; r < 3; ++r) {
      threads.emplace_back([&, r] {
        try {
          auto comm = ConnectGloo(r, 3, opt);
          const std::vector<int64_t> all = AllGatherInt(*comm, 100 + r);
          for (int p = 0; p < 3; ++p) EXPECT_EQ(all[static_cast<size_t>(p)], 100 + p);
        } catch (const std::exception& e) {
          errors[static_cast<size_t>(r)] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[r], "") << "rank " << r << " run " << run;
  }
#endif
}

#ifdef ZEN_HAVE_REDIS

TEST(RedisStoreTest, AServerThatNeverAnswersFailsEachRequestWithinTheTimeout) {
  SilentListener silent;
  const auto start = Clock::now();
  auto store = OpenRedisStore("127.0.0.1", silent.port(), Millis(1000));
  try {
    store->get("some/key");
    ADD_FAILURE() << "get returned";
  } catch (const TransportError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("127.0.0.1:" + std::to_string(silent.port())), std::string::npos) << what;
    EXPECT_NE(what.find("timeout 1000 ms"), std::string::npos) << what;
  }
  const Millis waited = Since(start);
  EXPECT_GE(waited.count(), 900);
  EXPECT_LT(waited.count(), 2000) << "the timeout is 1000 ms";
  // Later requests fail at once: the deadline has passed.
  const auto again = Clock::now();
  EXPECT_THROW(store->set("k", {'v'}), TransportError);
  EXPECT_THROW(store->wait({"k"}), TransportError);
  EXPECT_LT(Since(again).count(), 500);
}

TEST(RedisStoreTest, ARendezvousThroughASilentServerEndsWithinTheTimeout) {
  SilentListener silent;
  GlooOptions options;
  options.rendezvous = "redis://127.0.0.1:" + std::to_string(silent.port());
  options.timeout = Millis(1500);
  const auto start = Clock::now();
  EXPECT_THROW(ConnectGloo(0, 2, options), TransportError);
  const Millis waited = Since(start);
  EXPECT_LT(waited.count(), 2500) << "the timeout is 1500 ms";
}

#else

TEST(RedisStoreTest, WithoutHiredisTheUrlIsRefused) {
  EXPECT_THROW(OpenRedisStore("127.0.0.1", 6379, Millis(100)), InvalidArgument);
}

#endif

}  // namespace
}  // namespace zen
