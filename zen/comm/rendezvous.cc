#include "zen/comm/rendezvous.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <thread>

#include <gloo/common/error.h>
#ifdef ZEN_HAVE_REDIS
#include <gloo/rendezvous/redis_store.h>
#endif

#include "zen/core/error.h"

namespace zen {
namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

Millis Since(Clock::time_point start) {
  return std::chrono::duration_cast<Millis>(Clock::now() - start);
}

std::string Describe(std::exception_ptr ex) {
  try {
    std::rethrow_exception(ex);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

// Parses a decimal port in [1, 65535]; 0 when it is not one.
int ParsePort(const std::string& s) {
  if (s.empty() || s.size() > 5 || s.find_first_not_of("0123456789") != std::string::npos) return 0;
  const int p = std::stoi(s);
  return p >= 1 && p <= 65535 ? p : 0;
}

bool ValidJob(const std::string& job) {
  return !job.empty() && job.size() <= 128 &&
         job.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") ==
             std::string::npos;
}

}  // namespace

// ---------------------------------------------------------------- timeouts

void CheckTimeout(Millis timeout, const char* what, int rank) {
  if (timeout.count() <= 0 || timeout > kMaxTimeout) {
    throw InvalidArgument(Where{rank}, what, ": timeout ", timeout.count(),
                          " ms is outside (0, ", kMaxTimeout.count(), "] ms (30 days)");
  }
}

Millis TimeoutFromSeconds(double seconds, int rank) {
  if (std::isnan(seconds) || !(seconds > 0)) {
    throw InvalidArgument(Where{rank}, "timeout ", seconds, " s is not a positive number");
  }
  const double max_s = static_cast<double>(kMaxTimeout.count()) / 1000.0;
  if (seconds > max_s) {
    throw InvalidArgument(Where{rank}, "timeout ", seconds, " s is longer than the maximum of ",
                          max_s, " s (30 days)");
  }
  return Millis(std::max<int64_t>(1, static_cast<int64_t>(std::ceil(seconds * 1000.0))));
}

// ---------------------------------------------------------------- URLs

RendezvousUrl ParseRendezvousUrl(const std::string& url) {
  RendezvousUrl out;
  std::string body = url;
  const auto q = url.find('?');
  if (q != std::string::npos) {
    body = url.substr(0, q);
    std::string query = url.substr(q + 1);
    size_t pos = 0;
    while (pos <= query.size()) {
      const size_t amp = std::min(query.find('&', pos), query.size());
      const std::string item = query.substr(pos, amp - pos);
      const auto eq = item.find('=');
      const std::string key = item.substr(0, eq);
      const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
      if (key != "job") {
        throw InvalidArgument(Where{}, "rendezvous URL '", url, "': unknown query key '", key,
                              "' (only job=ID is understood)");
      }
      if (!ValidJob(value)) {
        throw InvalidArgument(Where{}, "rendezvous URL '", url, "': job id '", value,
                              "' must be 1 to 128 characters of [A-Za-z0-9._-]");
      }
      out.job = value;
      pos = amp + 1;
    }
  }
  out.base = body;
  auto host_port = [&](const std::string& scheme, const std::string& rest) {
    const auto colon = rest.rfind(':');
    const int port = colon == std::string::npos ? 0 : ParsePort(rest.substr(colon + 1));
    if (colon == std::string::npos || colon == 0 || port == 0) {
      throw InvalidArgument(Where{}, "rendezvous URL '", url, "': expected ", scheme,
                            "HOST:PORT with PORT in [1, 65535]");
    }
    out.host = rest.substr(0, colon);
    out.port = port;
  };
  if (body.rfind("file:", 0) == 0) {
    out.kind = RendezvousUrl::Kind::kFile;
    out.path = body.substr(5);
    if (out.path.empty()) throw InvalidArgument(Where{}, "rendezvous URL '", url, "' names no directory");
  } else if (body.rfind("redis://", 0) == 0) {
    out.kind = RendezvousUrl::Kind::kRedis;
    host_port("redis://", body.substr(8));
  } else if (body.rfind("tcp://", 0) == 0) {
    out.kind = RendezvousUrl::Kind::kTcp;
    host_port("tcp://", body.substr(6));
  } else if (body == "env://" || body == "env:") {
    out.kind = RendezvousUrl::Kind::kEnv;
  } else if (body == "mpi://" || body == "mpi:") {
    out.kind = RendezvousUrl::Kind::kMpi;
  } else {
    throw InvalidArgument(Where{}, "rendezvous URL '", url,
                          "' is none of file:DIR, redis://HOST:PORT, tcp://HOST:PORT, env://, "
                          "mpi://");
  }
  return out;
}

// ---------------------------------------------------------------- stores

namespace {

// Creates dir and its missing parents with mode 0700.
void MakeDirs(const std::string& dir) {
  std::filesystem::path p(dir);
  std::filesystem::path acc;
  for (const auto& part : p) {
    acc /= part;
    if (acc.empty() || acc == acc.root_path()) continue;
    if (::mkdir(acc.c_str(), 0700) != 0 && errno != EEXIST) {
      throw TransportError(Where{}, "rendezvous: cannot create directory '", acc.string(),
                           "': ", std::strerror(errno));
    }
  }
  if (!std::filesystem::is_directory(dir)) {
    throw TransportError(Where{}, "rendezvous: '", dir, "' is not a directory");
  }
}

std::string EscapeKey(const std::string& key) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (const unsigned char c : key) {
    if (std::isalnum(c) || c == '.' || c == '-' || c == '_') {
      out += static_cast<char>(c);
    } else if (c == '/') {
      out += '~';
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (out.empty() || out[0] == '.') out = "k" + out;
  if (out.size() > 180) {  // file names are at most 255 bytes
    uint64_t h = 1469598103934665603ULL;
    for (const unsigned char c : key) h = (h ^ c) * 1099511628211ULL;
    char tail[24];
    std::snprintf(tail, sizeof(tail), "#%016llx", static_cast<unsigned long long>(h));
    out = out.substr(0, 150) + tail;
  }
  return out;
}

constexpr uint64_t kMaxFileValue = uint64_t{64} << 20;

// InvalidArgument for a directory another user could put files into: one
// that others can write and that is not sticky, or one owned by another user
// and not sticky. In a sticky directory (e.g. /tmp itself, 1777) others cannot
// replace this user's files, and get() refuses files that are not this
// user's.
void CheckDirectory(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    throw TransportError(Where{}, "rendezvous: cannot stat directory '", dir,
                         "': ", std::strerror(errno));
  }
  const bool sticky = (st.st_mode & S_ISVTX) != 0;
  const bool others_write = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
  const bool foreign = st.st_uid != ::geteuid();
  if (!sticky && (others_write || foreign)) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw InvalidArgument(
        Where{}, "rendezvous directory '", dir, "' (mode ", mode, ", owner uid ", st.st_uid, ") ",
        foreign ? "belongs to another user" : "can be written by other users",
        " and is not sticky, so others could replace its key files; name a directory of this "
        "user's with mode 0700 (zen creates one when the path does not exist) or a sticky one");
  }
}

}  // namespace

FileStore::FileStore(std::string dir) : dir_(std::move(dir)) {
  MakeDirs(dir_);
  CheckDirectory(dir_);
}

namespace {

// Reads the whole regular file open at fd (at most kMaxFileValue bytes).
std::vector<char> ReadKeyFile(int fd, const std::string& key, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    throw TransportError(Where{}, "rendezvous: cannot stat '", path, "': ", std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
    throw FormatError(Where{}, "rendezvous: '", path, "' (key '", key, "') is ",
                      S_ISREG(st.st_mode) ? "a file of another user (uid " +
                                                std::to_string(st.st_uid) + ")"
                                          : std::string("not a regular file"),
                      "; zen writes only regular files of its own user there, so another "
                      "program or user is writing into the rendezvous directory");
  }
  const auto n = static_cast<uint64_t>(std::max<off_t>(0, st.st_size));
  if (n > kMaxFileValue) {
    throw FormatError(Where{}, "rendezvous: key '", key, "' holds ", n, " bytes, more than ",
                      kMaxFileValue);
  }
  std::vector<char> out(n);
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::read(fd, out.data() + done, n - done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      throw TransportError(Where{}, "rendezvous: cannot read '", path, "': ", std::strerror(errno));
    }
    if (r == 0) break;  // keys are written once, before they are linked in
    done += static_cast<size_t>(r);
  }
  out.resize(done);
  return out;
}

}  // namespace

std::string FileStore::PathOf(const std::string& key) const { return dir_ + "/" + EscapeKey(key); }

bool FileStore::Has(const std::string& key) {
  struct stat st {};
  return ::lstat(PathOf(key).c_str(), &st) == 0;  // whatever is there; get() checks it
}

void FileStore::set(const std::string& key, const std::vector<char>& data) {
  // Temporary file, mode 0600, then link(2): atomic, fails when the key exists.
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = dir_ + "/.tmp-" + std::to_string(::getpid()) + "-" +
                          std::to_string(counter++) + "-" + EscapeKey(key).substr(0, 60);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    throw TransportError(Where{}, "rendezvous: cannot create '", tmp, "': ", std::strerror(errno));
  }
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw TransportError(Where{}, "rendezvous: cannot write '", tmp, "': ", std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  const std::string path = PathOf(key);
  const int rv = ::link(tmp.c_str(), path.c_str());
  const int err = errno;
  ::unlink(tmp.c_str());
  if (rv != 0) {
    throw TransportError(Where{}, "rendezvous: key '", key, "' (", path, ") ",
                         err == EEXIST ? "already exists" : std::strerror(err));
  }
}

std::vector<char> FileStore::get(const std::string& key) {
  wait({key}, kDefaultTimeout);
  const std::string path = PathOf(key);
  // Non-blocking and not following links: a FIFO or a link planted where a
  // key's file belongs must not block or redirect the read.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP) {
      throw FormatError(Where{}, "rendezvous: '", path, "' (key '", key,
                        "') is a symbolic link; zen writes only regular files there, so another "
                        "program or user is writing into the rendezvous directory");
    }
    throw TransportError(Where{}, "rendezvous: cannot open '", path, "': ", std::strerror(err));
  }
  try {
    std::vector<char> out = ReadKeyFile(fd, key, path);
    ::close(fd);
    return out;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

void FileStore::wait(const std::vector<std::string>& keys) { wait(keys, kDefaultTimeout); }

void FileStore::wait(const std::vector<std::string>& keys, const Millis& timeout) {
  const auto start = Clock::now();
  for (const std::string& key : keys) {
    while (!Has(key)) {
      if (Since(start) >= timeout) {
        throw TransportError(Where{}, "rendezvous: key '", key, "' did not appear within ",
                             timeout.count(), " ms");
      }
      std::this_thread::sleep_for(Millis(5));
    }
  }
}

bool StoreHas(gloo::rendezvous::Store& store, const std::string& key) {
  if (auto* s = dynamic_cast<KeyCheck*>(&store)) return s->Has(key);
#ifdef ZEN_HAVE_REDIS
  if (auto* s = dynamic_cast<gloo::rendezvous::RedisStore*>(&store)) return s->check({key});
#endif
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

#ifdef ZEN_HAVE_REDIS
namespace {
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

std::shared_ptr<gloo::rendezvous::Store> OpenRedis(const std::string& host, int port,
                                                   Millis timeout) {
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
}  // namespace
#endif

std::shared_ptr<gloo::rendezvous::Store> OpenStore(const std::string& url, Millis timeout) {
  const RendezvousUrl u = ParseRendezvousUrl(url);
  CheckTimeout(timeout, "OpenStore");
  switch (u.kind) {
    case RendezvousUrl::Kind::kFile:
      return std::make_shared<FileStore>(u.path);
    case RendezvousUrl::Kind::kRedis:
#ifdef ZEN_HAVE_REDIS
      return OpenRedis(u.host, u.port, timeout);
#else
      throw InvalidArgument(Where{}, "rendezvous URL '", url,
                            "': this build has no Redis support (hiredis was not found)");
#endif
    default:
      throw InvalidArgument(Where{}, "rendezvous URL '", url,
                            "': OpenStore opens file:DIR and redis://HOST:PORT only (tcp:// is "
                            "hosted by rank 0 in ConnectGloo; env:// and mpi:// are resolved "
                            "with RendezvousFromEnv)");
  }
}

// ---------------------------------------------------------------- values

namespace {
constexpr char kMagic[4] = {'Z', 'R', 'V', '1'};
constexpr size_t kHeader = 16;  // magic, world, rank, address_bytes
constexpr size_t kNonceBytes = sizeof(uint64_t);  // after the addresses
constexpr uint32_t kMaxAddressBytes = 4096;

uint32_t ReadU32(std::span<const char> b, size_t at) {
  uint32_t v;
  std::memcpy(&v, b.data() + at, sizeof(v));
  return v;
}
void PutU32(std::vector<char>& out, uint32_t v) {
  const char* p = reinterpret_cast<const char*>(&v);
  out.insert(out.end(), p, p + sizeof(v));
}
}  // namespace

std::span<const char> RendezvousValue::AddressFor(int peer) const {
  const int slot = peer < rank ? peer : peer - 1;
  return std::span<const char>(addresses).subspan(static_cast<size_t>(slot) * address_bytes,
                                                  address_bytes);
}

std::vector<char> EncodeRendezvousValue(const RendezvousValue& v) {
  std::vector<char> out(kMagic, kMagic + 4);
  PutU32(out, static_cast<uint32_t>(v.world));
  PutU32(out, static_cast<uint32_t>(v.rank));
  PutU32(out, v.address_bytes);
  out.insert(out.end(), v.addresses.begin(), v.addresses.end());
  const char* n = reinterpret_cast<const char*>(&v.nonce);
  out.insert(out.end(), n, n + sizeof(v.nonce));
  return out;
}

RendezvousValue DecodeRendezvousValue(std::span<const char> b, int expected_world,
                                      int expected_rank, int self, const std::string& key) {
  if (b.size() < kHeader || std::memcmp(b.data(), kMagic, 4) != 0) {
    throw FormatError(Where{self}, "rendezvous: key '", key, "' holds ", b.size(),
                      " bytes that are not a zen rendezvous value (an earlier zen version, or "
                      "another program using this store and prefix?)");
  }
  const uint32_t world = ReadU32(b, 4), rank = ReadU32(b, 8), ab = ReadU32(b, 12);
  if (world != static_cast<uint32_t>(expected_world)) {
    throw MismatchError(Where{self}, "world size mismatch: rank ", rank, " runs with world size ",
                        world, ", this rank (", self, ") with world size ", expected_world,
                        " (key '", key, "'); start every rank with the same world size");
  }
  if (rank != static_cast<uint32_t>(expected_rank)) {
    throw FormatError(Where{self}, "rendezvous: key '", key, "' is for rank ", expected_rank,
                      " but its value names rank ", rank);
  }
  if (ab > kMaxAddressBytes) {
    throw FormatError(Where{self}, "rendezvous: key '", key, "' announces addresses of ", ab,
                      " bytes (at most ", kMaxAddressBytes, ")");
  }
  const uint64_t block = static_cast<uint64_t>(world - 1) * ab;  // world >= 1 here
  const uint64_t want = kHeader + block + kNonceBytes;
  if (b.size() != want) {
    throw FormatError(Where{self}, "rendezvous: key '", key, "' holds ", b.size(),
                      " bytes, a value of world size ", world, " with addresses of ", ab,
                      " bytes has ", want, " (an earlier zen version?)");
  }
  RendezvousValue v;
  v.world = static_cast<int>(world);
  v.rank = static_cast<int>(rank);
  v.address_bytes = ab;
  v.addresses.assign(b.begin() + kHeader, b.begin() + static_cast<std::ptrdiff_t>(kHeader + block));
  std::memcpy(&v.nonce, b.data() + kHeader + block, kNonceBytes);
  return v;
}

std::vector<char> SanitizeTcpAddress(std::span<const char> address) {
  constexpr size_t kSeqAt = sizeof(sockaddr_storage);
  if (address.size() != kSeqAt + sizeof(int64_t)) {
    throw FormatError(Where{}, "rendezvous: a TCP address has ", address.size(), " bytes, expected ",
                      kSeqAt + sizeof(int64_t));
  }
  sockaddr_storage ss;
  std::memcpy(&ss, address.data(), sizeof(ss));
  std::vector<char> out(address.size(), 0);
  if (ss.ss_family == AF_INET) {
    sockaddr_in in{};
    std::memcpy(&in, address.data(), sizeof(in));
    sockaddr_in clean{};
    clean.sin_family = AF_INET;
    clean.sin_port = in.sin_port;
    clean.sin_addr = in.sin_addr;
    std::memcpy(out.data(), &clean, sizeof(clean));
  } else if (ss.ss_family == AF_INET6) {
    sockaddr_in6 in6{};
    std::memcpy(&in6, address.data(), sizeof(in6));
    sockaddr_in6 clean{};
    clean.sin6_family = AF_INET6;
    clean.sin6_port = in6.sin6_port;
    clean.sin6_flowinfo = in6.sin6_flowinfo;
    clean.sin6_addr = in6.sin6_addr;
    clean.sin6_scope_id = in6.sin6_scope_id;
    std::memcpy(out.data(), &clean, sizeof(clean));
  } else {
    throw FormatError(Where{}, "rendezvous: a TCP address has address family ", ss.ss_family,
                      " (neither IPv4 nor IPv6)");
  }
  std::memcpy(out.data() + kSeqAt, address.data() + kSeqAt, sizeof(int64_t));
  return out;
}

// ---------------------------------------------------------------- the run protocol

namespace {

std::vector<char> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

// The first g with no key "<gen>/<g>" (generations are claimed in order).
int64_t FirstFreeGeneration(gloo::rendezvous::Store& store, const std::string& gen) {
  auto has = [&](int64_t g) { return StoreHas(store, gen + std::to_string(g)); };
  if (!has(0)) return 0;
  int64_t lo = 0, hi = 1;  // has(lo), probe hi
  while (has(hi)) {
    lo = hi;
    if (hi > (int64_t{1} << 40)) {
      throw FormatError(Where{}, "rendezvous: more than 2^40 generations under '", gen, "'");
    }
    hi *= 2;
  }
  while (hi - lo > 1) {  // has(lo), !has(hi)
    const int64_t mid = lo + (hi - lo) / 2;
    (has(mid) ? lo : hi) = mid;
  }
  return hi;
}

uint64_t DrawNonce() {
  std::random_device rd;
  uint64_t n = 0;
  while (n == 0) n = (uint64_t{rd()} << 32) ^ rd();
  return n;
}

std::string NonceText(uint64_t n) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(n));
  return buf;
}

// The nonce stored in "gen/<g>": 16 hex digits.
uint64_t ParseNonce(const std::vector<char>& bytes, int self, const std::string& key) {
  const std::string text(bytes.begin(), bytes.end());
  if (text.size() != 16 || text.find_first_not_of("0123456789abcdef") != std::string::npos) {
    throw FormatError(Where{self}, "rendezvous: key '", key, "' holds ", bytes.size(),
                      " bytes that are not a generation nonce (16 hex digits)");
  }
  return std::stoull(text, nullptr, 16);
}

Millis Poll(Clock::time_point start) {
  const auto waited = Since(start).count();
  return Millis(waited < 100 ? 2 : waited < 1000 ? 10 : 50);
}

[[noreturn]] void ThrowMissing(int self, Clock::time_point start, Millis timeout,
                               const std::string& key, int missing, int world,
                               const std::string& note) {
  throw TransportError(
      Where{self}, "rendezvous: waited ", Since(start).count(), " ms (timeout ", timeout.count(),
      " ms) for key '", key, "'",
      missing >= 0 ? " (the address of rank " + std::to_string(missing) + ": is rank " +
                         std::to_string(missing) +
                         " running, with the same rendezvous, prefix, job and world size?)"
                   : std::string(),
      " in a world of ", world, " ranks", note);
}

}  // namespace

RunRendezvous JoinRun(gloo::rendezvous::Store& store, const std::string& prefix,
                      const std::string& job, const RendezvousValue& mine,
                      Clock::time_point deadline, Millis timeout, const std::string& rendezvous) {
  // "waited" in messages counts from the start of the connect (the deadline
  // is its start plus the timeout), not of this call.
  const auto start = std::min(Clock::now(), deadline - timeout);
  const int self = mine.rank, world = mine.world;
  const std::string root = prefix + (job.empty() ? "" : "/" + job);
  const std::string gen = root + "/gen/";
  auto gen_key = [&](int64_t g) { return gen + std::to_string(g); };
  auto base_of = [&](int64_t g) { return root + "/" + std::to_string(g); };
  auto addr_key = [&](int64_t g, int r) { return base_of(g) + "/addr/" + std::to_string(r); };
  auto ready_key = [&](int64_t g) { return base_of(g) + "/ready"; };
  auto abort_key = [&](int64_t g) { return base_of(g) + "/abort"; };
  auto store_error = [&](const char* what, const std::string& key) {
    return TransportError(Where{self}, "rendezvous: ", what, " key '", key,
                          "' failed: ", Describe(std::current_exception()));
  };
  const std::string where =
      (rendezvous.empty() ? std::string("through the store passed to connect")
                          : "'" + rendezvous + "'") +
      " (keys '" + root + "/...')";
  auto concurrent = [&](const std::string& what) {
    return MismatchError(Where{self}, "rendezvous ", where,
                         " is used by another job at the same time: ", what,
                         ". Give each job its own directory or ?job=ID (GlooOptions::job, "
                         "connect_url(..., job=ID), or its own prefix with connect(store, ...); "
                         "torchrun, mpirun and zen bench give each job its own)");
  };
  // The reason in "<g>/abort", if that key exists.
  auto abort_reason = [&](int64_t g) -> std::optional<std::string> {
    const std::string key = abort_key(g);
    if (!StoreHas(store, key)) return std::nullopt;
    std::vector<char> bytes;
    try {
      bytes = store.get(key);
    } catch (...) {
      throw store_error("reading", key);
    }
    return std::string(bytes.begin(), bytes.end());
  };
  // Best effort: the abort is a courtesy to the other ranks; this rank fails
  // either way.
  auto abort_run = [&](int64_t g, const std::string& reason) {
    try {
      StoreTrySet(store, abort_key(g), Bytes(reason));
    } catch (...) {
    }
  };
  auto get_value = [&](const std::string& key) {
    try {
      return store.get(key);
    } catch (...) {
      throw store_error("reading", key);
    }
  };
  RendezvousValue me = mine;

  // How long to wait for a live rank 0 to answer a sign of another job.
  const Millis grace = std::max(Millis(1), std::min(kConcurrentGrace, timeout / 4));
  RunRendezvous run;
  int64_t g = -1;
  int64_t prev = -1;          // rank 0: the generation before its own
  bool prev_forming = false;  // rank 0: prev was neither ready nor aborted at the claim
  // Until "<g>/ready" is out: another job's claim of g + 1 means two jobs
  // share these keys; so does an abort of a still-forming g - 1 (its rank 0
  // saw this claim).
  auto check_concurrent = [&] {
    const std::string dup = base_of(g) + "/dup";
    if (StoreHas(store, dup)) {
      const std::vector<char> who = get_value(dup);
      const std::string reason = "two processes claim one rank of generation " +
                                 std::to_string(g) + " (" + std::string(who.begin(), who.end()) +
                                 ")";
      abort_run(g, reason);
      throw concurrent(reason);
    }
    if (StoreHas(store, gen_key(g + 1))) {
      const std::string reason = "a rank 0 claimed generation " + std::to_string(g + 1) +
                                 " while generation " + std::to_string(g) +
                                 " (this rank 0's) was still forming";
      abort_run(g, reason);
      throw concurrent(reason);
    }
    if (!prev_forming) return;
    if (auto why = abort_reason(prev)) {
      const std::string reason = "generation " + std::to_string(prev) +
                                 ", still forming when this rank 0 claimed generation " +
                                 std::to_string(g) + ", was aborted (" + *why + ")";
      abort_run(g, reason);
      throw concurrent(reason);
    }
  };
  if (self == 0) {
    me.nonce = DrawNonce();
    const std::vector<char> nonce_text = Bytes(NonceText(me.nonce));
    g = FirstFreeGeneration(store, gen);
    for (int tries = 0;; ++tries, ++g) {
      // The state of g - 1 is read before the claim: an abort of it seen
      // after the claim is then its rank 0's answer to this one.
      prev = g - 1;
      prev_forming =
          prev >= 0 && !StoreHas(store, ready_key(prev)) && !StoreHas(store, abort_key(prev));
      bool claimed = false;
      try {
        claimed = StoreTrySet(store, gen_key(g), nonce_text);
      } catch (...) {
        throw store_error("claiming", gen_key(g));
      }
      if (claimed) break;
      if (tries > 64 || Clock::now() >= deadline) {
        throw TransportError(Where{self}, "rendezvous: could not claim a generation under '", gen,
                             "' (is another rank 0 running with the same prefix and job?)");
      }
    }
    // A store whose set-if-absent is not atomic (torch's) may have let another
    // rank 0 claim the same generation; its nonce is then the one stored.
    if (get_value(gen_key(g)) != nonce_text) {
      throw concurrent("another rank 0 claimed generation " + std::to_string(g) +
                       " at the same moment");
    }
    const auto claimed_at = Clock::now();
    try {
      if (!StoreTrySet(store, addr_key(g, 0), EncodeRendezvousValue(me))) {
        throw TransportError(Where{self}, "rendezvous: key '", addr_key(g, 0),
                             "' exists although this rank claimed the generation");
      }
    } catch (const Error&) {
      throw;
    } catch (...) {
      throw store_error("publishing", addr_key(g, 0));
    }
    bool prev_settled = !prev_forming;
    int r = 1;
    for (;;) {
      check_concurrent();
      if (!prev_settled && (Since(claimed_at) >= grace || StoreHas(store, ready_key(prev)))) {
        prev_settled = true;  // a dead run's leftover, or a run that completed meanwhile
      }
      while (r < world && StoreHas(store, addr_key(g, r))) ++r;
      if (r == world && prev_settled) break;
      if (Clock::now() >= deadline) {
        if (r < world) ThrowMissing(self, start, timeout, addr_key(g, r), r, world, "");
        ThrowMissing(self, start, timeout, abort_key(prev), -1, world,
                     ": the timeout ended while this rank 0 waited to see whether generation " +
                         std::to_string(prev) + " belongs to a live job");
      }
      std::this_thread::sleep_for(Poll(start));
    }
  } else {
    int64_t claimed = -1;  // the generation this rank published in
    int64_t skip = -1;     // newest generation whose slot for this rank was taken, or aborted
    int64_t left = -1;     // a still-forming generation this rank left for a newer one
    int64_t dup = -1;      // a still-forming generation whose slot for this rank was taken
    Clock::time_point dup_at{};
    for (;;) {
      const int64_t newest = FirstFreeGeneration(store, gen) - 1;
      if (dup >= 0) {
        // Its rank 0, if alive, aborts it on seeing the duplicate; if not
        // within the grace, it is a dead run's leftover (or it completed
        // first: the order no protocol can see).
        if (auto why = abort_reason(dup)) {
          throw concurrent("another process holds this rank's slot in generation " +
                           std::to_string(dup) + ", which was aborted (" + *why + ")");
        }
        if (Since(dup_at) >= grace || StoreHas(store, ready_key(dup))) dup = -1;
      }
      if (claimed >= 0) {
        if (auto why = abort_reason(claimed)) {
          throw concurrent("generation " + std::to_string(claimed) +
                           ", which this rank joined, was aborted (" + *why + ")");
        }
        if (left >= 0) {
          if (auto why = abort_reason(left)) {
            throw concurrent("generation " + std::to_string(left) +
                             ", which this rank joined first, was aborted (" + *why + ")");
          }
        }
        if (StoreHas(store, ready_key(claimed))) break;
      }
      if (newest >= 0 && newest > claimed && newest != skip) {
        if (StoreHas(store, abort_key(newest))) {
          skip = newest;
        } else {
          me.nonce = ParseNonce(get_value(gen_key(newest)), self, gen_key(newest));
          bool ok = false;
          try {
            ok = StoreTrySet(store, addr_key(newest, self), EncodeRendezvousValue(me));
          } catch (...) {
            throw store_error("publishing", addr_key(newest, self));
          }
          if (ok) {
            if (claimed >= 0 && !StoreHas(store, ready_key(claimed))) left = claimed;
            claimed = newest;
          } else {
            skip = newest;
            if (!StoreHas(store, ready_key(newest))) {
              // A still-forming generation with this rank's slot taken: a
              // leftover of a dead run, or another job's rank in it. Tell
              // its rank 0 (best effort), which aborts it if alive.
              try {
                StoreTrySet(store, base_of(newest) + "/dup",
                            Bytes("rank " + std::to_string(self) +
                                  " found its slot taken by another process"));
              } catch (...) {
              }
              dup = newest;
              dup_at = Clock::now();
            }
          }
        }
      }
      if (Clock::now() >= deadline) {
        if (claimed < 0) {
          std::string note =
              newest < 0 ? ": rank 0 has not started a run (is rank 0 running, with the "
                           "same rendezvous, prefix and job?)"
                         : ": the slot of this rank in the newest run is taken (a "
                           "duplicate rank, or rank 0 has not started this run yet)";
          if (newest >= 0) {
            if (auto why = abort_reason(newest)) {
              note = ": the newest run (generation " + std::to_string(newest) +
                     ") was aborted: " + *why + "; give each job its own directory or ?job=ID";
            }
          }
          ThrowMissing(self, start, timeout, newest < 0 ? gen + "0" : gen_key(newest + 1), -1,
                       world, note);
        }
        for (int q = 0; q < world; ++q) {
          if (!StoreHas(store, addr_key(claimed, q))) {
            ThrowMissing(self, start, timeout, addr_key(claimed, q), q, world, "");
          }
        }
        ThrowMissing(self, start, timeout, ready_key(claimed), -1, world,
                     ": every rank has published, but rank 0 has not confirmed the run");
      }
      std::this_thread::sleep_for(Poll(start));
    }
    g = claimed;
    // Rank 0's confirmation names its world size and the generation's nonce.
    const std::string ready = ready_key(g);
    const RendezvousValue confirmed = DecodeRendezvousValue(get_value(ready), world, 0, self, ready);
    if (confirmed.nonce != me.nonce) {
      throw concurrent("rank 0 confirmed generation " + std::to_string(g) + " with nonce " +
                       NonceText(confirmed.nonce) + ", this rank joined it with nonce " +
                       NonceText(me.nonce));
    }
  }

  run.generation = g;
  run.nonce = me.nonce;
  run.base = base_of(g);
  run.peers.resize(static_cast<size_t>(world));
  auto confirm = [&] {
    RendezvousValue ready{world, 0, 0, {}, me.nonce};
    return EncodeRendezvousValue(ready);
  };
  for (int r = 0; r < world; ++r) {
    if (r == self) {
      run.peers[static_cast<size_t>(r)] = me;
      continue;
    }
    const std::string key = addr_key(g, r);
    const std::vector<char> bytes = get_value(key);
    try {
      run.peers[static_cast<size_t>(r)] = DecodeRendezvousValue(bytes, world, r, self, key);
    } catch (const MismatchError&) {
      if (self == 0) {  // tell the others before giving up
        try {
          StoreTrySet(store, ready_key(g), confirm());
        } catch (...) {
        }
      }
      throw;
    }
    if (run.peers[static_cast<size_t>(r)].nonce != me.nonce) {
      const std::string reason =
          "rank " + std::to_string(r) + " published in generation " + std::to_string(g) +
          " with nonce " + NonceText(run.peers[static_cast<size_t>(r)].nonce) + ", not " +
          NonceText(me.nonce) + " (that generation's)";
      if (self == 0) abort_run(g, reason);
      throw concurrent(reason);
    }
  }
  if (self == 0) {
    check_concurrent();  // one last look before confirming
    try {
      StoreTrySet(store, ready_key(g), confirm());
    } catch (const Error&) {
      throw;
    } catch (...) {
      throw store_error("publishing", ready_key(g));
    }
  }
  return run;
}

// ---------------------------------------------------------------- launchers

std::optional<LaunchInfo> RendezvousFromEnv(const std::map<std::string, std::string>& env) {
  auto get = [&](const char* k) -> std::optional<std::string> {
    auto it = env.find(k);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  auto integer = [&](const char* k, int64_t lo, int64_t hi) {
    const std::string v = *get(k);
    if (v.empty() || v.size() > 10 || v.find_first_not_of("0123456789") != std::string::npos ||
        std::stoll(v) < lo || std::stoll(v) > hi) {
      throw InvalidArgument(Where{}, "environment variable ", k, "='", v,
                            "' is not an integer in [", lo, ", ", hi, "]");
    }
    return std::stoll(v);
  };
  LaunchInfo info;
  if (get("RANK") && get("WORLD_SIZE") && get("MASTER_ADDR") && get("MASTER_PORT")) {
    info.launcher = "torchrun";
    info.size = static_cast<int>(integer("WORLD_SIZE", 1, 1 << 24));
    info.rank = static_cast<int>(integer("RANK", 0, info.size - 1));
    const int port = static_cast<int>(integer("MASTER_PORT", 1, 65534));
    const std::string addr = *get("MASTER_ADDR");
    if (addr.empty() || addr.find_first_of("/?@ ") != std::string::npos) {
      throw InvalidArgument(Where{}, "environment variable MASTER_ADDR='", addr,
                            "' is not a host name or address");
    }
    info.rendezvous = "tcp://" + addr + ":" + std::to_string(port + 1);
    const int64_t restart =
        get("TORCHELASTIC_RESTART_COUNT") ? integer("TORCHELASTIC_RESTART_COUNT", 0, 1 << 30) : 0;
    std::string run_id = get("TORCHELASTIC_RUN_ID").value_or("none");
    for (char& c : run_id) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
    }
    info.job = "torchelastic-" + run_id.substr(0, 64) + "-" + std::to_string(restart);
    info.secret = "torchrun/" + run_id.substr(0, 64) + "/" + std::to_string(restart) + "/" + addr +
                  ":" + std::to_string(port);
  } else if (get("OMPI_COMM_WORLD_RANK") && get("OMPI_COMM_WORLD_SIZE")) {
    info.launcher = "mpirun";
    info.size = static_cast<int>(integer("OMPI_COMM_WORLD_SIZE", 1, 1 << 24));
    info.rank = static_cast<int>(integer("OMPI_COMM_WORLD_RANK", 0, info.size - 1));
    info.rendezvous = "mpi://";
    std::string id = get("OMPI_MCA_ess_base_jobid").value_or(get("PMIX_NAMESPACE").value_or(""));
    for (char& c : id) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
    }
    if (!id.empty()) info.job = "mpi-" + id.substr(0, 100);
  } else {
    return std::nullopt;
  }
  if (auto secret = get("ZEN_STORE_SECRET"); secret && !secret->empty()) {
    if (secret->size() > 256) {
      throw InvalidArgument(Where{}, "environment variable ZEN_STORE_SECRET has ", secret->size(),
                            " bytes, at most 256");
    }
    info.secret = *secret;
  }
  if (auto url = get("ZEN_RENDEZVOUS"); url && !url->empty()) {
    ParseRendezvousUrl(*url);  // InvalidArgument for a bad one
    info.rendezvous = *url;
  }
  return info;
}

}  // namespace zen
