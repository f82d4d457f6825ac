#include "zen/comm/file_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include "zen/comm/timeout.h"
#include "zen/core/error.h"
#include "zen/core/hash.h"

namespace zen {
namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

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
    const uint64_t h = Fnv1a(key);
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

}  // namespace zen
