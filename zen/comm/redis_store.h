// zen/comm/redis_store.h — the rendezvous store of "redis://HOST:PORT":
// Gloo's RedisStore (hiredis) with every request bounded by zen's deadline.
//
// Gloo's RedisStore waits for a reply as long as the server takes: a server
// that accepts the connection and never answers (a stopped Redis, a wrong
// port that some other program listens on) would hang the rendezvous. Here
// the connection is probed with a connect timeout first, and every request
// (set, get, exists) runs with a hiredis socket timeout set to what is left
// of `timeout` after the store was opened; past that, TransportError names
// the server, the request, the time waited and the timeout. A timed-out
// connection is unusable (hiredis closes it), so the store fails every later
// request as well; the rendezvous that opened it fails with it.
//
// Only in builds with hiredis (ZEN_HAVE_REDIS); elsewhere OpenRedisStore
// raises InvalidArgument.
//
// Usage:
//   auto store = zen::OpenRedisStore("10.0.0.1", 6379, std::chrono::seconds(30));
//   // or OpenStore("redis://10.0.0.1:6379", timeout)
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <string>

namespace zen {

// Connects (retrying until `timeout`; then TransportError naming the
// address, the time waited and the last error) and returns the store.
std::shared_ptr<gloo::rendezvous::Store> OpenRedisStore(const std::string& host, int port,
                                                        std::chrono::milliseconds timeout);

}  // namespace zen
