// zen's TCP store: see OpenTcpStore in rendezvous.h.
//
// Wire protocol (host byte order; both sides are the same build):
//   request:  u8 op, u32 key length, key, and for kSet: u32 value length, value
//   response: kSet: u8 (1 stored, 0 the key existed)
//             kHas: u8 (1 present)
//             kGet: u8 (1 present), and when present: u32 length, value
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "zen/comm/rendezvous.h"
#include "zen/core/error.h"

namespace zen {
namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

enum Op : uint8_t { kSet = 1, kGet = 2, kHas = 3 };
constexpr uint32_t kMaxKey = 4096;
constexpr uint32_t kMaxValue = uint32_t{16} << 20;
constexpr uint64_t kMaxTotal = uint64_t{256} << 20;
constexpr size_t kMaxConnections = 4096;

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

// The key/value map, shared by the server thread and rank 0's own calls.
class Table {
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

 private:
  std::mutex m_;
  std::unordered_map<std::string, std::vector<char>> map_;
  uint64_t total_ = 0;
};

class Server {
 public:
  Server(const std::string& host, int port, int rank) {
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
                           " (is the port taken, e.g. by another job given the same tcp://HOST:PORT? each job needs "
                           "its own port; under torchrun zen uses MASTER_PORT+1)");
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
  Table& table() { return table_; }

 private:
  struct Conn {
    std::vector<char> in;
    std::vector<char> out;
  };

  void Loop() {
    std::vector<pollfd> fds;
    for (;;) {
      fds.clear();
      fds.push_back({wake_[0], POLLIN, 0});
      fds.push_back({fd_, static_cast<short>(conns_.size() < kMaxConnections ? POLLIN : 0), 0});
      for (auto& [fd, c] : conns_) {
        fds.push_back({fd, static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
      }
      if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
      if (fds[0].revents) return;
      if (fds[1].revents & POLLIN) {
        const int c = ::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c >= 0) conns_[c];
      }
      for (size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        if (!Serve(fds[i].fd, fds[i].revents)) {
          ::close(fds[i].fd);
          conns_.erase(fds[i].fd);
        }
      }
    }
  }

  // false: close the connection.
  bool Serve(int fd, short events) {
    Conn& c = conns_[fd];
    if (events & (POLLERR | POLLNVAL)) return false;
    if (events & (POLLIN | POLLHUP)) {
      char buf[65536];
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n == 0) return false;
      if (n < 0) return errno == EAGAIN || errno == EINTR;
      c.in.insert(c.in.end(), buf, buf + n);
      if (!Parse(c)) return false;
    }
    while (!c.out.empty()) {
      const ssize_t n = ::send(fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (n < 0) return errno == EAGAIN || errno == EINTR;
      c.out.erase(c.out.begin(), c.out.begin() + n);
    }
    return true;
  }

  // Handles every complete request in c.in; false for a malformed one.
  bool Parse(Conn& c) {
    size_t at = 0;
    auto u32 = [&](size_t pos, uint32_t* v) {
      if (c.in.size() < pos + 4) return false;
      std::memcpy(v, c.in.data() + pos, 4);
      return true;
    };
    for (;;) {
      if (c.in.size() < at + 5) break;
      const uint8_t op = static_cast<uint8_t>(c.in[at]);
      uint32_t klen = 0;
      u32(at + 1, &klen);
      if (op < kSet || op > kHas || klen > kMaxKey) return false;
      size_t need = at + 5 + klen;
      uint32_t vlen = 0;
      if (op == kSet) {
        if (!u32(need, &vlen)) break;
        if (vlen > kMaxValue) return false;
        need += 4 + vlen;
      }
      if (c.in.size() < need) break;
      const std::string key(c.in.data() + at + 5, klen);
      if (op == kSet) {
        std::vector<char> value(c.in.begin() + static_cast<std::ptrdiff_t>(need - vlen),
                                c.in.begin() + static_cast<std::ptrdiff_t>(need));
        bool stored = false;
        try {
          stored = table_.TrySet(key, std::move(value));
        } catch (const Error&) {
          return false;
        }
        c.out.push_back(stored ? 1 : 0);
      } else if (op == kHas) {
        c.out.push_back(table_.Get(key, nullptr) ? 1 : 0);
      } else {
        std::vector<char> value;
        const bool found = table_.Get(key, &value);
        c.out.push_back(found ? 1 : 0);
        if (found) {
          const uint32_t n = static_cast<uint32_t>(value.size());
          const char* p = reinterpret_cast<const char*>(&n);
          c.out.insert(c.out.end(), p, p + 4);
          c.out.insert(c.out.end(), value.begin(), value.end());
        }
      }
      at = need;
    }
    c.in.erase(c.in.begin(), c.in.begin() + static_cast<std::ptrdiff_t>(at));
    return true;
  }

  Table table_;
  int fd_ = -1;
  int wake_[2] = {-1, -1};
  std::map<int, Conn> conns_;
  std::thread thread_;
};

class TcpStore final : public gloo::rendezvous::Store, public KeyCheck {
 public:
  TcpStore(std::string host, int port, bool host_it, Millis timeout, int rank)
      : host_(std::move(host)), port_(port), timeout_(timeout), rank_(rank) {
    if (host_it) server_ = std::make_unique<Server>(host_, port_, rank_);
  }
  ~TcpStore() override {
    if (fd_ >= 0) ::close(fd_);
  }

  void set(const std::string& key, const std::vector<char>& data) override {
    if (!TrySet(key, data)) {
      throw TransportError(Where{rank_}, "TCP store: key '", key, "' already exists");
    }
  }
  bool TrySet(const std::string& key, const std::vector<char>& data) {
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
      if (fd_ >= 0) return;
      if (Since(first_attempt_) >= timeout_) {
        throw TransportError(Where{rank_}, "rendezvous: waited ", Since(first_attempt_).count(),
                             " ms (timeout ", timeout_.count(), " ms) to connect to the TCP store at ",
                             host_, ":", port_, " (hosted by rank 0); last error: ", last);
      }
      std::this_thread::sleep_for(Millis(50));
    }
  }

  std::string host_;
  int port_;
  Millis timeout_;
  int rank_;
  std::unique_ptr<Server> server_;
  std::mutex m_;
  int fd_ = -1;
  Clock::time_point first_attempt_{};
};

}  // namespace

std::shared_ptr<gloo::rendezvous::Store> OpenTcpStore(const std::string& host, int port,
                                                      bool host_it, Millis timeout, int rank) {
  CheckTimeout(timeout, "OpenTcpStore", rank);
  if (port < 1 || port > 65535) {
    throw InvalidArgument(Where{rank}, "TCP store: port ", port, " is outside [1, 65535]");
  }
  return std::make_shared<TcpStore>(host, port, host_it, timeout, rank);
}

}  // namespace zen
