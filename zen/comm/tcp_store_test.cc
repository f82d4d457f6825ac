// zen's TCP store (tcp://, env:// under torchrun) against hostile local
// clients: a client that pipelines requests and never reads
// the replies, and clients without the job's secret.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "zen/comm/gloo_communicator.h"
#include "zen/comm/file_store.h"
#include "zen/comm/launch_env.h"
#include "zen/comm/rendezvous.h"
#include "zen/comm/rendezvous_url.h"
#include "zen/comm/tcp_store.h"
#include "zen/comm/timeout.h"
#include "zen/core/error.h"

namespace zen {
namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

int64_t RssBytes() {
  std::ifstream in("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  in >> pages >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

int ConnectRaw(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const int small = 4096;  // the client's own buffer holds little of the replies
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(0x7f000001);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

// One request as the store's framing has it: u8 op, u32 length, bytes.
void Append(std::vector<char>& out, uint8_t op, const std::string& key) {
  out.push_back(static_cast<char>(op));
  const uint32_t n = static_cast<uint32_t>(key.size());
  const char* p = reinterpret_cast<const char*>(&n);
  out.insert(out.end(), p, p + 4);
  out.insert(out.end(), key.begin(), key.end());
}

void SendAll(int fd, const std::vector<char>& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    ASSERT_GT(n, 0) << std::strerror(errno);
    done += static_cast<size_t>(n);
  }
}

// Reads until EOF, an error or `limit`; returns the bytes read.
int64_t Drain(int fd, Millis limit) {
  timeval tv{0, 200000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::vector<char> buf(1 << 20);
  int64_t total = 0;
  const auto start = Clock::now();
  while (Clock::now() - start < limit) {
    const ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      break;
    }
    total += n;
  }
  return total;
}

constexpr bool kSendHello = true;  // clients open with the job's secret

// A 16 MiB value, then 60 pipelined GETs of it that the client never reads:
// rank 0 buffered every reply (about 1 GB here; 3.2 GB and the OOM killer
// at 200 GETs). Now it buffers at most about 1 MiB plus one value for the
// client, serves the other ranks meanwhile, and drops the client once its
// replies make no progress for the timeout.
TEST(TcpStoreTest, AClientThatDoesNotReadIsBoundedAndDropped) {
  constexpr int kPort = 29871;
  constexpr size_t kValue = size_t{16} << 20;
  auto host = OpenTcpStore("127.0.0.1", kPort, /*host_it=*/true, Millis(1000), 0, "s3cret");
  host->set("big", std::vector<char>(kValue, 'x'));
  const int64_t before = RssBytes();
  const int fd = ConnectRaw(kPort);
  std::vector<char> requests;
  if (kSendHello) Append(requests, 4, "s3cret");
  for (int i = 0; i < 60; ++i) Append(requests, 2, "big");
  SendAll(fd, requests);
  std::this_thread::sleep_for(Millis(500));
  const int64_t grown = RssBytes() - before;
  EXPECT_LT(grown, int64_t{96} << 20) << "the server buffered " << (grown >> 20) << " MiB";
  std::printf("pipelined GETs: the server grew by %lld MiB\n", static_cast<long long>(grown >> 20));
  // Another rank is served meanwhile.
  auto client = OpenTcpStore("127.0.0.1", kPort, false, Millis(3000), 1, "s3cret");
  EXPECT_EQ(client->get("big").size(), kValue);
  // Past the timeout without reading, the client is dropped: it gets far
  // fewer than the 60 replies it asked for.
  std::this_thread::sleep_for(Millis(2000));
  const int64_t read = Drain(fd, Millis(10000));
  ::close(fd);
  EXPECT_LT(read, int64_t{8} * static_cast<int64_t>(kValue)) << read;
}

// A client without the job's secret is refused; a rank with the wrong one
// gets a TransportError that says so; a rank with it is served.
TEST(TcpStoreTest, TheJobsSecretIsRequired) {
  constexpr int kPort = 29872;
  auto host = OpenTcpStore("127.0.0.1", kPort, true, Millis(2000), 0, "right");
  host->set("k", {'v'});
  {
    const int fd = ConnectRaw(kPort);
    std::vector<char> req;
    Append(req, 3, "k");  // a request without a hello
    SendAll(fd, req);
    char c = 0;
    timeval tv{2, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    EXPECT_EQ(::recv(fd, &c, 1, 0), 0) << "a request without the secret was answered";
    ::close(fd);
  }
  auto wrong = OpenTcpStore("127.0.0.1", kPort, false, Millis(2000), 1, "wrong");
  try {
    wrong->get("k");
    ADD_FAILURE() << "a rank with the wrong secret was served";
  } catch (const TransportError& e) {
    EXPECT_NE(std::string(e.what()).find("secret"), std::string::npos) << e.what();
  }
  auto right = OpenTcpStore("127.0.0.1", kPort, false, Millis(2000), 1, "right");
  EXPECT_EQ(right->get("k"), std::vector<char>{'v'});
}

// The framing on its own (what fuzz/store_fuzz.cc drives): replies stop at
// the limit and the rest of the input waits.
TEST(TcpStoreTest, FramingStopsAtTheReplyLimit) {
  auto table = NewTcpStoreTable();
  std::vector<char> in;
  Append(in, 4, "");
  std::vector<char> set;
  Append(set, 1, "k");
  const uint32_t n = 1000;
  set.insert(set.end(), reinterpret_cast<const char*>(&n), reinterpret_cast<const char*>(&n) + 4);
  set.insert(set.end(), n, 'v');
  in.insert(in.end(), set.begin(), set.end());
  for (int i = 0; i < 10; ++i) Append(in, 2, "k");
  std::vector<char> out;
  bool hello = false;
  const TcpStoreFraming r = ServeTcpStoreRequests(*table, in, out, 2500, hello, "");
  EXPECT_TRUE(r.ok);
  EXPECT_TRUE(hello);
  // hello (1) + set (1) + three GETs of 1005 bytes reach the 2500 limit.
  EXPECT_EQ(out.size(), 2u + 3 * 1005);
  EXPECT_EQ(r.consumed, 5u + set.size() + 3 * 6);
  bool fresh = false;
  std::vector<char> get_first;
  Append(get_first, 2, "k");
  EXPECT_FALSE(ServeTcpStoreRequests(*table, get_first, out, 1 << 20, fresh, "").ok);
}

}  // namespace
}  // namespace zen
