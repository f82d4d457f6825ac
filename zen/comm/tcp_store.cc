// zen's TCP store: see tcp_store.h.
//
// Wire protocol (host byte order; both sides are the same build):
//   request:  u8 op, u32 key length, key, and for kSet: u32 value length, value
//             (kHello: the "key" is the job's secret)
//   response: kHello: u8 1 (a wrong secret closes the connection instead)
//             kSet: u8 (1 stored, 0 the key existed)
//             kHas: u8 (1 present)
//             kGet: u8 (1 present), and when present: u32 length, value
// A connection's first request must be kHello with the job's secret; any
// other first request closes it.
//
// Bounds: a client that pipelines requests and never reads the replies must
// not make the server buffer without limit. The server parses a client's
// next request only while that client has less than kOutHigh bytes of
// replies unsent and all clients together less than kOutTotal, and stops
// reading from it meanwhile; a client with replies unsent and no progress
// for the store's timeout (at least 1 s) is disconnected.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "zen/comm/store.h"
#include "zen/comm/tcp_store.h"
#include "zen/comm/timeout.h"
#include "zen/core/error.h"

namespace zen {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

namespace {

enum Op : uint8_t { kSet = 1, kGet = 2, kHas = 3, kHello = 4 };
constexpr uint32_t kMaxKey = 4096;
constexpr uint32_t kMaxValue = uint32_t{16} << 20;
constexpr uint64_t kMaxTotal = uint64_t{256} << 20;
constexpr size_t kMaxConnections = 4096;
constexpr uint32_t kMaxSecret = 256;
// Unsent replies: a client's next request is parsed only below kOutHigh
// (so it holds at most kOutHigh plus one value), all clients' only below
// kOutTotal.
constexpr size_t kOutHigh = size_t{1} << 20;
constexpr size_t kOutTotal = size_t{64} << 20;

Millis Since(Clock::time_point start) {
  return std::chrono::duration_cast<Millis>(Clock::now() - start);
}

addrinfo* Resolve(const std::string& host, int port, bool passive, int rank) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const int rv = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rv != 0 || res == nullptr) {
    throw TransportError(Where{rank}, "TCP store: cannot resolve '", host, "': ", ::gai_strerror(rv));
  }
  return res;
}

// Compares without an early exit, so the time taken does not tell how much
// of a guessed secret was right.
bool SameSecret(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

}  // namespace

// The key/value map, shared by the server thread and rank 0's own calls.
class TcpStoreTable {
 public:
  bool TrySet(const std::string& key, std::vector<char> value) {
    std::lock_guard<std::mutex> lock(m_);
    if (map_.count(key)) return false;
    if (total_ + key.size() + value.size() > kMaxTotal) {
      throw TransportError(Where{}, "TCP store: more than ", kMaxTotal, " bytes stored");
    }
    total_ += key.size() + value.size();
    map_.emplace(key, std::move(value));
    return true;
  }
  bool Get(const std::string& key, std::vector<char>* out) {
    std::lock_guard<std::mutex> lock(m_);
    auto it = map_.find(key);
    if (it == map_.end()) return false;
    if (out) *out = it->second;
    return true;
  }
  // Appends "found, length, value" (or "0") for key to out.
  void AppendGet(const std::string& key, std::vector<char>& out) {
    std::lock_guard<std::mutex> lock(m_);
    auto it = map_.find(key);
    out.push_back(it == map_.end() ? 0 : 1);
    if (it == map_.end()) return;
    const uint32_t n = static_cast<uint32_t>(it->second.size());
    const char* p = reinterpret_cast<const char*>(&n);
    out.insert(out.end(), p, p + 4);
    out.insert(out.end(), it->second.begin(), it->second.end());
  }

 private:
  std::mutex m_;
  std::unordered_map<std::string, std::vector<char>> map_;
  uint64_t total_ = 0;
};

std::shared_ptr<TcpStoreTable> NewTcpStoreTable() { return std::make_shared<TcpStoreTable>(); }

TcpStoreFraming ServeTcpStoreRequests(TcpStoreTable& table, std::span<const char> in,
                                      std::vector<char>& out, size_t out_limit, bool& hello_done,
                                      std::string_view secret) {
  TcpStoreFraming result;
  size_t at = 0;
  auto u32 = [&](size_t pos, uint32_t* v) {
    if (in.size() < pos + 4) return false;
    std::memcpy(v, in.data() + pos, 4);
    return true;
  };
  while (out.size() < out_limit) {
    if (in.size() < at + 5) break;
    const uint8_t op = static_cast<uint8_t>(in[at]);
    uint32_t klen = 0;
    u32(at + 1, &klen);
    if (!hello_done && op != kHello) return {at, false};
    if (op < kSet || op > kHello || klen > kMaxKey) return {at, false};
    if (op == kHello && (hello_done || klen > kMaxSecret)) return {at, false};
    size_t need = at + 5 + klen;
    uint32_t vlen = 0;
    if (op == kSet) {
      if (!u32(need, &vlen)) break;
      if (vlen > kMaxValue) return {at, false};
      need += 4 + vlen;
    }
    if (in.size() < need) break;
    const std::string key(in.data() + at + 5, klen);
    if (op == kHello) {
      if (!SameSecret(key, secret)) return {at, false};
      hello_done = true;
      out.push_back(1);
    } else if (op == kSet) {
      std::vector<char> value(in.begin() + static_cast<std::ptrdiff_t>(need - vlen),
                              in.begin() + static_cast<std::ptrdiff_t>(need));
      bool stored = false;
      try {
        stored = table.TrySet(key, std::move(value));
      } catch (const Error&) {
        return {at, false};
      }
      out.push_back(stored ? 1 : 0);
    } else if (op == kHas) {
      out.push_back(table.Get(key, nullptr) ? 1 : 0);
    } else {
      table.AppendGet(key, out);
    }
    at = need;
  }
  result.consumed = at;
  return result;
}

namespace {

class Server {
 public:
  Server(const std::string& host, int port, int rank, Millis stall_limit, std::string secret)
      : table_(NewTcpStoreTable()), stall_limit_(stall_limit), secret_(std::move(secret)) {
    addrinfo* res = Resolve(host, port, true, rank);
    std::string last = "no address";
    for (addrinfo* a = res; a != nullptr && fd_ < 0; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      const int on = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
      if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
        fd_ = fd;
      } else {
        last = std::strerror(errno);
        ::close(fd);
      }
    }
    ::freeaddrinfo(res);
    if (fd_ < 0) {
      throw TransportError(Where{rank}, "TCP store: cannot listen on ", host, ":", port, ": ", last,
                           " (is the port taken, e.g. by another job given the same "
                           "tcp://HOST:PORT? each job needs its own port; under torchrun zen "
                           "uses MASTER_PORT+1)");
    }
    if (::pipe2(wake_, O_CLOEXEC) != 0) {
      ::close(fd_);
      throw TransportError(Where{rank}, "TCP store: pipe: ", std::strerror(errno));
    }
    thread_ = std::thread([this] { Loop(); });
  }
  ~Server() {
    const char c = 0;
    (void)!::write(wake_[1], &c, 1);
    thread_.join();
    for (auto& [fd, conn] : conns_) ::close(fd);
    ::close(fd_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }
  TcpStoreTable& table() { return *table_; }

 private:
  struct Conn {
    std::vector<char> in;
    std::vector<char> out;
    size_t sent = 0;  // of out
    bool hello_done = false;
    Clock::time_point progress = Clock::now();  // the last send that moved bytes
    size_t pending() const { return out.size() - sent; }
  };

  bool MayParse(const Conn& c) const { return c.pending() < kOutHigh && out_total_ < kOutTotal; }

  void Loop() {
    std::vector<pollfd> fds;
    for (;;) {
      fds.clear();
      fds.push_back({wake_[0], POLLIN, 0});
      fds.push_back({fd_, static_cast<short>(conns_.size() < kMaxConnections ? POLLIN : 0), 0});
      bool waiting = false;
      for (auto& [fd, c] : conns_) {
        // Read only what may be parsed now (and one request's worth at most).
        const bool read = MayParse(c) && c.in.size() < 9 + kMaxKey + size_t{kMaxValue};
        const short ev = static_cast<short>((read ? POLLIN : 0) | (c.pending() ? POLLOUT : 0));
        waiting = waiting || c.pending() > 0 || !read;
        fds.push_back({fd, ev, 0});
      }
      if (::poll(fds.data(), fds.size(), waiting ? 100 : -1) < 0 && errno != EINTR) return;
      if (fds[0].revents) return;
      if (fds[1].revents & POLLIN) {
        const int c = ::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c >= 0) conns_[c];
      }
      for (size_t i = 2; i < fds.size(); ++i) {
        if (!Serve(fds[i].fd, fds[i].revents)) Drop(fds[i].fd);
      }
    }
  }

  void Drop(int fd) {
    auto it = conns_.find(fd);
    if (it == conns_.end()) return;
    out_total_ -= it->second.pending();
    ::close(fd);
    conns_.erase(it);
  }

  // false: close the connection.
  bool Serve(int fd, short events) {
    Conn& c = conns_[fd];
    if (events & (POLLERR | POLLNVAL)) return false;
    if (events & (POLLIN | POLLHUP)) {
      char buf[65536];
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n == 0) return false;
      if (n < 0 && errno != EAGAIN && errno != EINTR) return false;
      if (n > 0) c.in.insert(c.in.end(), buf, buf + n);
    }
    if (!Parse(c)) return false;
    while (c.pending() > 0) {
      const ssize_t n = ::send(fd, c.out.data() + c.sent, c.pending(), MSG_NOSIGNAL);
      if (n < 0) {
        if (errno != EAGAIN && errno != EINTR) return false;
        break;
      }
      c.sent += static_cast<size_t>(n);
      out_total_ -= static_cast<size_t>(n);
      c.progress = Clock::now();
    }
    if (c.pending() == 0) {
      c.out.clear();
      c.sent = 0;
      if (!Parse(c)) return false;  // requests held back while replies were pending
    }
    // A client that leaves its replies unread for the stall limit is dropped.
    return c.pending() == 0 || Clock::now() - c.progress < stall_limit_;
  }

  // Handles the complete requests in c.in that the bounds allow; false for a
  // malformed one.
  bool Parse(Conn& c) {
    if (!MayParse(c) || c.in.empty()) return true;
    const size_t before = c.out.size();
    if (c.pending() == 0) c.progress = Clock::now();
    const size_t limit = c.out.size() + std::min(kOutHigh - c.pending(), kOutTotal - out_total_);
    const TcpStoreFraming r = ServeTcpStoreRequests(*table_, c.in, c.out, limit, c.hello_done, secret_);
    out_total_ += c.out.size() - before;
    if (!r.ok) return false;
    c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(r.consumed));
    return true;
  }

  std::shared_ptr<TcpStoreTable> table_;
  Millis stall_limit_;
  std::string secret_;
  int fd_ = -1;
  int wake_[2] = {-1, -1};
  std::map<int, Conn> conns_;
  size_t out_total_ = 0;  // unsent reply bytes of all connections
  std::thread thread_;
};

class TcpStore final : public gloo::rendezvous::Store, public KeyCheck, public AtomicSet {
 public:
  TcpStore(std::string host, int port, bool host_it, Millis timeout, int rank, std::string secret)
      : host_(std::move(host)),
        port_(port),
        timeout_(timeout),
        rank_(rank),
        secret_(std::move(secret)),
        deadline_(Clock::now() + timeout) {
    if (host_it) {
      server_ = std::make_unique<Server>(host_, port_, rank_, std::max(timeout_, Millis(1000)),
                                         secret_);
    }
  }
  ~TcpStore() override {
    if (fd_ >= 0) ::close(fd_);
  }

  void set(const std::string& key, const std::vector<char>& data) override {
    if (!TrySet(key, data)) {
      throw TransportError(Where{rank_}, "TCP store: key '", key, "' already exists");
    }
  }
  bool TrySet(const std::string& key, const std::vector<char>& data) override {
    CheckSizes(key, data.size());
    if (server_) return server_->table().TrySet(key, data);
    std::lock_guard<std::mutex> lock(m_);
    std::vector<char> req = Request(kSet, key);
    const uint32_t n = static_cast<uint32_t>(data.size());
    const char* p = reinterpret_cast<const char*>(&n);
    req.insert(req.end(), p, p + 4);
    req.insert(req.end(), data.begin(), data.end());
    return Call(req, key) != 0;
  }
  bool Has(const std::string& key) override {
    CheckSizes(key, 0);
    if (server_) return server_->table().Get(key, nullptr);
    std::lock_guard<std::mutex> lock(m_);
    return Call(Request(kHas, key), key) != 0;
  }
  std::vector<char> get(const std::string& key) override {
    wait({key}, timeout_);
    std::vector<char> value;
    if (server_) {
      server_->table().Get(key, &value);
      return value;
    }
    std::lock_guard<std::mutex> lock(m_);
    if (Call(Request(kGet, key), key) == 0) {
      throw TransportError(Where{rank_}, "TCP store: key '", key, "' vanished");
    }
    uint32_t n = 0;
    ReadAll(reinterpret_cast<char*>(&n), 4, key);
    if (n > kMaxValue) throw FormatError(Where{rank_}, "TCP store: value of ", n, " bytes");
    value.resize(n);
    ReadAll(value.data(), n, key);
    return value;
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const Millis& timeout) override {
    const auto start = Clock::now();
    for (const std::string& key : keys) {
      while (!Has(key)) {
        if (Since(start) >= timeout) {
          throw TransportError(Where{rank_}, "TCP store: key '", key, "' did not appear within ",
                               timeout.count(), " ms");
        }
        std::this_thread::sleep_for(Millis(5));
      }
    }
  }

 private:
  void CheckSizes(const std::string& key, size_t value) const {
    if (key.size() > kMaxKey || value > kMaxValue) {
      throw InvalidArgument(Where{rank_}, "TCP store: key of ", key.size(), " bytes or value of ",
                            value, " bytes is too large");
    }
  }
  static std::vector<char> Request(Op op, const std::string& key) {
    std::vector<char> r(5 + key.size());
    r[0] = static_cast<char>(op);
    const uint32_t n = static_cast<uint32_t>(key.size());
    std::memcpy(r.data() + 1, &n, 4);
    std::memcpy(r.data() + 5, key.data(), key.size());
    return r;
  }

  // Sends a request and returns the first response byte; connects first
  // (retrying until the timeout since the first attempt).
  uint8_t Call(const std::vector<char>& req, const std::string& key) {
    Connect();
    // No reply is waited for past the store's deadline (a stopped rank 0
    // must not hold a rank longer than the timeout), but for 100 ms, so that
    // the calls that word an error after the deadline can still be answered.
    const Millis left = std::clamp(
        std::chrono::duration_cast<Millis>(deadline_ - Clock::now()), Millis(100), Millis(10000));
    timeval tv{};
    tv.tv_sec = left.count() / 1000;
    tv.tv_usec = static_cast<suseconds_t>((left.count() % 1000) * 1000);
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    size_t done = 0;
    while (done < req.size()) {
      const ssize_t n = ::send(fd_, req.data() + done, req.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) Fail("sending a request for key '" + key + "'");
      done += static_cast<size_t>(n);
    }
    char c = 0;
    ReadAll(&c, 1, key);
    return static_cast<uint8_t>(c);
  }
  void ReadAll(char* p, size_t n, const std::string& key) {
    size_t done = 0;
    while (done < n) {
      const ssize_t r = ::recv(fd_, p + done, n - done, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) Fail("reading the reply for key '" + key + "'");
      done += static_cast<size_t>(r);
    }
  }
  [[noreturn]] void Fail(const std::string& what) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw TransportError(Where{rank_}, "TCP store at ", host_, ":", port_, ": ", what, ": ",
                         err ? std::strerror(err) : "connection closed");
  }
  void Connect() {
    if (fd_ >= 0) return;
    if (first_attempt_ == Clock::time_point{}) first_attempt_ = Clock::now();
    std::string last;
    for (;;) {
      addrinfo* res = Resolve(host_, port_, false, rank_);
      for (addrinfo* a = res; a != nullptr && fd_ < 0; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
          timeval tv{};
          const Millis io = std::min<Millis>(timeout_, Millis(10000));
          tv.tv_sec = io.count() / 1000;
          tv.tv_usec = static_cast<suseconds_t>((io.count() % 1000) * 1000);
          ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
          ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
          const int on = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
          fd_ = fd;
        } else {
          last = std::strerror(errno);
          ::close(fd);
        }
      }
      ::freeaddrinfo(res);
      if (fd_ >= 0) {
        Hello();
        return;
      }
      if (Since(first_attempt_) >= timeout_) {
        throw TransportError(Where{rank_}, "rendezvous: waited ", Since(first_attempt_).count(),
                             " ms (timeout ", timeout_.count(), " ms) to connect to the TCP store at ",
                             host_, ":", port_, " (hosted by rank 0); last error: ", last);
      }
      std::this_thread::sleep_for(Millis(50));
    }
  }

  // The first request of a connection: the job's secret. The server closes
  // the connection when it differs.
  void Hello() {
    std::vector<char> req = Request(kHello, secret_);
    size_t done = 0;
    while (done < req.size()) {
      const ssize_t n = ::send(fd_, req.data() + done, req.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) Fail("sending the job's secret");
      done += static_cast<size_t>(n);
    }
    char c = 0;
    ssize_t r = 0;
    while ((r = ::recv(fd_, &c, 1, 0)) < 0 && errno == EINTR) {
    }
    if (r <= 0 || c != 1) {
      const int err = r < 0 ? errno : 0;
      ::close(fd_);
      fd_ = -1;
      throw TransportError(Where{rank_}, "TCP store at ", host_, ":", port_,
                           " refused this rank: its secret differs from rank 0's (every rank of "
                           "a job needs the same ZEN_STORE_SECRET, or the same launcher "
                           "variables; or another program listens on this port)",
                           err ? std::string(": ") + std::strerror(err) : std::string());
    }
  }

  std::string host_;
  int port_;
  Millis timeout_;
  int rank_;
  std::string secret_;
  Clock::time_point deadline_;
  std::unique_ptr<Server> server_;
  std::mutex m_;
  int fd_ = -1;
  Clock::time_point first_attempt_{};
};

}  // namespace

std::shared_ptr<gloo::rendezvous::Store> OpenTcpStore(const std::string& host, int port,
                                                      bool host_it, Millis timeout, int rank,
                                                      const std::string& secret) {
  CheckTimeout(timeout, "OpenTcpStore", rank);
  if (port < 1 || port > 65535) {
    throw InvalidArgument(Where{rank}, "TCP store: port ", port, " is outside [1, 65535]");
  }
  if (secret.size() > kMaxSecret) {
    throw InvalidArgument(Where{rank}, "TCP store: the secret has ", secret.size(),
                          " bytes, at most ", kMaxSecret);
  }
  return std::make_shared<TcpStore>(host, port, host_it, timeout, rank, secret);
}

}  // namespace zen
