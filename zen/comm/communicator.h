// zen/comm/communicator.h — the only view of the network that schemes have.
//
// A Communicator connects `size()` ranks. It offers tagged, asynchronous
// point-to-point sends and receives of byte spans; everything else (count
// exchange, alltoallv, allgatherv, barrier: see collectives.h) is built on
// those calls, so a new transport implements Send, Recv and RecvUpTo (a
// receive whose size the sender decides, bounded by the receiver) and
// nothing more. RecvUpTo lets a collective skip the size-announcement round
// a plain Recv would need: a transport frames every message with its length
// anyway.
//
// Byte accounting: every Send adds its payload size to sent(peer) and every
// completed Recv adds to recv(peer). These counters are the only source of
// byte figures the project prints; transport framing (Gloo's per-message
// header) is not included and is documented as such.
//
// Tags: messages between one pair of ranks are matched by tag, and messages
// with the same (peer, tag) are delivered in the order they were sent. A
// collective call takes a fresh tag with NextTag(); since every rank makes
// the same calls in the same order, the tags agree without communication.
//
// Usage:
//   std::vector<std::byte> in(n_bytes);
//   auto r = comm.Recv(peer, tag, in);       // post receives first
//   auto s = comm.Send(peer, tag, out);      // `out` must outlive the request
//   s->Wait(); r->Wait();                    // TransportError on timeout/death
//
//   std::vector<std::byte> any;              // size unknown, at most 1 MiB
//   comm.RecvUpTo(peer, tag, any, 1 << 20)->Wait();
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace zen {

using ByteBuffer = std::vector<std::byte>;
using Tag = uint64_t;

// A pending send or receive. Destroying an unfinished request waits for it
// (bounded by the communicator timeout) so buffers are never left in use.
class Request {
 public:
  virtual ~Request() = default;
  // Blocks until the transfer is complete. TransportError on timeout or a
  // failed peer; the message names the peer, the tag and the time waited.
  virtual void Wait() = 0;
};

// Per-peer byte counters (payload bytes).
class ByteCounters {
 public:
  explicit ByteCounters(int size) : sent_(static_cast<size_t>(size)), recv_(static_cast<size_t>(size)) {}
  void AddSent(int peer, uint64_t n) { sent_[static_cast<size_t>(peer)] += n; }
  void AddRecv(int peer, uint64_t n) { recv_[static_cast<size_t>(peer)] += n; }
  uint64_t sent(int peer) const { return sent_[static_cast<size_t>(peer)].load(); }
  uint64_t recv(int peer) const { return recv_[static_cast<size_t>(peer)].load(); }
  uint64_t total_sent() const;
  uint64_t total_recv() const;
  uint64_t messages_sent() const { return messages_.load(); }
  void AddMessage() { ++messages_; }
  void Reset();

 private:
  std::vector<std::atomic<uint64_t>> sent_;
  std::vector<std::atomic<uint64_t>> recv_;
  std::atomic<uint64_t> messages_{0};
};

class Communicator {
 public:
  Communicator(int rank, int size, std::chrono::milliseconds timeout)
      : rank_(rank), size_(size), timeout_(timeout), counters_(size) {}
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Sends data to peer (peer != rank). data must stay valid and unchanged
  // until the request completes. An empty span is a valid message.
  virtual std::unique_ptr<Request> Send(int peer, Tag tag, std::span<const std::byte> data) = 0;
  // Receives exactly data.size() bytes from peer under tag. A message of
  // another size is a FormatError (or TransportError where the backend
  // cannot tell the two apart).
  virtual std::unique_ptr<Request> Recv(int peer, Tag tag, std::span<std::byte> data) = 0;

  // Receives one message of any size up to max_bytes under tag; on
  // completion `out` holds exactly the message. A longer message is a
  // FormatError that names both sizes, raised before `out` grows beyond
  // max_bytes. `out` must stay alive until the request completes.
  virtual std::unique_ptr<Request> RecvUpTo(int peer, Tag tag, ByteBuffer& out,
                                            int64_t max_bytes) = 0;

  // A fresh tag for one collective step; identical on all ranks as long as
  // they issue the same sequence of calls.
  Tag NextTag() { return next_tag_++; }

  // Set when the metadata exchange found the ranks out of step (one made a
  // call the others did not): calls can no longer be paired, so every later
  // Scheme call on this communicator raises MismatchError naming `reason`.
  // Empty while in step. Not thread-safe (calls on one communicator are
  // made one at a time).
  void MarkOutOfStep(std::string reason) {
    if (out_of_step_.empty()) out_of_step_ = std::move(reason);
  }
  const std::string& out_of_step() const { return out_of_step_; }

  const ByteCounters& counters() const { return counters_; }
  void ResetCounters() { counters_.Reset(); }

 protected:
  ByteCounters& mutable_counters() { return counters_; }
  // Checks peer is in [0, size) and not this rank; InvalidArgument otherwise.
  void CheckPeer(int peer) const;

 private:
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  ByteCounters counters_;
  Tag next_tag_ = 1;
  std::string out_of_step_;
};

// Views of trivially copyable arrays as bytes.
template <typename T>
std::span<const std::byte> AsBytes(std::span<const T> s) {
  return std::as_bytes(s);
}
template <typename T>
std::span<const std::byte> AsBytes(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}
template <typename T>
std::span<std::byte> AsWritableBytes(std::vector<T>& v) {
  return std::as_writable_bytes(std::span<T>(v));
}

}  // namespace zen
