#include "zen/comm/communicator.h"

#include "zen/core/error.h"

namespace zen {

uint64_t ByteCounters::total_sent() const {
  uint64_t t = 0;
  for (const auto& v : sent_) t += v.load();
  return t;
}

uint64_t ByteCounters::total_recv() const {
  uint64_t t = 0;
  for (const auto& v : recv_) t += v.load();
  return t;
}

void ByteCounters::Reset() {
  for (auto& v : sent_) v = 0;
  for (auto& v : recv_) v = 0;
  messages_ = 0;
}

void Communicator::CheckPeer(int peer) const {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    throw InvalidArgument(Where{rank_, {}}, "peer ", peer, " is not another rank of [0, ", size_,
                          ")");
  }
}

}  // namespace zen
