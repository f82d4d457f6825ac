// The file store (file_store.h): private, atomic and write-once key files,
// and refusals of what another user or program could plant. Connecting through them is covered with real TCP in
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

TEST(FileStoreTest, FileStoreIsPrivateAtomicAndWriteOnce) {
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

// A FIFO where a key's file belongs must not block get() in open(), and a
// symbolic link or a file of another user must not be read as the key:
// each is refused at once, naming the file.
TEST(FileStoreTest, FileStoreRefusesFifosLinksAndForeignFiles) {
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

// An existing directory others can write, or another user's,
// is refused unless it is sticky (then get() refuses their files, above).
TEST(FileStoreTest, FileStoreRefusesADirectoryOthersCanWrite) {
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
}  // namespace
}  // namespace zen
