// Rendezvous URLs, launcher variables, rendezvous values, the file store and
// timeout conversion. Connecting through them is covered with real TCP in
// gloo_communicator_test.cc and with real processes in tests/.
#include "zen/comm/rendezvous.h"

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

TEST(RendezvousTest, TorchrunVariablesMapToZensTcpStoreAndAGenerationJob) {
  const Env env = {{"RANK", "3"},
                   {"WORLD_SIZE", "4"},
                   {"MASTER_ADDR", "10.1.2.3"},
                   {"MASTER_PORT", "29500"},
                   {"TORCHELASTIC_RUN_ID", "my/run"},
                   {"TORCHELASTIC_RESTART_COUNT", "2"},
                   {"OMPI_COMM_WORLD_RANK", "0"}};  // torchrun wins
  const auto info = RendezvousFromEnv(env);
  ASSERT_TRUE(info);
  EXPECT_EQ(info->rank, 3);
  EXPECT_EQ(info->size, 4);
  EXPECT_EQ(info->rendezvous, "tcp://10.1.2.3:29501");
  EXPECT_EQ(info->job, "torchelastic-my_run-2");
  EXPECT_EQ(info->launcher, "torchrun");
  ParseRendezvousUrl(info->rendezvous + "?job=" + info->job);  // a valid URL and job id
  Env next = env;
  next["TORCHELASTIC_RESTART_COUNT"] = "3";
  EXPECT_NE(RendezvousFromEnv(next)->job, info->job);  // a new generation, new keys
}

// Issue 41 C2: the TCP store's per-job secret: ZEN_STORE_SECRET when set,
// else derived from torchrun's variables (so a worker of another run or
// restart brings another one); at most 256 bytes.
TEST(RendezvousTest, TheStoreSecretComesFromTheLaunchEnvironment) {
  Env env = {{"RANK", "0"},           {"WORLD_SIZE", "2"},          {"MASTER_ADDR", "h"},
             {"MASTER_PORT", "29500"}, {"TORCHELASTIC_RUN_ID", "r1"}};
  const std::string derived = RendezvousFromEnv(env)->secret;
  EXPECT_EQ(derived, "torchrun/r1/0/h:29500");
  Env restarted = env;
  restarted["TORCHELASTIC_RESTART_COUNT"] = "1";
  EXPECT_NE(RendezvousFromEnv(restarted)->secret, derived);
  Env other_port = env;
  other_port["MASTER_PORT"] = "29600";
  EXPECT_NE(RendezvousFromEnv(other_port)->secret, derived);
  env["ZEN_STORE_SECRET"] = "0123456789abcdef";
  EXPECT_EQ(RendezvousFromEnv(env)->secret, "0123456789abcdef");
  env["ZEN_STORE_SECRET"] = std::string(257, 'x');
  EXPECT_THROW(RendezvousFromEnv(env), InvalidArgument);
}

TEST(RendezvousTest, MpirunVariables) {
  const auto info = RendezvousFromEnv(
      {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "3"}, {"PMIX_NAMESPACE", "prterun-x-1@1"}});
  ASSERT_TRUE(info);
  EXPECT_EQ(info->rank, 1);
  EXPECT_EQ(info->size, 3);
  EXPECT_EQ(info->rendezvous, "mpi://");
  EXPECT_EQ(info->job, "mpi-prterun-x-1_1");
  EXPECT_EQ(info->launcher, "mpirun");
  const auto over = RendezvousFromEnv({{"OMPI_COMM_WORLD_RANK", "0"},
                                       {"OMPI_COMM_WORLD_SIZE", "2"},
                                       {"ZEN_RENDEZVOUS", "file:/shared/d"}});
  EXPECT_EQ(over->rendezvous, "file:/shared/d");
}

TEST(RendezvousTest, EnvWithoutALauncherIsNulloptAndBadValuesAreNamed) {
  EXPECT_FALSE(RendezvousFromEnv({}));
  EXPECT_FALSE(RendezvousFromEnv({{"RANK", "0"}, {"WORLD_SIZE", "2"}}));  // no store address
  const Env base = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}};
  for (const auto& [k, v] : std::vector<std::pair<std::string, std::string>>{
           {"RANK", "2"}, {"RANK", "-1"}, {"WORLD_SIZE", "0"}, {"WORLD_SIZE", "x"},
           {"MASTER_PORT", "65535"}, {"MASTER_PORT", "0"}, {"MASTER_ADDR", ""},
           {"TORCHELASTIC_RESTART_COUNT", "1e3"}, {"ZEN_RENDEZVOUS", "nope://"}}) {
    Env env = base;
    env[k] = v;
    try {
      RendezvousFromEnv(env);
      ADD_FAILURE() << k << "=" << v << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(k == "ZEN_RENDEZVOUS" ? "nope://" : k),
                std::string::npos)
          << e.what();
    }
  }
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

TEST(RendezvousTest, FileStoreIsPrivateAtomicAndWriteOnce) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("zen-fstore-" + std::to_string(::getpid())))
                              .string();
  std::filesystem::remove_all(dir);
  {
    FileStore store(dir + "/sub");
    store.set("a/b c", {'1', '2'});
    EXPECT_TRUE(store.Has("a/b c"));
    EXPECT_FALSE(store.Has("a/b"));
    EXPECT_EQ(store.get("a/b c"), (std::vector<char>{'1', '2'}));
    EXPECT_THROW(store.set("a/b c", {'3'}), TransportError);
    EXPECT_FALSE(StoreTrySet(store, "a/b c", {'3'}));
    EXPECT_TRUE(StoreTrySet(store, "x", {}));
    EXPECT_EQ(store.get("x"), std::vector<char>{});
    struct stat st {};
    ASSERT_EQ(::stat(store.PathOf("a/b c").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    ASSERT_EQ(::stat((dir + "/sub").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    EXPECT_THROW(store.wait({"never"}, Millis(20)), TransportError);
    const std::string long_key(1000, 'k');
    store.set(long_key, {'z'});
    EXPECT_EQ(store.get(long_key), std::vector<char>{'z'});
    EXPECT_LT(std::filesystem::path(store.PathOf(long_key)).filename().string().size(), 256u);
  }
  std::filesystem::remove_all(dir);
}

// Issue 41 H3: a FIFO where a key's file belongs made get() block in open()
// for ever; a symbolic link or a file of another user was read as the key.
// Each is now refused at once, naming the file.
TEST(RendezvousTest, FileStoreRefusesFifosLinksAndForeignFiles) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("zen-fifo-" + std::to_string(::getpid())))
          .string();
  std::filesystem::remove_all(dir);
  {
    FileStore store(dir);
    const std::string fifo = store.PathOf("fifo");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    auto got = std::async(std::launch::async, [&] {
      try {
        store.get("fifo");
        return std::string("no error");
      } catch (const Error& e) {
        return std::string(e.what());
      }
    });
    if (got.wait_for(std::chrono::seconds(3)) != std::future_status::ready) {
      ADD_FAILURE() << "get() blocks on a FIFO";
      const int writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // lets it go
      if (writer >= 0) ::close(writer);
    }
    const std::string what = got.get();
    EXPECT_NE(what.find("not a regular file"), std::string::npos) << what;
    EXPECT_NE(what.find(fifo), std::string::npos) << what;

    ASSERT_EQ(::symlink("/etc/hostname", store.PathOf("link").c_str()), 0);
    EXPECT_TRUE(store.Has("link"));
    EXPECT_THROW(store.get("link"), FormatError);

    if (::geteuid() == 0) {  // only root can give a file to another user
      store.set("foreign", {'1'});
      ASSERT_EQ(::chown(store.PathOf("foreign").c_str(), 54321, 54321), 0);
      try {
        store.get("foreign");
        ADD_FAILURE() << "a file of another user was read";
      } catch (const FormatError& e) {
        EXPECT_NE(std::string(e.what()).find("another user"), std::string::npos) << e.what();
      }
    }
  }
  std::filesystem::remove_all(dir);
}

// Issue 41 H3: an existing directory others can write, or another user's,
// is refused unless it is sticky (then get() refuses their files, above).
TEST(RendezvousTest, FileStoreRefusesADirectoryOthersCanWrite) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("zen-opendir-" + std::to_string(::getpid())))
          .string();
  std::filesystem::remove_all(dir);
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  for (const mode_t mode : {0777, 0770, 0722}) {
    ASSERT_EQ(::chmod(dir.c_str(), mode), 0);
    try {
      FileStore store(dir);
      ADD_FAILURE() << "mode " << std::oct << mode << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(dir), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("not sticky"), std::string::npos) << e.what();
    }
  }
  for (const mode_t mode : {01777, 0700, 0755}) {
    ASSERT_EQ(::chmod(dir.c_str(), mode), 0);
    EXPECT_NO_THROW(FileStore store(dir)) << std::oct << mode;
  }
  if (::geteuid() == 0) {
    ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
    ASSERT_EQ(::chown(dir.c_str(), 54321, 54321), 0);
    EXPECT_THROW(FileStore store(dir), InvalidArgument);
    ASSERT_EQ(::chmod(dir.c_str(), 01777), 0);
    EXPECT_NO_THROW(FileStore store(dir));
  }
  std::filesystem::remove_all(dir);
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
