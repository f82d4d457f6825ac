// zen/comm/store.h — what zen asks of a rendezvous store beyond Gloo's
// set/get/wait, and the store named by a URL.
//
// KeyCheck (a cheap "does this key exist") and AtomicSet (set-if-absent)
// are implemented by zen's stores (file_store.h, tcp_store.h,
// redis_store.h) and by the Python adapter over torch's store; StoreHas and
// StoreTrySet use them when present and fall back to Gloo's interface.
//
// Usage:
//   auto store = zen::OpenStore("file:/shared/run", std::chrono::seconds(30));
//   if (zen::StoreTrySet(*store, "gen/0", bytes)) { /* this process claimed it */ }
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace zen {

// Opens the store named by url ("file:", "redis://"; the query is ignored,
// "tcp://" needs OpenTcpStore (tcp_store.h), env:// and mpi:// must be
// resolved first). Connecting to Redis is retried until `timeout`; then
// TransportError names the address, the time waited and the last error.
// Every later Redis request is bounded by `timeout` too (redis_store.h).
std::shared_ptr<gloo::rendezvous::Store> OpenStore(
    const std::string& url, std::chrono::milliseconds timeout = std::chrono::seconds(30));

// A store that can say cheaply whether a key exists. zen's stores implement
// it; for other stores the run protocol falls back to a 1 ms wait.
class KeyCheck {
 public:
  virtual ~KeyCheck() = default;
  virtual bool Has(const std::string& key) = 0;
};

// A store with an atomic set-if-absent (zen's TCP store; torch's stores
// through compare_set): StoreTrySet uses it instead of check-then-set.
class AtomicSet {
 public:
  virtual ~AtomicSet() = default;
  // false when the key already exists.
  virtual bool TrySet(const std::string& key, const std::vector<char>& value) = 0;
};

// Set-if-absent: false when the key already exists (atomic for stores with
// AtomicSet and for stores that refuse to overwrite: zen's FileStore and Redis
// store, Gloo's Hash store; for other stores that overwrite it checks first,
// which is not atomic).
bool StoreTrySet(gloo::rendezvous::Store& store, const std::string& key,
                 const std::vector<char>& value);
bool StoreHas(gloo::rendezvous::Store& store, const std::string& key);

}  // namespace zen
