#include "zen/comm/redis_store.h"

#include <algorithm>
#include <thread>

#ifdef ZEN_HAVE_REDIS
#include <gloo/rendezvous/redis_store.h>
#endif

#include "zen/comm/store.h"
#include "zen/comm/timeout.h"
#include "zen/core/error.h"

namespace zen {

#ifdef ZEN_HAVE_REDIS
namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

timeval ToTimeval(Millis m) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(m.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((m.count() % 1000) * 1000);
  return tv;
}

bool ProbeRedis(const std::string& host, int port, Millis budget, std::string* error) {
  const Millis limit = std::min(budget, Millis(2000));
  redisContext* c = redisConnectWithTimeout(host.c_str(), port, ToTimeval(limit));
  if (c == nullptr) {
    *error = "hiredis could not allocate a context";
    return false;
  }
  const bool ok = c->err == 0;
  if (!ok) *error = c->errstr;
  redisFree(c);
  return ok;
}

// Gloo's RedisStore with each request bounded by the deadline.
class BoundedRedisStore final : public gloo::rendezvous::RedisStore, public KeyCheck {
 public:
  BoundedRedisStore(const std::string& host, int port, Millis timeout)
      : RedisStore(host, port),
        address_(host + ":" + std::to_string(port)),
        opened_(Clock::now()),
        timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    Bounded("set", key, [&] { RedisStore::set(key, data); });
  }
  std::vector<char> get(const std::string& key) override {
    wait({key}, timeout_);
    std::vector<char> out;
    Bounded("get", key, [&] { out = RedisStore::get(key); });
    return out;
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const Millis& timeout) override {
    const std::string what = keys.empty() ? std::string() : keys.front();
    Bounded("wait for", what, [&] { RedisStore::wait(keys, std::min(timeout, Left())); });
  }
  bool Has(const std::string& key) override {
    bool out = false;
    Bounded("check", key, [&] { out = check({key}); });
    return out;
  }

 private:
  Millis Left() const { return timeout_ - Since(opened_); }

  template <class F>
  void Bounded(const char* op, const std::string& key, F&& f) {
    const Millis left = Left();
    if (left.count() <= 0) Fail(op, key, "the timeout had passed before the request");
    redisSetTimeout(redis_, ToTimeval(left));
    try {
      f();
    } catch (const Error&) {
      throw;
    } catch (...) {
      Fail(op, key, DescribeException(std::current_exception()));
    }
  }

  [[noreturn]] void Fail(const char* op, const std::string& key, const std::string& why) const {
    throw TransportError(Where{}, "rendezvous: the Redis server at ", address_,
                         " did not answer within the timeout (", op, " key '", key,
                         "'): waited ", Since(opened_).count(),
                         " ms since the store was opened (timeout ", timeout_.count(),
                         " ms); ", why);
  }

  std::string address_;
  Clock::time_point opened_;
  Millis timeout_;
};

}  // namespace

std::shared_ptr<gloo::rendezvous::Store> OpenRedisStore(const std::string& host, int port,
                                                        Millis timeout) {
  const auto start = Clock::now();
  std::string last;
  for (;;) {
    // Gloo's RedisStore leaks its hiredis context when the connection fails
    // (it throws from the constructor without redisFree), so probe first.
    if (ProbeRedis(host, port, std::max(Millis(1), timeout - Since(start)), &last)) {
      try {
        return std::make_shared<BoundedRedisStore>(host, port,
                                                   std::max(Millis(1), timeout - Since(start)));
      } catch (...) {
        last = DescribeException(std::current_exception());
      }
    }
    if (Since(start) >= timeout) break;
    std::this_thread::sleep_for(std::min(Millis(100), timeout));
  }
  throw TransportError(Where{}, "rendezvous: waited ", Since(start).count(), " ms (timeout ",
                       timeout.count(), " ms) to connect to the Redis server at ", host, ":", port,
                       "; last error: ", last);
}

#else

std::shared_ptr<gloo::rendezvous::Store> OpenRedisStore(const std::string& host, int port,
                                                        std::chrono::milliseconds) {
  throw InvalidArgument(Where{}, "rendezvous URL 'redis://", host, ":", port,
                        "': this build has no Redis support (hiredis was not found)");
}

#endif

}  // namespace zen
