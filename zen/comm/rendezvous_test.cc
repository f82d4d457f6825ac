// Rendezvous URLs, rendezvous values, the store helpers and timeout
// conversion (launcher variables: launch_env_test.cc; the file store:
// file_store_test.cc). Connecting through them is covered with real TCP in
// gloo_communicator_test.cc and with real processes in tests/.
#include "zen/comm/file_store.h"
#include "zen/comm/rendezvous.h"
#include "zen/comm/rendezvous_url.h"
#include "zen/comm/tcp_store.h"
#include "zen/comm/timeout.h"

#include <gloo/rendezvous/hash_store.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <future>
#include <limits>

#include "zen/core/error.h"

namespace zen {
namespace {

using Millis = std::chrono::milliseconds;
using Env = std::map<std::string, std::string>;

TEST(RendezvousTest, ParsesEveryUrlForm) {
  auto f = ParseRendezvousUrl("file:/tmp/x?job=run-7");
  EXPECT_EQ(f.kind, RendezvousUrl::Kind::kFile);
  EXPECT_EQ(f.path, "/tmp/x");
  EXPECT_EQ(f.job, "run-7");
  EXPECT_EQ(f.base, "file:/tmp/x");
  auto r = ParseRendezvousUrl("redis://10.0.0.1:6379");
  EXPECT_EQ(r.kind, RendezvousUrl::Kind::kRedis);
  EXPECT_EQ(r.host, "10.0.0.1");
  EXPECT_EQ(r.port, 6379);
  EXPECT_EQ(r.job, "");
  auto t = ParseRendezvousUrl("tcp://node1:29501?job=a.b_c");
  EXPECT_EQ(t.kind, RendezvousUrl::Kind::kTcp);
  EXPECT_EQ(t.host, "node1");
  EXPECT_EQ(t.port, 29501);
  EXPECT_EQ(t.job, "a.b_c");
  EXPECT_EQ(ParseRendezvousUrl("env://").kind, RendezvousUrl::Kind::kEnv);
  EXPECT_EQ(ParseRendezvousUrl("mpi://").kind, RendezvousUrl::Kind::kMpi);
}

TEST(RendezvousTest, RejectsMalformedUrls) {
  for (const char* bad :
       {"", "file:", "file:?job=x", "redis://host", "redis://host:0", "redis://host:65536",
        "redis://:80", "redis://h:12ab", "tcp://h:-1", "http://x", "file:/x?job=",
        "file:/x?job=a/b", "file:/x?jobs=1", "file:/x?job=a&other=b", "env://x"}) {
    EXPECT_THROW(ParseRendezvousUrl(bad), InvalidArgument) << bad;
  }
  EXPECT_THROW(ParseRendezvousUrl("file:/x?job=" + std::string(129, 'a')), InvalidArgument);
}

TEST(RendezvousTest, TimeoutFromSecondsValidatesAndRoundsUp) {
  EXPECT_EQ(TimeoutFromSeconds(1.5).count(), 1500);
  EXPECT_EQ(TimeoutFromSeconds(0.0001).count(), 1);
  EXPECT_EQ(TimeoutFromSeconds(30 * 24 * 3600.0), kMaxTimeout);
  for (double bad : {0.0, -1.0, std::nan(""), 1e30, std::numeric_limits<double>::infinity()}) {
    try {
      TimeoutFromSeconds(bad, 3);
      ADD_FAILURE() << bad << " accepted";
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("rank 3"), std::string::npos) << what;
      EXPECT_EQ(what.find("-9223372036854775808"), std::string::npos) << what;
    }
  }
  try {
    TimeoutFromSeconds(1e30);
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("1e+30 s"), std::string::npos) << e.what();
  }
}

TEST(RendezvousTest, ValuesRoundTripAndMalformedOnesAreNamed) {
  RendezvousValue v{3, 1, 4, {'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'}};
  const auto bytes = EncodeRendezvousValue(v);
  const auto back = DecodeRendezvousValue(bytes, 3, 1, 0, "k");
  EXPECT_EQ(back.world, 3);
  EXPECT_EQ(back.rank, 1);
  EXPECT_EQ(std::string(back.AddressFor(0).begin(), back.AddressFor(0).end()), "abcd");
  EXPECT_EQ(std::string(back.AddressFor(2).begin(), back.AddressFor(2).end()), "efgh");
  try {
    DecodeRendezvousValue(bytes, 2, 1, 0, "k");
    ADD_FAILURE();
  } catch (const MismatchError& e) {
    EXPECT_NE(std::string(e.what()).find("world size 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("world size 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(DecodeRendezvousValue(bytes, 3, 2, 0, "k"), FormatError);  // wrong rank
  auto truncated = bytes;
  truncated.pop_back();
  EXPECT_THROW(DecodeRendezvousValue(truncated, 3, 1, 0, "k"), FormatError);
  EXPECT_THROW(DecodeRendezvousValue(std::vector<char>(136, 'x'), 3, 1, 0, "k"), FormatError);
  EXPECT_THROW(DecodeRendezvousValue(std::vector<char>(), 3, 1, 0, "k"), FormatError);
}

TEST(RendezvousTest, SanitizeZeroesEverythingButTheAddress) {
  std::vector<char> raw(sizeof(sockaddr_storage) + 8, '\x5a');
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_port = htons(1234);
  in.sin_addr.s_addr = htonl(0x7f000001);
  std::memcpy(raw.data(), &in, sizeof(in));
  std::memset(raw.data() + offsetof(sockaddr_in, sin_zero), '\x5a', sizeof(in.sin_zero));
  const auto clean = SanitizeTcpAddress(raw);
  sockaddr_in out;
  std::memcpy(&out, clean.data(), sizeof(out));
  EXPECT_EQ(out.sin_family, AF_INET);
  EXPECT_EQ(ntohs(out.sin_port), 1234);
  EXPECT_EQ(ntohl(out.sin_addr.s_addr), 0x7f000001u);
  for (size_t i = offsetof(sockaddr_in, sin_zero); i < sizeof(sockaddr_storage); ++i) {
    EXPECT_EQ(clean[i], 0) << i;
  }
  for (size_t i = sizeof(sockaddr_storage); i < clean.size(); ++i) EXPECT_EQ(clean[i], '\x5a');
  raw[0] = raw[1] = 0;  // family 0
  EXPECT_THROW(SanitizeTcpAddress(raw), FormatError);
  EXPECT_THROW(SanitizeTcpAddress(std::vector<char>(10)), FormatError);
}

TEST(RendezvousTest, StoreHelpersOnGloosHashStore) {
  gloo::rendezvous::HashStore store;
  EXPECT_FALSE(StoreHas(store, "k"));
  EXPECT_TRUE(StoreTrySet(store, "k", {'1'}));
  EXPECT_TRUE(StoreHas(store, "k"));
  EXPECT_FALSE(StoreTrySet(store, "k", {'2'}));
}

}  // namespace
}  // namespace zen
