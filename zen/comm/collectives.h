// zen/comm/collectives.h — the collective helpers schemes build on, written
// only against Communicator::Send/Recv. Each one here has a caller in the
// product (a scheme); AllToAllV comes in the one-call form (sparse_ps,
// omnireduce) and the Post/Finish halves (ZEN), which also hand each
// message on as it arrives (Finish*Each) or send windows of one buffer
// (FinishAllToAllVSpansEach).
//
// Peer pattern (see peer_pattern.h, unit-tested on its own): in step s of
// 1..n-1, rank r sends to (r + s) mod n and receives from (r - s) mod n, with
// all steps in flight at once. Every rank talks to a different peer at each
// step, so no rank sees incast.
//
// Usage:
//   // Each rank sends per_peer[p] to rank p and gets what every p sent it.
//   // max_bytes: the largest message this caller can decode (required: a
//   // peer's length prefix is received data).
//   std::vector<std::vector<std::byte>> got = zen::AllToAllV(comm, per_peer, max_bytes);
//   std::vector<std::vector<std::byte>> all = zen::AllGatherV(comm, mine, max_bytes);
//   zen::Barrier(comm);
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "zen/comm/communicator.h"
#include "zen/core/function_ref.h"

namespace zen {

// No bound on a received message. The bound is a required argument (a
// peer's announced length is received data, and an unbounded receive in
// auto's trial round once allocated whatever a peer announced): library
// code passes the largest message it can decode; kAnyBytes is for tests.
inline constexpr int64_t kAnyBytes = INT64_MAX;

// per_peer[p] goes to rank p (per_peer[rank] is returned to itself, never
// sent), in one round: sizes travel in the transport's frames (RecvUpTo),
// not in a round of their own. Returns what each rank sent here. A peer
// sending more than max_recv_bytes is a FormatError raised before anything
// that large is allocated (pass the largest message the caller can decode).
std::vector<ByteBuffer> AllToAllV(Communicator& comm, std::span<const ByteBuffer> per_peer,
                                  int64_t max_recv_bytes);

// Every rank contributes `mine`; returns all contributions indexed by rank.
// One round, bounded like AllToAllV.
std::vector<ByteBuffer> AllGatherV(Communicator& comm, std::span<const std::byte> mine,
                                   int64_t max_recv_bytes);

// Every rank contributes one int64; returns all of them indexed by rank.
std::vector<int64_t> AllGatherInt(Communicator& comm, int64_t mine);

// Root's data is returned on every rank.
ByteBuffer Broadcast(Communicator& comm, int root, std::span<const std::byte> data,
                     int64_t max_recv_bytes);

// Buffer-reusing form (agsparse's hot path): `out` is resized to n and each
// out[p] keeps its capacity across calls, so a receive of a size seen before
// does not allocate; out[rank] is left untouched (the caller holds its own
// message: no copy). `requests` is scratch kept by the caller.
using RequestList = std::vector<std::unique_ptr<Request>>;
void AllGatherVInto(Communicator& comm, std::span<const std::byte> mine,
                    std::vector<ByteBuffer>& out, int64_t max_recv_bytes, RequestList& requests);

// AllToAllV and AllGatherV in two halves, so that the receives are posted
// before the local work that produces what is sent: a peer that is ready
// first then sends at once (over Gloo its transfer finds this rank's
// receive-ready already there) instead of waiting for this rank to reach the
// collective. Post* takes the collective's tag (comm.NextTag()), so every
// rank must post its collectives in the same order; Finish* sends and waits
// for every request of that collective (`requests` belongs to it until
// then). Finishing with an empty message tells the peers this rank failed
// (no scheme sends an empty message otherwise): they get it at once instead
// of waiting out the timeout.
Tag PostAllToAllV(Communicator& comm, std::vector<ByteBuffer>& out, int64_t max_recv_bytes,
                  RequestList& requests);
void FinishAllToAllV(Communicator& comm, Tag tag, std::span<const ByteBuffer> per_peer,
                     RequestList& requests);
Tag PostAllGatherV(Communicator& comm, std::vector<ByteBuffer>& out, int64_t max_recv_bytes,
                   RequestList& requests);
void FinishAllGatherV(Communicator& comm, Tag tag, std::span<const std::byte> mine,
                      RequestList& requests);

// The same Finish steps, with each received message handed on as soon as it
// is complete: after posting the sends, the receives are waited for one at
// a time in the order the peers send them (step s = 1..n-1: from rank
// (r - s) mod n) and on_message(peer) runs for each while the later ones
// are still in flight (ZEN decodes a pull message into its output while the
// others travel); then the sends are waited for. A message that arrives
// before an earlier peer's waits for it, but its transfer does not. When
// on_message throws, the remaining requests are waited for (their errors
// dropped: the first error is the one to report) before the exception
// propagates; a failed wait propagates at once, as in the Finish steps.
void FinishAllToAllVEach(Communicator& comm, Tag tag, std::span<const ByteBuffer> per_peer,
                         RequestList& requests, FunctionRef<void(int peer)> on_message);
void FinishAllGatherVEach(Communicator& comm, Tag tag, std::span<const std::byte> mine,
                          RequestList& requests, FunctionRef<void(int peer)> on_message);

// FinishAllToAllVEach with each peer's message a span of the caller's
// buffers, given by message(peer) when it is sent (no copy): ZEN's grouped
// pull sends each peer a different window of one buffer. Posted with
// PostAllToAllV; an empty span tells the peer this rank failed, as for the
// other Finish steps.
void FinishAllToAllVSpansEach(Communicator& comm, Tag tag,
                              FunctionRef<std::span<const std::byte>(int peer)> message,
                              RequestList& requests, FunctionRef<void(int peer)> on_message);

// Returns once every rank has entered.
void Barrier(Communicator& comm);

}  // namespace zen
