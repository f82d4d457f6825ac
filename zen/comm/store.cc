#include "zen/comm/store.h"

#include "zen/comm/file_store.h"
#include "zen/comm/redis_store.h"
#include "zen/comm/rendezvous_url.h"
#include "zen/comm/timeout.h"
#include "zen/core/error.h"

namespace zen {

using Millis = std::chrono::milliseconds;

bool StoreHas(gloo::rendezvous::Store& store, const std::string& key) {
  if (auto* s = dynamic_cast<KeyCheck*>(&store)) return s->Has(key);
  try {
    store.wait({key}, Millis(1));
    return true;
  } catch (...) {
    return false;
  }
}


bool StoreTrySet(gloo::rendezvous::Store& store, const std::string& key,
                 const std::vector<char>& value) {
  if (auto* s = dynamic_cast<AtomicSet*>(&store)) return s->TrySet(key, value);
  if (StoreHas(store, key)) return false;
  try {
    store.set(key, value);
    return true;
  } catch (...) {
    if (StoreHas(store, key)) return false;  // lost a race
    throw;
  }
}

std::shared_ptr<gloo::rendezvous::Store> OpenStore(const std::string& url, Millis timeout) {
  const RendezvousUrl u = ParseRendezvousUrl(url);
  CheckTimeout(timeout, "OpenStore");
  switch (u.kind) {
    case RendezvousUrl::Kind::kFile:
      return std::make_shared<FileStore>(u.path);
    case RendezvousUrl::Kind::kRedis:
      return OpenRedisStore(u.host, u.port, timeout);
    default:
      throw InvalidArgument(Where{}, "rendezvous URL '", url,
                            "': OpenStore opens file:DIR and redis://HOST:PORT only (tcp:// is "
                            "hosted by rank 0 in ConnectGloo; env:// and mpi:// are resolved "
                            "with RendezvousFromEnv)");
  }
}

}  // namespace zen
