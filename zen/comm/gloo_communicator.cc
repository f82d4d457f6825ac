#include "zen/comm/gloo_communicator.h"

#include <signal.h>

#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>
#ifdef ZEN_HAVE_REDIS
#include <gloo/rendezvous/redis_store.h>
#endif

#include "zen/comm/collectives.h"
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
// 64 KiB and at most 1 MiB per message. Measured on the 8-host testbed, a
// second transfer costs a send-ready/receive-ready handshake whose small
// control messages queue behind the bulk data on a loaded link.
uint64_t EagerBytes(int world) {
  constexpr uint64_t kMin = uint64_t{64} << 10, kMax = uint64_t{1} << 20;
  constexpr uint64_t kRoundBudget = uint64_t{16} << 20;
  const uint64_t peers = world > 1 ? static_cast<uint64_t>(world - 1) : 1;
  return std::clamp(kRoundBudget / peers, kMin, kMax);
}
constexpr uint64_t kFrameHeader = sizeof(uint64_t);

uint64_t FrameSlot(Tag tag) { return tag << 1; }
uint64_t PayloadSlot(Tag tag, uint64_t bytes) { return (Mix64(Mix64(tag) + bytes) << 1) | 1; }

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

// Waits for one Gloo operation until the deadline.
void WaitBuffer(UnboundBuffer& buf, const Transfer& t, const char* stage, Clock::time_point start,
                Clock::time_point deadline) {
  const Millis left =
      std::max(Millis(1), std::chrono::duration_cast<Millis>(deadline - Clock::now()));
  bool done = false;
  try {
    done = t.is_send ? buf.waitSend(left) : buf.waitRecv(left);
  } catch (...) {
    ThrowTransport(t, stage, start, std::current_exception());
  }
  if (!done) {
    ThrowTransport(t, stage, start,
                   std::make_exception_ptr(std::runtime_error("the Gloo wait was aborted")));
  }
}

// Base of both requests: waits once, remembers the outcome, and waits (bounded
// by the timeout) when destroyed unfinished, so Gloo never touches freed
// memory (a gloo UnboundBuffer, once destroyed, is invalidated in Gloo).
class GlooRequest : public Request {
 public:
  explicit GlooRequest(Transfer t) : t_(t) {}

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
  // Subclass destructors call this before their buffers go.
  void Settle() noexcept {
    try {
      Wait();
    } catch (...) {  // the owner chose not to wait; nobody to tell
    }
  }
  virtual void DoWait(Clock::time_point start) = 0;

  Transfer t_;

 private:
  bool settled_ = false;
  std::exception_ptr error_;
};

class GlooSend final : public GlooRequest {
 public:
  GlooSend(gloo::Context& ctx, Transfer t, std::span<const std::byte> data, uint64_t eager_bytes)
      : GlooRequest(t) {
    const uint64_t length = data.size();
    const bool eager = length <= eager_bytes;
    frame_size_ = kFrameHeader + (eager ? length : 0);
    frame_ = std::make_unique_for_overwrite<std::byte[]>(frame_size_);
    std::memcpy(frame_.get(), &length, kFrameHeader);
    if (eager && length > 0) std::memcpy(frame_.get() + kFrameHeader, data.data(), length);
    const auto start = Clock::now();
    try {
      frame_buf_ = ctx.createUnboundBuffer(frame_.get(), frame_size_);
      frame_buf_->send(t.peer, FrameSlot(t.tag));
      if (!eager) {
        // Gloo's buffer type is not const-correct; a send only reads.
        payload_buf_ = ctx.createUnboundBuffer(const_cast<std::byte*>(data.data()), data.size());
        payload_buf_->send(t.peer, PayloadSlot(t.tag, length));
      }
    } catch (...) {
      ThrowTransport(t, "posting", start, std::current_exception());
    }
  }
  ~GlooSend() override { Settle(); }

 private:
  void DoWait(Clock::time_point start) override {
    const auto deadline = start + t_.timeout;
    WaitBuffer(*frame_buf_, t_, "sending the frame", start, deadline);
    if (payload_buf_) WaitBuffer(*payload_buf_, t_, "sending the payload", start, deadline);
  }

  size_t frame_size_ = 0;
  std::unique_ptr<std::byte[]> frame_;  // declared before the buffers that point into it
  std::unique_ptr<UnboundBuffer> frame_buf_;
  std::unique_ptr<UnboundBuffer> payload_buf_;
};

// One receive: of exactly `exact.size()` bytes, or (when `out` is set) of any
// size up to `max_bytes`, written to *out.
class GlooRecv final : public GlooRequest {
 public:
  GlooRecv(gloo::Context& ctx, Transfer t, std::span<std::byte> exact, ByteBuffer* out,
           uint64_t max_bytes, uint64_t eager_bytes, ByteCounters* counters)
      : GlooRequest(t),
        ctx_(ctx),
        eager_bytes_(eager_bytes),
        exact_(exact),
        out_(out),
        max_bytes_(max_bytes),
        counters_(counters),
        frame_(std::make_unique_for_overwrite<std::byte[]>(kFrameHeader + eager_bytes)) {
    const auto start = Clock::now();
    try {
      frame_buf_ = ctx.createUnboundBuffer(frame_.get(), kFrameHeader + eager_bytes_);
      frame_buf_->recv(t.peer, FrameSlot(t.tag));
      if (!out_ && exact.size() > eager_bytes_) {  // the size is known: post it now
        payload_buf_ = ctx.createUnboundBuffer(exact.data(), exact.size());
        payload_buf_->recv(t.peer, PayloadSlot(t.tag, exact.size()));
      }
    } catch (...) {
      ThrowTransport(t, "posting", start, std::current_exception());
    }
  }
  ~GlooRecv() override { Settle(); }

 private:
  void DoWait(Clock::time_point start) override {
    const auto deadline = start + t_.timeout;
    WaitBuffer(*frame_buf_, t_, "waiting for the frame", start, deadline);
    uint64_t length = 0;
    std::memcpy(&length, frame_.get(), kFrameHeader);
    CheckLength(length, start, deadline);
    const std::byte* eager = frame_.get() + kFrameHeader;
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
      WaitBuffer(*payload_buf_, t_, "receiving the payload", start, deadline);
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
      payload_buf_->recv(t_.peer, PayloadSlot(t_.tag, into.size()));
    } catch (...) {
      ThrowTransport(t_, "posting the payload receive", start, std::current_exception());
    }
    WaitBuffer(*payload_buf_, t_, "receiving the payload", start, deadline);
  }

  // Receives and drops a payload of the announced (wrong) length, so that the
  // sender's request completes. Failures here are secondary and ignored.
  void Discard(uint64_t length, Clock::time_point start, Clock::time_point deadline) {
    if (length > kMaxDiscardBytes) return;
    std::vector<std::byte> scratch(length);
    try {
      auto buf = ctx_.createUnboundBuffer(scratch.data(), scratch.size());
      buf->recv(t_.peer, PayloadSlot(t_.tag, length));
      Transfer drain = t_;
      drain.bytes = length;
      WaitBuffer(*buf, drain, "discarding a payload of the wrong size", start, deadline);
    } catch (...) {
    }
  }

  gloo::Context& ctx_;
  uint64_t eager_bytes_;
  std::span<std::byte> exact_;
  ByteBuffer* out_;
  uint64_t max_bytes_;
  ByteCounters* counters_;
  std::unique_ptr<std::byte[]> frame_;  // declared before the buffers that point into it
  std::unique_ptr<UnboundBuffer> frame_buf_;
  std::unique_ptr<UnboundBuffer> payload_buf_;
};

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::rendezvous::Context> ctx, int rank, int size,
                   Millis timeout)
      : Communicator(rank, size, timeout), ctx_(std::move(ctx)), eager_bytes_(EagerBytes(size)) {}

  std::unique_ptr<Request> Send(int peer, Tag tag, std::span<const std::byte> data) override {
    const Transfer t = Check(peer, tag, data.size(), /*is_send=*/true);
    auto req = std::make_unique<GlooSend>(*ctx_, t, data, eager_bytes_);
    mutable_counters().AddSent(peer, data.size());
    mutable_counters().AddMessage();
    return req;
  }

  std::unique_ptr<Request> Recv(int peer, Tag tag, std::span<std::byte> data) override {
    const Transfer t = Check(peer, tag, data.size(), /*is_send=*/false);
    return std::make_unique<GlooRecv>(*ctx_, t, data, nullptr, 0, eager_bytes_,
                                      &mutable_counters());
  }

  std::unique_ptr<Request> RecvUpTo(int peer, Tag tag, ByteBuffer& out,
                                    int64_t max_bytes) override {
    if (max_bytes < 0) {
      throw InvalidArgument(Where{rank()}, "RecvUpTo: max_bytes ", max_bytes, " is negative");
    }
    const Transfer t = Check(peer, tag, static_cast<uint64_t>(max_bytes), /*is_send=*/false);
    return std::make_unique<GlooRecv>(*ctx_, t, std::span<std::byte>(), &out,
                                      static_cast<uint64_t>(max_bytes), eager_bytes_,
                                      &mutable_counters());
  }

 private:
  Transfer Check(int peer, Tag tag, size_t bytes, bool is_send) const {
    CheckPeer(peer);
    if (tag >= kMaxTag) {
      throw InvalidArgument(Where{rank()}, "tag ", tag, " is not below 2^63 (Gloo transport)");
    }
    return Transfer{rank(), peer, tag, bytes, timeout(), is_send};
  }

  std::shared_ptr<gloo::rendezvous::Context> ctx_;
  uint64_t eager_bytes_;
};

// The caller's store seen through a key prefix, with Gloo's failures turned
// into TransportErrors that say what was waited for and for how long.
class RendezvousStore final : public gloo::rendezvous::Store {
 public:
  RendezvousStore(std::shared_ptr<gloo::rendezvous::Store> inner, std::string prefix, int rank,
                  int size, Millis timeout)
      : inner_(std::move(inner)),
        prefix_(std::move(prefix)),
        rank_(rank),
        size_(size),
        timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    try {
      inner_->set(Full(key), data);
    } catch (...) {
      throw TransportError(Where{rank_}, "rendezvous: publishing key '", Full(key),
                           "' failed (a key left by an earlier job with the same prefix? use a "
                           "fresh store or another prefix): ",
                           Describe(std::current_exception()));
    }
  }

  std::vector<char> get(const std::string& key) override {
    wait({key}, timeout_);
    try {
      return inner_->get(Full(key));
    } catch (...) {
      throw TransportError(Where{rank_}, "rendezvous: reading key '", Full(key),
                           "' failed: ", Describe(std::current_exception()));
    }
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  // Waits for the keys one by one, so that a timeout names the first key
  // (and the rank that should have published it) still missing.
  void wait(const std::vector<std::string>& keys, const Millis& timeout) override {
    const auto start = Clock::now();
    const Millis limit = timeout.count() > 0 ? timeout : timeout_;
    for (const std::string& key : keys) {
      const Millis left = std::max(Millis(1), limit - Since(start));
      try {
        inner_->wait({Full(key)}, left);
      } catch (...) {
        throw TransportError(Where{rank_}, "rendezvous: waited ", Since(start).count(),
                             " ms (timeout ", limit.count(), " ms) for key '", Full(key), "'",
                             Publisher(key), " of ", keys.size(), " key(s) awaited in a world of ",
                             size_, " ranks: ", Describe(std::current_exception()));
      }
    }
  }

 private:
  std::string Full(const std::string& key) const { return prefix_ + "/" + key; }

  // " (the address of rank r: ...)" for Gloo's address keys, which are the
  // rank number ("<r>"; newer Gloo releases use "rank_<r>").
  static std::string Publisher(const std::string& key) {
    std::string r = key.rfind("rank_", 0) == 0 ? key.substr(5) : key;
    if (r.empty() || r.find_first_not_of("0123456789") != std::string::npos) return "";
    return " (the address of rank " + r + ": is rank " + r +
           " running, with the same rendezvous, prefix and world size?)";
  }

  std::shared_ptr<gloo::rendezvous::Store> inner_;
  std::string prefix_;
  int rank_;
  int size_;
  Millis timeout_;
};

void CheckConnectArgs(int rank, int size, const GlooOptions& options) {
  if (size < 1) throw InvalidArgument(Where{rank}, "ConnectGloo: world size ", size, " < 1");
  if (rank < 0 || rank >= size) {
    throw InvalidArgument(Where{rank}, "ConnectGloo: rank is outside [0, ", size, ")");
  }
  if (options.timeout.count() <= 0) {
    throw InvalidArgument(Where{rank}, "ConnectGloo: timeout ", options.timeout.count(),
                          " ms is not positive");
  }
  if (options.hostname.empty()) {
    throw InvalidArgument(Where{rank},
                          "ConnectGloo: hostname is empty (name the interface address to bind)");
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

#ifdef ZEN_HAVE_REDIS
// One connection attempt, bounded by budget (at most 2 s, Gloo's own limit).
bool ProbeRedis(const std::string& host, int port, Millis budget, std::string* error) {
  const Millis limit = std::min(budget, Millis(2000));
  timeval tv{};
  tv.tv_sec = limit.count() / 1000;
  tv.tv_usec = static_cast<suseconds_t>((limit.count() % 1000) * 1000);
  redisContext* c = redisConnectWithTimeout(host.c_str(), port, tv);
  if (c == nullptr) {
    *error = "hiredis could not allocate a context";
    return false;
  }
  const bool ok = c->err == 0;
  if (!ok) *error = c->errstr;
  redisFree(c);
  return ok;
}

std::shared_ptr<gloo::rendezvous::Store> OpenRedis(const std::string& url, const std::string& where,
                                                   Millis timeout) {
  const auto colon = where.rfind(':');
  int port = 0;
  if (colon != std::string::npos && colon > 0) {
    try {
      size_t used = 0;
      port = std::stoi(where.substr(colon + 1), &used);
      if (used != where.size() - colon - 1) port = 0;
    } catch (const std::exception&) {
      port = 0;
    }
  }
  if (port <= 0 || port > 65535) {
    throw InvalidArgument(Where{}, "rendezvous URL '", url, "': expected redis://HOST:PORT");
  }
  const std::string host = where.substr(0, colon);
  const auto start = Clock::now();
  std::string last;
  for (;;) {
    // Gloo's RedisStore leaks its hiredis context when the connection fails
    // (it throws from the constructor without redisFree), so probe first.
    if (ProbeRedis(host, port, std::max(Millis(1), timeout - Since(start)), &last)) {
      try {
        return std::make_shared<gloo::rendezvous::RedisStore>(host, port);
      } catch (...) {
        last = Describe(std::current_exception());
      }
    }
    if (Since(start) >= timeout) break;
    std::this_thread::sleep_for(std::min(Millis(100), timeout));
  }
  throw TransportError(Where{}, "rendezvous: waited ", Since(start).count(), " ms (timeout ",
                       timeout.count(), " ms) to connect to the Redis server at ", host, ":", port,
                       "; last error: ", last);
}
#endif

}  // namespace

std::shared_ptr<gloo::rendezvous::Store> OpenStore(const std::string& url,
                                                   std::chrono::milliseconds timeout) {
  if (url.rfind("file:", 0) == 0) {
    const std::string dir = url.substr(5);
    if (dir.empty())
      throw InvalidArgument(Where{}, "rendezvous URL '", url, "' names no directory");
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      throw TransportError(Where{}, "rendezvous: cannot create directory '", dir,
                           "': ", ec.message());
    }
    return std::make_shared<gloo::rendezvous::FileStore>(dir);
  }
  const std::string redis = "redis://";
  if (url.rfind(redis, 0) == 0) {
#ifdef ZEN_HAVE_REDIS
    return OpenRedis(url, url.substr(redis.size()), timeout);
#else
    (void)timeout;
    throw InvalidArgument(Where{}, "rendezvous URL '", url,
                          "': this build has no Redis support (hiredis was not found)");
#endif
  }
  throw InvalidArgument(Where{}, "rendezvous URL '", url,
                        "' is neither file:DIR nor redis://HOST:PORT");
}

std::unique_ptr<Communicator> ConnectGloo(int rank, int size, const GlooOptions& options) {
  CheckConnectArgs(rank, size, options);
  return ConnectGloo(rank, size, OpenStore(options.rendezvous, options.timeout), options);
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

std::unique_ptr<Communicator> ConnectGloo(int rank, int size,
                                          std::shared_ptr<gloo::rendezvous::Store> store,
                                          const GlooOptions& options) {
  CheckConnectArgs(rank, size, options);
  if (!store) throw InvalidArgument(Where{rank}, "ConnectGloo: the store is null");
  IgnoreSigpipeIfDefault();
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
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  ctx->setTimeout(options.timeout);
  RendezvousStore rendezvous(std::move(store), options.prefix, rank, size, options.timeout);
  const auto start = Clock::now();
  try {
    ctx->connectFullMesh(rendezvous, device);
  } catch (const Error&) {
    throw;  // already says what was waited for
  } catch (...) {
    throw TransportError(Where{rank}, "connecting to the ", size - 1, " other rank(s) over TCP (",
                         options.hostname, ", prefix '", options.prefix, "') failed after ",
                         Since(start).count(), " ms (timeout ", options.timeout.count(),
                         " ms): ", Describe(std::current_exception()));
  }
  auto comm = std::make_unique<GlooCommunicator>(std::move(ctx), rank, size, options.timeout);
  // A rank whose side of the mesh is up could otherwise return, finish and
  // close its sockets while a peer's side is still accepting, which the peer
  // sees as "connection closed". Leaving together rules that out.
  try {
    Barrier(*comm);
  } catch (const TransportError& e) {
    throw TransportError(std::string("while checking the new mesh: ") + e.what());
  }
  comm->ResetCounters();
  return comm;
}

}  // namespace zen
