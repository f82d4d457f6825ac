// The TCP transport is unauthenticated, so it must listen only on the
// interface it was given (127.0.0.1 by default), never on all interfaces.
// Checked from the kernel's view: the listening sockets this process owns,
// from /proc/self/fd and /proc/net/tcp{,6}, while rank 0 waits for rank 1
// (Gloo stops listening once its pairs are connected).
#include <gloo/rendezvous/hash_store.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "zen/comm/gloo_communicator.h"

namespace zen {
namespace {

std::set<std::string> OwnSocketInodes() {
  std::set<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(e.path(), ec).string();
    if (!ec && target.rfind("socket:[", 0) == 0) out.insert(target.substr(8, target.size() - 9));
  }
  return out;
}

// Local addresses (hex, as the kernel prints them) of this process's
// listening TCP sockets.
std::vector<std::string> ListeningAddresses() {
  const std::set<std::string> mine = OwnSocketInodes();
  std::vector<std::string> out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string slot, local, remote, state, queues, timer, retr, uid, timeout, inode;
      f >> slot >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (state == "0A" && mine.count(inode)) out.push_back(local.substr(0, local.find(':')));
    }
  }
  return out;
}

TEST(GlooCommunicatorBindTest, DefaultOptionsListenOnLoopbackOnly) {
  GlooOptions defaults;
  EXPECT_EQ(defaults.hostname, "127.0.0.1");
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::vector<std::unique_ptr<Communicator>> comms(2);
  auto connect = [&](int r) {
    GlooOptions o;  // hostname left at its default
    o.prefix = "bind";
    o.timeout = std::chrono::seconds(10);
    comms[static_cast<size_t>(r)] = ConnectGloo(r, 2, store, o);
  };
  // Rank 0 listens while it waits for rank 1: look at its socket then.
  std::thread first(connect, 0);
  std::vector<std::string> listening;
  for (int i = 0; i < 100 && listening.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    listening = ListeningAddresses();
  }
  std::thread second(connect, 1);
  first.join();
  second.join();
  ASSERT_FALSE(listening.empty()) << "found no listening socket of the transport";
  for (const std::string& a : listening) {
    EXPECT_TRUE(a == "0100007F" || a == "00000000000000000000000001000000")
        << "a listening socket is bound to " << a << " (not loopback; all interfaces is 00000000)";
  }
}

}  // namespace
}  // namespace zen
