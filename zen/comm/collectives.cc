#include "zen/comm/collectives.h"

#include <memory>

#include "zen/comm/peer_pattern.h"
#include "zen/core/error.h"

namespace zen {
namespace {

using Requests = std::vector<std::unique_ptr<Request>>;

// Waits for every request in order. The first failure propagates; the
// requests still pending are then destroyed, which bounds their wait by the
// communicator timeout (see Request).
void WaitAll(Requests& requests) {
  for (auto& r : requests) r->Wait();
}

void CheckPerPeer(const Communicator& comm, size_t got, const char* what) {
  if (got != static_cast<size_t>(comm.size())) {
    throw InvalidArgument(Where{comm.rank()}, what, " has ", got,
                          " entries, expected one per rank (", comm.size(), ")");
  }
}

ByteBuffer Copy(std::span<const std::byte> s) { return ByteBuffer(s.begin(), s.end()); }

// A size announced by a peer, checked before anything is allocated for it.
void CheckAnnounced(const Communicator& comm, const char* what, int from, int64_t size,
                    int64_t max_bytes) {
  if (size < 0 || size > max_bytes) {
    throw FormatError(Where{comm.rank()}, what, ": rank ", from, " announced a message of ", size,
                      " bytes, outside [0, ", max_bytes, "] (the largest this call can hold)");
  }
}

void CheckBound(const Communicator& comm, const char* what, int64_t max_recv_bytes) {
  if (max_recv_bytes < 0) {
    throw InvalidArgument(Where{comm.rank()}, what, ": max_recv_bytes ", max_recv_bytes,
                          " is negative");
  }
}

}  // namespace

std::vector<ByteBuffer> AllToAllV(Communicator& comm, std::span<const ByteBuffer> per_peer,
                                  int64_t max_recv_bytes) {
  CheckPerPeer(comm, per_peer.size(), "AllToAllV: per_peer");
  CheckBound(comm, "AllToAllV", max_recv_bytes);
  const int n = comm.size();
  const int r = comm.rank();
  std::vector<ByteBuffer> out(static_cast<size_t>(n));
  out[static_cast<size_t>(r)] = per_peer[static_cast<size_t>(r)];
  if (n == 1) return out;
  // One round: the transport frames each message with its length.
  const Tag tag = comm.NextTag();
  Requests reqs;
  reqs.reserve(2 * static_cast<size_t>(n - 1));
  for (int s = 1; s < n; ++s) {
    const int from = AllToAllRecvPeer(r, n, s);
    reqs.push_back(comm.RecvUpTo(from, tag, out[static_cast<size_t>(from)], max_recv_bytes));
  }
  for (int s = 1; s < n; ++s) {
    const int to = AllToAllSendPeer(r, n, s);
    reqs.push_back(comm.Send(to, tag, per_peer[static_cast<size_t>(to)]));
  }
  WaitAll(reqs);
  return out;
}

namespace {

// Posts a receive from every peer under a fresh tag (both collectives
// receive one message from each peer, in the same peer order).
Tag PostFromEveryPeer(Communicator& comm, std::vector<ByteBuffer>& out, int64_t max_recv_bytes,
                      RequestList& requests) {
  const int n = comm.size();
  const int r = comm.rank();
  out.resize(static_cast<size_t>(n));
  requests.clear();
  if (n == 1) return 0;
  const Tag tag = comm.NextTag();
  requests.reserve(2 * static_cast<size_t>(n - 1));
  for (int s = 1; s < n; ++s) {
    const int from = AllToAllRecvPeer(r, n, s);
    requests.push_back(comm.RecvUpTo(from, tag, out[static_cast<size_t>(from)], max_recv_bytes));
  }
  return tag;
}

// requests: the n-1 receives PostFromEveryPeer posted (step order), then the
// sends. Waits for each receive and hands it on, then for the sends. A
// failed wait propagates at once, as WaitAll's does (the requests stay in
// the list, which waits for them when cleared); a failed on_message first
// waits for the rest, which its peers are sending.
void WaitEachAndClear(const Communicator& comm, RequestList& requests,
                      FunctionRef<void(int peer)> on_message) {
  const int n = comm.size();
  const int r = comm.rank();
  for (int s = 1; s < n; ++s) {
    const size_t i = static_cast<size_t>(s - 1);
    requests[i]->Wait();
    try {
      on_message(AllToAllRecvPeer(r, n, s));
    } catch (...) {
      for (size_t k = i + 1; k < requests.size(); ++k) {
        try {
          requests[k]->Wait();
        } catch (...) {  // the first error is the one the caller reports
        }
      }
      requests.clear();
      throw;
    }
  }
  for (size_t k = static_cast<size_t>(n - 1); k < requests.size(); ++k) requests[k]->Wait();
  requests.clear();
}

}  // namespace

Tag PostAllToAllV(Communicator& comm, std::vector<ByteBuffer>& out, int64_t max_recv_bytes,
                  RequestList& requests) {
  CheckBound(comm, "AllToAllV", max_recv_bytes);
  return PostFromEveryPeer(comm, out, max_recv_bytes, requests);
}

void FinishAllToAllV(Communicator& comm, Tag tag, std::span<const ByteBuffer> per_peer,
                     RequestList& requests) {
  FinishAllToAllVEach(comm, tag, per_peer, requests, [](int) {});
}

Tag PostAllGatherV(Communicator& comm, std::vector<ByteBuffer>& out, int64_t max_recv_bytes,
                   RequestList& requests) {
  CheckBound(comm, "AllGatherV", max_recv_bytes);
  return PostFromEveryPeer(comm, out, max_recv_bytes, requests);
}

void FinishAllGatherV(Communicator& comm, Tag tag, std::span<const std::byte> mine,
                      RequestList& requests) {
  FinishAllGatherVEach(comm, tag, mine, requests, [](int) {});
}

void FinishAllToAllVEach(Communicator& comm, Tag tag, std::span<const ByteBuffer> per_peer,
                         RequestList& requests, FunctionRef<void(int peer)> on_message) {
  if (comm.size() == 1) return;
  CheckPerPeer(comm, per_peer.size(), "AllToAllV: per_peer");
  FinishAllToAllVSpansEach(
      comm, tag,
      [&](int peer) { return std::span<const std::byte>(per_peer[static_cast<size_t>(peer)]); },
      requests, on_message);
}

void FinishAllGatherVEach(Communicator& comm, Tag tag, std::span<const std::byte> mine,
                          RequestList& requests, FunctionRef<void(int peer)> on_message) {
  const int n = comm.size();
  const int r = comm.rank();
  if (n == 1) return;
  for (int s = 1; s < n; ++s) requests.push_back(comm.Send(AllToAllSendPeer(r, n, s), tag, mine));
  WaitEachAndClear(comm, requests, on_message);
}

void FinishAllToAllVSpansEach(Communicator& comm, Tag tag,
                              FunctionRef<std::span<const std::byte>(int peer)> message,
                              RequestList& requests, FunctionRef<void(int peer)> on_message) {
  const int n = comm.size();
  const int r = comm.rank();
  if (n == 1) return;
  for (int s = 1; s < n; ++s) {
    const int to = AllToAllSendPeer(r, n, s);
    requests.push_back(comm.Send(to, tag, message(to)));
  }
  WaitEachAndClear(comm, requests, on_message);
}

void AllGatherVInto(Communicator& comm, std::span<const std::byte> mine,
                    std::vector<ByteBuffer>& out, int64_t max_recv_bytes, RequestList& requests) {
  const Tag tag = PostAllGatherV(comm, out, max_recv_bytes, requests);
  FinishAllGatherV(comm, tag, mine, requests);
}

std::vector<int64_t> AllGatherInt(Communicator& comm, int64_t mine) {
  const int n = comm.size();
  const int r = comm.rank();
  std::vector<int64_t> all(static_cast<size_t>(n), 0);
  all[static_cast<size_t>(r)] = mine;
  if (n == 1) return all;
  const Tag tag = comm.NextTag();
  Requests reqs;
  reqs.reserve(2 * static_cast<size_t>(n - 1));
  for (int s = 1; s < n; ++s) {
    const auto from = static_cast<size_t>(AllToAllRecvPeer(r, n, s));
    reqs.push_back(
        comm.Recv(static_cast<int>(from), tag, std::as_writable_bytes(std::span(&all[from], 1))));
  }
  const auto mine_bytes = std::as_bytes(std::span(&all[static_cast<size_t>(r)], 1));
  for (int s = 1; s < n; ++s) reqs.push_back(comm.Send(AllToAllSendPeer(r, n, s), tag, mine_bytes));
  WaitAll(reqs);
  return all;
}

std::vector<ByteBuffer> AllGatherV(Communicator& comm, std::span<const std::byte> mine,
                                   int64_t max_recv_bytes) {
  CheckBound(comm, "AllGatherV", max_recv_bytes);
  const int n = comm.size();
  const int r = comm.rank();
  std::vector<ByteBuffer> out(static_cast<size_t>(n));
  out[static_cast<size_t>(r)] = Copy(mine);
  if (n == 1) return out;
  const Tag tag = comm.NextTag();
  Requests reqs;
  reqs.reserve(2 * static_cast<size_t>(n - 1));
  for (int s = 1; s < n; ++s) {
    const int from = AllToAllRecvPeer(r, n, s);
    reqs.push_back(comm.RecvUpTo(from, tag, out[static_cast<size_t>(from)], max_recv_bytes));
  }
  for (int s = 1; s < n; ++s) reqs.push_back(comm.Send(AllToAllSendPeer(r, n, s), tag, mine));
  WaitAll(reqs);
  return out;
}

ByteBuffer Broadcast(Communicator& comm, int root, std::span<const std::byte> data,
                     int64_t max_recv_bytes) {
  const int n = comm.size();
  const int r = comm.rank();
  if (root < 0 || root >= n) {
    throw InvalidArgument(Where{r}, "Broadcast: root ", root, " is outside [0, ", n, ")");
  }
  if (n == 1) return Copy(data);
  // Two tags on every rank, so that all ranks stay in step whatever the root.
  const Tag size_tag = comm.NextTag();
  const Tag data_tag = comm.NextTag();
  if (r == root) {
    const int64_t size = static_cast<int64_t>(data.size());
    const auto size_bytes = std::as_bytes(std::span(&size, 1));
    Requests reqs;
    reqs.reserve(2 * static_cast<size_t>(n - 1));
    for (int s = 1; s < n; ++s) {
      const int to = AllToAllSendPeer(r, n, s);
      reqs.push_back(comm.Send(to, size_tag, size_bytes));
      reqs.push_back(comm.Send(to, data_tag, data));
    }
    WaitAll(reqs);
    return Copy(data);
  }
  int64_t size = 0;
  comm.Recv(root, size_tag, std::as_writable_bytes(std::span(&size, 1)))->Wait();
  if (size < 0) {
    throw FormatError(Where{r}, "Broadcast: root ", root, " announced a negative size ", size);
  }
  CheckAnnounced(comm, "Broadcast", root, size, max_recv_bytes);
  ByteBuffer out(static_cast<size_t>(size));
  comm.Recv(root, data_tag, out)->Wait();
  return out;
}

void Barrier(Communicator& comm) {
  const int n = comm.size();
  const int r = comm.rank();
  if (n == 1) return;
  // Dissemination: after round k every rank has heard, transitively, from
  // the 2^(k+1) ranks before it; ceil(log2 n) rounds reach all of them.
  for (int d : DisseminationDistances(n)) {
    const Tag tag = comm.NextTag();
    auto recv = comm.Recv(PositiveMod(int64_t{r} - d, n), tag, {});
    auto send = comm.Send(PositiveMod(int64_t{r} + d, n), tag, {});
    recv->Wait();
    send->Wait();
  }
}

}  // namespace zen
