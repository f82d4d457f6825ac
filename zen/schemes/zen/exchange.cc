// zen/schemes/zen/exchange.cc — the two rounds of a call, push then pull,
// around this server's aggregation; and how a failing rank tells its peers.
#include "zen/schemes/zen/zen.h"

#include <vector>

#include "zen/comm/collectives.h"
#include "zen/schemes/zen/internal.h"

namespace zen {

using zen_internal::Clock;
using zen_internal::Since;
using zen_internal::Snapshot;
using zen_internal::Take;
using zen_internal::CooBound;
using zen_internal::WindowBound;

ZenScheme::Rounds ZenScheme::PostRounds(Communicator& comm, const HashDomains& domains,
                                        int64_t width) {
  // Both rounds' receives are posted first: a peer that finishes its part
  // of a round early sends at once (over Gloo its transfer finds this
  // rank's receive-ready already there), so a server's pull travels while
  // slower servers still aggregate, and no receive-ready handshake waits
  // behind bulk data on the critical path.
  Workspace& ws = ws_;
  const int n = comm.size();
  Rounds rounds;
  const size_t value_bytes = ValueBytes();
  rounds.push_tag = PostAllToAllV(
      comm, ws.push_recv, CooBound(domains.size(comm.rank()), width, value_bytes),
      ws.push_requests);
  // Wide rows: each peer gets its window of the pull (a grouped pull leaves
  // the peer's own sole rows out; zen.h), an AllToAllV on every rank.
  rounds.windows = width > 1;
  rounds.pull_tag =
      rounds.windows
          ? PostAllToAllV(comm, ws.pull_recv,
                          WindowBound(domains.max_size(), width, value_bytes, n),
                          ws.pull_requests)
          : PostAllGatherV(comm, ws.pull_recv, CooBound(domains.max_size(), width, value_bytes),
                           ws.pull_requests);
  return rounds;
}

template <typename T>
void ZenScheme::Exchange(Communicator& comm, const HashDomains& domains, int64_t width,
                         const Where& where, OnPulled on_pulled, PositionCheck pulled_positions) {
  auto t0 = Clock::now();
  const Snapshot before_push = Take(comm);
  Rounds rounds = PostRounds(comm, domains, width);
  Snapshot after_push, after_pull;
  try {
    Push<T>(comm, domains, width, where, rounds);
    after_push = Take(comm);
    stats_.push_seconds = Since(t0);

    t0 = Clock::now();
    const int64_t served = Aggregate<T>(domains, comm.rank(), width);
    stats_.aggregate_seconds = Since(t0);

    Pull(comm, domains, width, where, on_pulled, pulled_positions, served, rounds);
    after_pull = Take(comm);  // the decoding of this server's own pull sends nothing
  } catch (const TransportError&) {
    throw;  // the transport failed: there is nothing more to tell the peers through it
  } catch (...) {
    // This rank failed inside the exchange (a peer's malformed or empty
    // message, a limit): an empty message in each round not yet sent tells
    // every peer now, so that every rank raises instead of waiting out the
    // timeout; then the original error.
    TellPeersThisRankFailed(comm, rounds.push_sent ? nullptr : &rounds.push_tag,
                            rounds.pull_sent ? nullptr : &rounds.pull_tag, rounds.windows);
    throw;
  }

  stats_.push_bytes_sent = after_push.sent - before_push.sent;
  stats_.push_bytes_recv = after_push.recv - before_push.recv;
  stats_.pull_bytes_sent = after_pull.sent - after_push.sent;
  stats_.pull_bytes_recv = after_pull.recv - after_push.recv;
}

#define ZEN_INSTANTIATE(T, ...)                                                                  \
  template void ZenScheme::Exchange<T>(Communicator&, const HashDomains&, int64_t, const Where&, \
                                       OnPulled, PositionCheck);
ZEN_FOR_EACH_VALUE_TYPE(ZEN_INSTANTIATE)
#undef ZEN_INSTANTIATE

void ZenScheme::TellPeersThisRankFailed(Communicator& comm, const Tag* push_tag,
                                        const Tag* pull_tag, bool pull_windows) noexcept {
  try {
    if (push_tag != nullptr) {
      const std::vector<ByteBuffer> empty(static_cast<size_t>(comm.size()));
      FinishAllToAllV(comm, *push_tag, empty, ws_.push_requests);
    }
  } catch (...) {  // the original error is what the caller raises
  }
  try {
    if (pull_tag != nullptr && pull_windows) {
      const std::vector<ByteBuffer> empty(static_cast<size_t>(comm.size()));
      FinishAllToAllV(comm, *pull_tag, empty, ws_.pull_requests);
    } else if (pull_tag != nullptr) {
      FinishAllGatherV(comm, *pull_tag, {}, ws_.pull_requests);
    }
  } catch (...) {
  }
}

}  // namespace zen
