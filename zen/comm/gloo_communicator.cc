#include "zen/comm/gloo_communicator.h"

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>

#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/tcp/loop.h>
#include <gloo/transport/unbound_buffer.h>
#include <netdb.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "zen/comm/collectives.h"
#include "zen/comm/rendezvous.h"
#include "zen/comm/rendezvous_url.h"
#include "zen/comm/tcp_store.h"
#include "zen/core/error.h"

namespace zen {
namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;
using UnboundBuffer = gloo::transport::UnboundBuffer;

constexpr Tag kMaxTag = Tag{1} << 63;
// A payload of the wrong size is read into scratch memory and dropped (so
// that the sender completes) only up to this size; above it the sender is
// left to time out.
constexpr uint64_t kMaxDiscardBytes = uint64_t{256} << 20;

Millis Since(Clock::time_point start) {
  return std::chrono::duration_cast<Millis>(Clock::now() - start);
}

// What a caught exception says, with Gloo's exception type named.
std::string Describe(std::exception_ptr ex) {
  try {
    std::rethrow_exception(ex);
  } catch (const gloo::IoException& e) {
    return std::string("gloo::IoException: ") + e.what();
  } catch (const gloo::EnforceNotMet& e) {
    return std::string("gloo::EnforceNotMet: ") + e.what();
  } catch (const gloo::Exception& e) {
    return std::string("gloo::Exception: ") + e.what();
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

uint64_t Mix64(uint64_t x) {  // splitmix64 finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Wire protocol. Every message starts with a frame on the even slot of its
// tag: an 8-byte length followed, when the payload is at most the eager
// limit, by the payload itself, so such a message is one Gloo transfer. A larger
// payload follows as a second transfer on an odd slot derived from the tag
// and the length, so that a receive expecting another length never matches
// it. The receiver posts the frame receive at full eager size (Gloo accepts
// shorter transfers into a posted receive), which lets it learn any length.
//
// The eager limit depends only on the world size, so all ranks agree on it:
// 16 MiB of posted frames per all-to-all round (n-1 receives), at least
// 64 KiB and at most 2 MiB per message (2 MiB at n <= 9). A second transfer
// costs a send-ready/receive-ready handshake whose small control messages
// queue behind the bulk data on a loaded link, so messages up to 2 MiB go
// in one (the testbed figures are in docs/performance.md).
uint64_t EagerBytes(int world) {
  constexpr uint64_t kMin = uint64_t{64} << 10, kMax = uint64_t{2} << 20;
  constexpr uint64_t kRoundBudget = uint64_t{16} << 20;
  const uint64_t peers = world > 1 ? static_cast<uint64_t>(world - 1) : 1;
  return std::clamp(kRoundBudget / peers, kMin, kMax);
}
constexpr uint64_t kFrameHeader = sizeof(uint64_t);

uint64_t FrameSlot(Tag tag) { return tag << 1; }
uint64_t PayloadSlot(Tag tag, uint64_t bytes) { return (Mix64(Mix64(tag) + bytes) << 1) | 1; }

// The frames of one communicator: memory of kFrameHeader + eager bytes with
// the Gloo buffer bound to it, reused from message to message, so a
// transfer in steady state allocates neither (a fresh 1 MiB frame per
// receive cost a malloc/free pair, often an mmap/munmap and page faults,
// and a Gloo buffer object). A frame goes back only when its transfer
// completed: after a failure Gloo may still hold it, so it is dropped as
// before. At most kPoolBytes of idle frames are kept (the sends' and the
// receives' frames of two all-to-all rounds at any world size, zen's push
// and pull posted together); above that a frame is freed. Shared
// by the communicator and its requests (a request may outlive it).
constexpr uint64_t kPoolBytes = uint64_t{64} << 20;

class FramePool {
 public:
  struct Frame {
    std::unique_ptr<std::byte[]> memory;
    std::unique_ptr<UnboundBuffer> buffer;  // bound to memory; declared after it
  };

  FramePool(std::shared_ptr<gloo::Context> ctx, uint64_t frame_bytes)
      : ctx_(std::move(ctx)),
        frame_bytes_(frame_bytes),
        max_idle_(static_cast<size_t>(std::max<uint64_t>(1, kPoolBytes / frame_bytes))) {}

  // An idle frame, or a new one (memory left untouched: only what a
  // transfer writes is ever paged in). Gloo's exceptions propagate.
  Frame Take() {
    {
      std::lock_guard lock(mu_);
      if (!idle_.empty()) {
        Frame f = std::move(idle_.back());
        idle_.pop_back();
        return f;
      }
    }
    Frame f;
    f.memory = std::make_unique_for_overwrite<std::byte[]>(frame_bytes_);
    f.buffer = ctx_->createUnboundBuffer(f.memory.get(), frame_bytes_);
    return f;
  }

  // Back after a completed transfer (freed when max_idle_ are idle).
  void Give(Frame f) noexcept {
    std::lock_guard lock(mu_);
    if (idle_.size() < max_idle_) idle_.push_back(std::move(f));
  }

 private:
  std::shared_ptr<gloo::Context> ctx_;
  uint64_t frame_bytes_;
  size_t max_idle_;
  std::mutex mu_;
  std::vector<Frame> idle_;
};

// What a request shares with the posts it queued on Gloo's loop thread
// (below). A request is destroyed only after its wait, but a failed or
// timed-out wait may leave a post still queued: the request then cancels
// it, and the loop thread skips it. `mu` is held while a post runs, so
// once a request has cancelled, none of its posts runs or is running.
struct PostState {
  std::mutex mu;
  bool cancelled = false;    // under mu
  std::exception_ptr error;  // under mu: Gloo refused the post
};

// Runs the sends and receives of a communicator's requests on Gloo's
// event-loop thread instead of the caller's.
//
// Why: Gloo's TCP pair takes its lock to post a send or receive and writes a
// notification to the peer (a syscall) while holding it. When data for that
// pair arrives meanwhile, the loop thread's try-lock fails and, its epoll
// being level-triggered, it is woken again at once: it spins until the
// caller lets go, and the loop threads spend most of a small tensor's CPU
// on such failed try-locks. Posted from the loop thread itself, the lock is
// never contended, and a round's posts go in one wake-up (an eventfd).
// docs/sections/comm.md has the figures.
class LoopPoster final : public gloo::transport::tcp::Handler {
 public:
  struct Op {
    UnboundBuffer* buffer = nullptr;
    bool is_send = false;
    int peer = 0;
    uint64_t slot = 0;
    size_t bytes = 0;
    std::shared_ptr<PostState> state;
  };

  explicit LoopPoster(std::shared_ptr<gloo::transport::tcp::Device> device)
      : device_(std::move(device)) {
    fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd_ < 0) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
    try {
      device_->registerDescriptor(fd_, EPOLLIN, this);
    } catch (...) {
      close(fd_);
      throw;
    }
  }
  ~LoopPoster() override {
    try {
      device_->unregisterDescriptor(fd_, this);  // waits for a loop tick
    } catch (...) {
    }
    // Gloo's tick wait is a condition-variable wait without a predicate (a
    // spurious wake-up returns early) and its happens-before annotation is
    // compiled out of Debian's libgloo: a handleEvents still running is
    // waited for here, which also shows ThreadSanitizer the order.
    std::lock_guard running(run_mu_);
    close(fd_);
  }
  LoopPoster(const LoopPoster&) = delete;
  LoopPoster& operator=(const LoopPoster&) = delete;

  // Queues the post; it runs on the loop thread soon, in queue order.
  void Post(Op op) {
    bool wake = false;
    {
      std::lock_guard lock(mu_);
      wake = queued_.empty();  // else a wake-up is already pending
      queued_.push_back(std::move(op));
    }
    if (wake) {
      const uint64_t one = 1;
      while (write(fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
      }
    }
  }

  void handleEvents(int /*events*/) override {
    std::lock_guard running(run_mu_);  // uncontended but for the destructor
    uint64_t count = 0;
    while (read(fd_, &count, sizeof(count)) < 0 && errno == EINTR) {
    }
    {
      std::lock_guard lock(mu_);
      running_.swap(queued_);
    }
    for (Op& op : running_) Run(op);
    running_.clear();  // keeps its capacity: no allocation in steady state
  }

 private:
  // Never throws: an exception must not leave Gloo's loop thread. A refused
  // post wakes its waiter (abortWait*), which reports the error.
  static void Run(Op& op) noexcept {
    std::lock_guard lock(op.state->mu);
    if (op.state->cancelled) return;
    try {
      if (op.is_send) {
        op.buffer->send(op.peer, op.slot, 0, op.bytes);
      } else {
        op.buffer->recv(op.peer, op.slot, 0, op.bytes);
      }
    } catch (...) {
      if (!op.state->error) op.state->error = std::current_exception();
      try {
        if (op.is_send) {
          op.buffer->abortWaitSend();
        } else {
          op.buffer->abortWaitRecv();
        }
      } catch (...) {
      }
    }
  }

  std::shared_ptr<gloo::transport::tcp::Device> device_;
  int fd_ = -1;
  std::mutex mu_;
  std::vector<Op> queued_;   // under mu_
  std::mutex run_mu_;        // held by handleEvents, taken by the destructor
  std::vector<Op> running_;  // under run_mu_ (the loop thread's)
};

// What one Send or Recv is, for error messages.
struct Transfer {
  int rank = 0;
  int peer = 0;
  Tag tag = 0;
  uint64_t bytes = 0;
  Millis timeout{0};
  bool is_send = false;
};

[[noreturn]] void ThrowTransport(const Transfer& t, const char* stage, Clock::time_point start,
                                 std::exception_ptr cause) {
  const Millis waited = Since(start);
  const char* note = waited >= t.timeout
                         ? "; Gloo closes every connection after a timeout, so this communicator "
                           "is no longer usable"
                         : "";
  throw TransportError(Where{t.rank}, t.is_send ? "send to" : "receive from", " peer ", t.peer,
                       " under tag ", t.tag, " (", t.bytes, " bytes) failed while ", stage,
                       " after ", waited.count(), " ms (timeout ", t.timeout.count(),
                       " ms): ", Describe(cause), note);
}

// Waits for one Gloo operation, posted with `post`, until the deadline.
void WaitBuffer(UnboundBuffer& buf, PostState& post, const Transfer& t, const char* stage,
                Clock::time_point start, Clock::time_point deadline) {
  const Millis left =
      std::max(Millis(1), std::chrono::duration_cast<Millis>(deadline - Clock::now()));
  bool done = false;
  try {
    done = t.is_send ? buf.waitSend(left) : buf.waitRecv(left);
  } catch (...) {
    ThrowTransport(t, stage, start, std::current_exception());
  }
  if (!done) {
    std::exception_ptr refused;
    {
      std::lock_guard lock(post.mu);
      refused = post.error;
    }
    if (refused) ThrowTransport(t, "posting", start, refused);
    ThrowTransport(t, stage, start,
                   std::make_exception_ptr(std::runtime_error("the Gloo wait was aborted")));
  }
}

// Base of both requests: waits once, remembers the outcome, and waits (bounded
// by the timeout) when destroyed unfinished, so Gloo never touches freed
// memory (a gloo UnboundBuffer, once destroyed, is invalidated in Gloo).
class GlooRequest : public Request {
 public:
  GlooRequest(Transfer t, std::shared_ptr<LoopPoster> poster)
      : t_(t), poster_(std::move(poster)), post_(std::make_shared<PostState>()) {}

  void Wait() final {
    if (!settled_) {
      settled_ = true;
      try {
        DoWait(Clock::now());
      } catch (...) {
        error_ = std::current_exception();
      }
    }
    if (error_) std::rethrow_exception(error_);
  }

 protected:
  // Subclass destructors call this before their buffers go: waits (bounded
  // by the timeout), then cancels any post still queued.
  void Settle() noexcept {
    try {
      Wait();
    } catch (...) {  // the owner chose not to wait; nobody to tell
    }
    CancelPosts();
  }
  // After this, none of this request's queued posts runs or is running.
  void CancelPosts() noexcept {
    std::lock_guard lock(post_->mu);
    post_->cancelled = true;
  }
  virtual void DoWait(Clock::time_point start) = 0;
  // Waited for, and completed: its frame may be reused.
  bool completed() const { return settled_ && !error_; }

  // Posts a send (or receive) of buf's first `bytes` bytes on Gloo's loop
  // thread; a refusal surfaces in Await.
  void Post(UnboundBuffer& buf, bool is_send, uint64_t slot, size_t bytes) {
    poster_->Post({&buf, is_send, t_.peer, slot, bytes, post_});
  }
  void Await(UnboundBuffer& buf, const char* stage, Clock::time_point start,
             Clock::time_point deadline) {
    WaitBuffer(buf, *post_, t_, stage, start, deadline);
  }

  Transfer t_;
  std::shared_ptr<LoopPoster> poster_;
  std::shared_ptr<PostState> post_;

 private:
  bool settled_ = false;
  std::exception_ptr error_;
};

class GlooSend final : public GlooRequest {
 public:
  GlooSend(gloo::Context& ctx, std::shared_ptr<LoopPoster> poster,
           std::shared_ptr<FramePool> pool, Transfer t, std::span<const std::byte> data,
           uint64_t eager_bytes)
      : GlooRequest(t, std::move(poster)), pool_(std::move(pool)) {
    const uint64_t length = data.size();
    const bool eager = length <= eager_bytes;
    const auto start = Clock::now();
    try {
      frame_ = pool_->Take();
      std::memcpy(frame_.memory.get(), &length, kFrameHeader);
      if (eager && length > 0) std::memcpy(frame_.memory.get() + kFrameHeader, data.data(), length);
      Post(*frame_.buffer, /*is_send=*/true, FrameSlot(t.tag),
           kFrameHeader + (eager ? length : 0));
      if (!eager) {
        // Gloo's buffer type is not const-correct; a send only reads.
        payload_buf_ = ctx.createUnboundBuffer(const_cast<std::byte*>(data.data()), data.size());
        Post(*payload_buf_, /*is_send=*/true, PayloadSlot(t.tag, length), length);
      }
    } catch (...) {
      CancelPosts();  // no destructor runs for a constructor that throws
      ThrowTransport(t, "posting", start, std::current_exception());
    }
  }
  ~GlooSend() override {
    Settle();
    if (completed()) pool_->Give(std::move(frame_));
  }

 private:
  void DoWait(Clock::time_point start) override {
    const auto deadline = start + t_.timeout;
    Await(*frame_.buffer, "sending the frame", start, deadline);
    if (payload_buf_) Await(*payload_buf_, "sending the payload", start, deadline);
  }

  std::shared_ptr<FramePool> pool_;
  FramePool::Frame frame_;
  std::unique_ptr<UnboundBuffer> payload_buf_;
};

// One receive: of exactly `exact.size()` bytes, or (when `out` is set) of any
// size up to `max_bytes`, written to *out.
class GlooRecv final : public GlooRequest {
 public:
  GlooRecv(gloo::Context& ctx, std::shared_ptr<LoopPoster> poster,
           std::shared_ptr<FramePool> pool, Transfer t, std::span<std::byte> exact,
           ByteBuffer* out, uint64_t max_bytes, uint64_t eager_bytes, ByteCounters* counters)
      : GlooRequest(t, std::move(poster)),
        ctx_(ctx),
        pool_(std::move(pool)),
        eager_bytes_(eager_bytes),
        exact_(exact),
        out_(out),
        max_bytes_(max_bytes),
        counters_(counters) {
    const auto start = Clock::now();
    try {
      frame_ = pool_->Take();
      Post(*frame_.buffer, /*is_send=*/false, FrameSlot(t.tag), kFrameHeader + eager_bytes_);
      if (!out_ && exact.size() > eager_bytes_) {  // the size is known: post it now
        payload_buf_ = ctx.createUnboundBuffer(exact.data(), exact.size());
        Post(*payload_buf_, /*is_send=*/false, PayloadSlot(t.tag, exact.size()), exact.size());
      }
    } catch (...) {
      CancelPosts();  // no destructor runs for a constructor that throws
      ThrowTransport(t, "posting", start, std::current_exception());
    }
  }
  ~GlooRecv() override {
    Settle();
    if (completed()) pool_->Give(std::move(frame_));
  }

 private:
  void DoWait(Clock::time_point start) override {
    const auto deadline = start + t_.timeout;
    Await(*frame_.buffer, "waiting for the frame", start, deadline);
    uint64_t length = 0;
    std::memcpy(&length, frame_.memory.get(), kFrameHeader);
    CheckLength(length, start, deadline);
    const std::byte* eager = frame_.memory.get() + kFrameHeader;
    if (out_) {
      out_->resize(length);
      if (length <= eager_bytes_) {
        std::copy_n(eager, length, out_->data());
      } else {
        ReceivePayload(std::span(*out_), start, deadline);
      }
    } else if (length <= eager_bytes_) {
      std::copy_n(eager, length, exact_.data());
    } else {
      Await(*payload_buf_, "receiving the payload", start, deadline);
    }
    counters_->AddRecv(t_.peer, length);
  }

  // FormatError when the announced length is not what this receive takes.
  void CheckLength(uint64_t length, Clock::time_point start, Clock::time_point deadline) {
    const bool fits = out_ ? length <= max_bytes_ : length == exact_.size();
    if (fits) return;
    // The payload (if any) went to the slot of its own length, never to
    // ours: our posted receive is dropped unused and the payload drained.
    payload_buf_.reset();
    if (length > eager_bytes_) Discard(length, start, deadline);
    if (out_) {
      throw FormatError(Where{t_.rank}, "message from peer ", t_.peer, " under tag ", t_.tag,
                        " has ", length, " bytes, more than the ", max_bytes_,
                        " bytes this receive can hold");
    }
    throw FormatError(Where{t_.rank}, "message from peer ", t_.peer, " under tag ", t_.tag,
                      " has ", length, " bytes, the receive expects ", exact_.size(), " bytes");
  }

  void ReceivePayload(std::span<std::byte> into, Clock::time_point start,
                      Clock::time_point deadline) {
    try {
      payload_buf_ = ctx_.createUnboundBuffer(into.data(), into.size());
    } catch (...) {
      ThrowTransport(t_, "posting the payload receive", start, std::current_exception());
    }
    Post(*payload_buf_, /*is_send=*/false, PayloadSlot(t_.tag, into.size()), into.size());
    Await(*payload_buf_, "receiving the payload", start, deadline);
  }

  // Receives and drops a payload of the announced (wrong) length, so that the
  // sender's request completes. Failures here are secondary and ignored.
  void Discard(uint64_t length, Clock::time_point start, Clock::time_point deadline) {
    if (length > kMaxDiscardBytes) return;
    std::vector<std::byte> scratch(length);
    std::unique_ptr<UnboundBuffer> buf;
    try {
      buf = ctx_.createUnboundBuffer(scratch.data(), scratch.size());
      Post(*buf, /*is_send=*/false, PayloadSlot(t_.tag, length), length);
      Await(*buf, "discarding a payload of the wrong size", start, deadline);
    } catch (...) {
    }
    CancelPosts();  // before buf and scratch go (this request ends in a FormatError)
  }

  gloo::Context& ctx_;
  std::shared_ptr<FramePool> pool_;
  uint64_t eager_bytes_;
  std::span<std::byte> exact_;
  ByteBuffer* out_;
  uint64_t max_bytes_;
  ByteCounters* counters_;
  FramePool::Frame frame_;
  std::unique_ptr<UnboundBuffer> payload_buf_;
};

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::Context> ctx, std::shared_ptr<LoopPoster> poster,
                   int rank, int size, Millis timeout)
      : Communicator(rank, size, timeout),
        ctx_(std::move(ctx)),
        poster_(std::move(poster)),
        eager_bytes_(EagerBytes(size)),
        pool_(std::make_shared<FramePool>(ctx_, kFrameHeader + eager_bytes_)),
        request_timeout_(timeout) {}

  std::unique_ptr<Request> Send(int peer, Tag tag, std::span<const std::byte> data) override {
    const Transfer t = Check(peer, tag, data.size(), /*is_send=*/true);
    auto req = std::make_unique<GlooSend>(*ctx_, poster_, pool_, t, data, eager_bytes_);
    mutable_counters().AddSent(peer, data.size());
    mutable_counters().AddMessage();
    return req;
  }

  std::unique_ptr<Request> Recv(int peer, Tag tag, std::span<std::byte> data) override {
    const Transfer t = Check(peer, tag, data.size(), /*is_send=*/false);
    return std::make_unique<GlooRecv>(*ctx_, poster_, pool_, t, data, nullptr, 0, eager_bytes_,
                                      &mutable_counters());
  }

  std::unique_ptr<Request> RecvUpTo(int peer, Tag tag, ByteBuffer& out,
                                    int64_t max_bytes) override {
    if (max_bytes < 0) {
      throw InvalidArgument(Where{rank()}, "RecvUpTo: max_bytes ", max_bytes, " is negative");
    }
    const Transfer t = Check(peer, tag, static_cast<uint64_t>(max_bytes), /*is_send=*/false);
    return std::make_unique<GlooRecv>(*ctx_, poster_, pool_, t, std::span<std::byte>(), &out,
                                      static_cast<uint64_t>(max_bytes), eager_bytes_,
                                      &mutable_counters());
  }

  // While connecting, requests may wait only for what is left of the
  // connect timeout; afterwards the full timeout again.
  void set_request_timeout(Millis t) { request_timeout_ = t; }

 private:
  Transfer Check(int peer, Tag tag, size_t bytes, bool is_send) const {
    CheckPeer(peer);
    if (tag >= kMaxTag) {
      throw InvalidArgument(Where{rank()}, "tag ", tag, " is not below 2^63 (Gloo transport)");
    }
    return Transfer{rank(), peer, tag, bytes, request_timeout_, is_send};
  }

  std::shared_ptr<gloo::Context> ctx_;
  std::shared_ptr<LoopPoster> poster_;  // shared with the requests (they may outlive this)
  uint64_t eager_bytes_;
  std::shared_ptr<FramePool> pool_;
  Millis request_timeout_;
};

// A gloo::Context whose mesh zen connects itself (Gloo's connectFullMesh
// waits up to 5x the timeout per pair, publishes uninitialized address
// padding, and reports a world-size mismatch as a failed size check).
class MeshContext final : public gloo::Context {
 public:
  MeshContext(int rank, int size) : gloo::Context(rank, size) {}
  void Adopt(std::shared_ptr<gloo::transport::Device> device,
             std::shared_ptr<gloo::transport::Context> transport) {
    device_ = std::move(device);
    transportContext_ = std::move(transport);
  }
};

// Closes every pair of `tc` once `deadline` passes (and again every 20 ms,
// for a connect that started just then) until Stop(): a pair waiting for its
// peer (Gloo waits up to 5x the timeout) then returns at once.
class ConnectWatchdog {
 public:
  ConnectWatchdog(gloo::transport::Context& tc, int rank, int size, Clock::time_point deadline)
      : thread_([this, &tc, rank, size, deadline] {
          std::unique_lock<std::mutex> lock(m_);
          if (cv_.wait_until(lock, deadline, [this] { return stop_; })) return;
          fired_ = true;
          do {
            for (int i = 0; i < size; ++i) {
              if (i == rank) continue;
              try {
                tc.getPair(i)->close();
              } catch (...) {
              }
            }
          } while (!cv_.wait_for(lock, Millis(20), [this] { return stop_; }));
        }) {}
  ~ConnectWatchdog() { Stop(); }
  // Returns whether the deadline closed the pairs.
  bool Stop() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    return fired_;
  }
  bool fired() {
    std::lock_guard<std::mutex> lock(m_);
    return fired_;
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool fired_ = false;
  std::thread thread_;
};

// Keeps Gloo's event loop ticking while a context's pairs are destroyed.
// Gloo's unregisterDescriptor waits for the loop's next tick, which an idle
// loop makes every 10 ms: tearing down the 999 listening pairs of rank 0 in
// a world of 1000 took 10 s after a 1 s rendezvous timeout. An eventfd
// written from a helper thread wakes the loop continuously meanwhile.
class LoopTicker final : public gloo::transport::tcp::Handler {
 public:
  explicit LoopTicker(std::shared_ptr<gloo::transport::tcp::Device> device)
      : device_(std::move(device)) {
    if (!device_) return;
    fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd_ < 0) return;  // teardown is then slow, not wrong
    try {
      device_->registerDescriptor(fd_, EPOLLIN, this);
    } catch (...) {
      close(fd_);
      fd_ = -1;
      return;
    }
    thread_ = std::thread([this] {
      const uint64_t one = 1;
      while (!stop_.load(std::memory_order_relaxed)) {
        while (write(fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
        }
        std::this_thread::yield();  // for the teardown only: a busy thread of short life
      }
    });
  }
  ~LoopTicker() override {
    if (fd_ < 0) return;
    stop_ = true;
    thread_.join();
    try {
      device_->unregisterDescriptor(fd_, this);
    } catch (...) {
    }
    std::lock_guard running(run_mu_);  // a handleEvents still running (see LoopPoster)
    close(fd_);
  }
  LoopTicker(const LoopTicker&) = delete;
  LoopTicker& operator=(const LoopTicker&) = delete;

  void handleEvents(int /*events*/) override {
    std::lock_guard running(run_mu_);
    uint64_t count = 0;
    while (read(fd_, &count, sizeof(count)) < 0 && errno == EINTR) {
    }
  }

 private:
  std::shared_ptr<gloo::transport::tcp::Device> device_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex run_mu_;
};

// Destroys a transport context (and its pairs) with the loop kept ticking.
void TearDown(std::shared_ptr<gloo::transport::Device>& device,
              std::shared_ptr<gloo::transport::Context>& tc) {
  if (!tc) return;
  LoopTicker ticker(std::dynamic_pointer_cast<gloo::transport::tcp::Device>(device));
  tc.reset();
}

// The descriptors this process has open now (0 when /proc is not there).
int64_t OpenDescriptors() {
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return 0;
  int64_t n = 0;
  while (::readdir(d) != nullptr) ++n;
  ::closedir(d);
  return std::max<int64_t>(0, n - 3);  // ".", ".." and the directory's own
}

// Gloo's TCP transport holds one socket per peer (a listening one until the
// pair connects): a world the descriptor limit cannot hold would fail with
// "Too many open files" only after creating that many sockets (217 s at
// 2^24 ranks), so it is refused up front.
void CheckDescriptorLimit(int rank, int size) {
  rlimit rl{};
  if (size <= 1 || ::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return;
  constexpr int64_t kSpare = 16;  // the device, its epoll and event fds, the store
  const int64_t limit = static_cast<int64_t>(std::min<rlim_t>(rl.rlim_cur, INT64_MAX / 2));
  const int64_t open_now = OpenDescriptors();
  const int64_t need = int64_t{size} - 1 + kSpare;
  if (open_now + need > limit) {
    throw InvalidArgument(Where{rank}, "ConnectGloo: world size ", size, " needs ", size - 1,
                          " sockets (one per peer) and about ", kSpare,
                          " more descriptors, but RLIMIT_NOFILE is ", limit, " and ", open_now,
                          " are open; raise the limit (ulimit -n) or use a smaller world");
  }
}

void CheckConnectArgs(int rank, int size, const GlooOptions& options) {
  if (size < 1) throw InvalidArgument(Where{rank}, "ConnectGloo: world size ", size, " < 1");
  if (rank < 0 || rank >= size) {
    throw InvalidArgument(Where{rank}, "ConnectGloo: rank is outside [0, ", size, ")");
  }
  CheckTimeout(options.timeout, "ConnectGloo", rank);
  if (options.hostname.empty()) {
    throw InvalidArgument(Where{rank},
                          "ConnectGloo: hostname is empty (name the interface address to bind)");
  }
  if (!options.job.empty() && !ValidJobId(options.job)) {
    throw InvalidArgument(Where{rank}, "ConnectGloo: job id '", options.job,
                          "' must be 1 to 128 characters of [A-Za-z0-9._-]");
  }
}

// Gloo's tcp::CreateDevice dereferences an unset result when getaddrinfo
// fails (it only checks for -1), so the name is resolved here first.
void CheckResolvable(int rank, const std::string& hostname) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int rv = ::getaddrinfo(hostname.c_str(), nullptr, &hints, &result);
  if (result != nullptr) ::freeaddrinfo(result);
  if (rv != 0) {
    throw TransportError(Where{rank}, "cannot resolve interface address '", hostname,
                         "': ", ::gai_strerror(rv));
  }
}

// Gloo's TCP transport can write to a socket whose peer has died; with the
// default SIGPIPE action that kills the surviving process instead of raising
// a TransportError. A handler the application installed is left alone.
void IgnoreSigpipeIfDefault() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
}

// The job id of a connect: options.job, or the URL's ?job=, which must agree.
std::string JobOf(int rank, const GlooOptions& options, const std::string& url_job) {
  if (!options.job.empty() && !url_job.empty() && options.job != url_job) {
    throw InvalidArgument(Where{rank}, "ConnectGloo: job id '", options.job,
                          "' differs from the rendezvous URL's job id '", url_job, "'");
  }
  return options.job.empty() ? url_job : options.job;
}

// The part of ConnectThrough after the device exists: pairs, rendezvous,
// connections and the check of the new mesh.
std::unique_ptr<Communicator> ConnectPairs(int rank, int size, gloo::rendezvous::Store& store,
                                           const GlooOptions& options, const std::string& job,
                                           Clock::time_point start, const std::string& rendezvous,
                                           std::shared_ptr<gloo::transport::Device>& device,
                                           std::shared_ptr<gloo::transport::Context>& tc,
                                           std::shared_ptr<MeshContext>& ctx);

// `rendezvous` names the store in messages ("" for a store passed in).
std::unique_ptr<Communicator> ConnectThrough(int rank, int size,
                                             std::shared_ptr<gloo::rendezvous::Store> store,
                                             const GlooOptions& options, const std::string& job,
                                             Clock::time_point start,
                                             const std::string& rendezvous) {
  IgnoreSigpipeIfDefault();
  CheckDescriptorLimit(rank, size);
  CheckResolvable(rank, options.hostname);
  std::shared_ptr<gloo::transport::Device> device;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (...) {
    throw TransportError(Where{rank}, "cannot open a TCP device on interface address '",
                         options.hostname, "': ", Describe(std::current_exception()));
  }
  auto ctx = std::make_shared<MeshContext>(rank, size);
  ctx->setTimeout(options.timeout);
  std::shared_ptr<gloo::transport::Context> tc;
  // Every failure from here on tears the pairs down with the loop ticking,
  // so the error comes within the timeout at any world size.
  try {
    return ConnectPairs(rank, size, *store, options, job, start, rendezvous, device, tc, ctx);
  } catch (...) {
    TearDown(device, tc);
    throw;
  }
}

std::unique_ptr<Communicator> ConnectPairs(int rank, int size, gloo::rendezvous::Store& store,
                                           const GlooOptions& options, const std::string& job,
                                           Clock::time_point start, const std::string& rendezvous,
                                           std::shared_ptr<gloo::transport::Device>& device,
                                           std::shared_ptr<gloo::transport::Context>& tc,
                                           std::shared_ptr<MeshContext>& ctx) {
  const Millis timeout = options.timeout;
  const Clock::time_point deadline = start + timeout;
  RendezvousValue mine{size, rank, 0, {}};
  try {
    tc = device->createContext(rank, size);
    tc->setTimeout(timeout);
    for (int i = 0; i < size; ++i) {
      if (i == rank) continue;
      if (Clock::now() >= deadline) {
        throw TransportError(Where{rank}, "ConnectGloo: creating the listening sockets for ", size - 1,
                             " peers took longer than the timeout of ", timeout.count(),
                             " ms (", i, " done)");
      }
      const std::vector<char> raw = tc->createPair(i)->address().bytes();
      const std::vector<char> clean = SanitizeTcpAddress(raw);
      mine.address_bytes = static_cast<uint32_t>(clean.size());
      mine.addresses.insert(mine.addresses.end(), clean.begin(), clean.end());
    }
  } catch (const Error&) {
    throw;
  } catch (...) {
    throw TransportError(Where{rank}, "cannot listen on '", options.hostname,
                         "': ", Describe(std::current_exception()));
  }
  RunRendezvous run;
  if (size > 1) {
    run = JoinRun(store, options.prefix, job, mine, deadline, timeout, rendezvous,
                  options.progress);
    for (int i = 0; i < size; ++i) {
      if (run.peers[static_cast<size_t>(i)].address_bytes != mine.address_bytes) {
        throw FormatError(Where{rank}, "rendezvous: rank ", i, " published addresses of ",
                          run.peers[static_cast<size_t>(i)].address_bytes,
                          " bytes, this rank's have ", mine.address_bytes,
                          " (another transport or zen version?)");
      }
    }
    // Connect every pair; a peer that published and then died or stopped
    // (or a stranger holding our port) cannot hold us past the deadline.
    ConnectWatchdog watchdog(*tc, rank, size, deadline);
    for (int i = 0; i < size; ++i) {
      if (i == rank) continue;
      std::string failure;
      try {
        if (watchdog.fired()) {
          failure = "no time left";
        } else {
          const auto a = run.peers[static_cast<size_t>(i)].AddressFor(rank);
          tc->getPair(i)->connect(std::vector<char>(a.begin(), a.end()));
        }
      } catch (...) {
        failure = Describe(std::current_exception());
      }
      if (failure.empty() && watchdog.fired()) failure = "the connection was not made in time";
      if (!failure.empty()) {
        watchdog.Stop();
        throw TransportError(Where{rank}, "connecting to rank ", i, " over TCP (",
                             options.hostname, ", run '", run.base, "') failed after ",
                             Since(start).count(), " ms (timeout ", timeout.count(),
                             " ms): ", failure);
      }
    }
    if (watchdog.Stop()) {
      throw TransportError(Where{rank}, "connecting over TCP (run '", run.base,
                           "') did not finish within the timeout of ", timeout.count(), " ms");
    }
  }
  std::shared_ptr<LoopPoster> poster;
  try {
    auto tcp = std::dynamic_pointer_cast<gloo::transport::tcp::Device>(device);
    if (!tcp) throw std::runtime_error("not Gloo's TCP device");
    poster = std::make_shared<LoopPoster>(std::move(tcp));
  } catch (...) {
    throw TransportError(Where{rank}, "cannot attach to Gloo's event loop: ",
                         Describe(std::current_exception()));
  }
  ctx->Adopt(std::move(device), std::move(tc));
  auto comm =
      std::make_unique<GlooCommunicator>(std::move(ctx), std::move(poster), rank, size, timeout);
  // A rank whose side of the mesh is up could otherwise return, finish and
  // close its sockets while a peer's side is still accepting, which the peer
  // sees as "connection closed". Leaving together rules that out. The
  // barrier may use only what is left of the timeout.
  comm->set_request_timeout(
      std::max(Millis(1), std::chrono::duration_cast<Millis>(deadline - Clock::now())));
  try {
    // Every peer must be of this run: its nonce (rank 0's, per generation)
    // comes over the connection itself, so a pair connected to a listener
    // of another job or run is caught here, on every rank that sees it.
    if (size > 1) {
      const std::vector<int64_t> nonces = AllGatherInt(*comm, static_cast<int64_t>(run.nonce));
      for (int i = 0; i < size; ++i) {
        const auto theirs = static_cast<uint64_t>(nonces[static_cast<size_t>(i)]);
        if (theirs != run.nonce) {
          throw MismatchError(
              Where{rank}, "rendezvous: rank ", i, " answered over the new mesh with nonce ",
              theirs, ", this run's (generation ", run.generation, " of '", run.base, "') is ",
              run.nonce, ": the connection reached a process of another job or run. Give each "
              "job its own directory or ?job=ID");
        }
      }
    }
    Barrier(*comm);
  } catch (const TransportError& e) {
    throw TransportError(std::string("while checking the new mesh: ") + e.what());
  }
  comm->set_request_timeout(timeout);
  comm->ResetCounters();
  return comm;
}

}  // namespace

std::unique_ptr<Communicator> ConnectGloo(int rank, int size, const GlooOptions& options) {
  CheckConnectArgs(rank, size, options);
  const auto start = Clock::now();
  const RendezvousUrl url = ParseRendezvousUrl(options.rendezvous);
  const std::string job = JobOf(rank, options, url.job);
  switch (url.kind) {
    case RendezvousUrl::Kind::kFile:
    case RendezvousUrl::Kind::kRedis:
      return ConnectThrough(rank, size, OpenStore(url.base, options.timeout), options, job, start,
                            url.base);
    case RendezvousUrl::Kind::kTcp:
      return ConnectThrough(rank, size,
                            OpenTcpStore(url.host, url.port, rank == 0, options.timeout, rank,
                                         options.secret),
                            options, job, start, url.base);
    default:
      throw InvalidArgument(Where{rank}, "ConnectGloo: rendezvous '", options.rendezvous,
                            "' must be resolved first: call RendezvousFromEnv with the "
                            "environment (the CLI and Python do) and pass its URL");
  }
}

std::unique_ptr<Communicator> ConnectGloo(int rank, int size,
                                          std::shared_ptr<gloo::rendezvous::Store> store,
                                          const GlooOptions& options) {
  CheckConnectArgs(rank, size, options);
  if (!store) throw InvalidArgument(Where{rank}, "ConnectGloo: the store is null");
  return ConnectThrough(rank, size, std::move(store), options, JobOf(rank, options, ""),
                        Clock::now(), "");
}

}  // namespace zen
