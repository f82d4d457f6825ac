// The transport table (transport.h): the built-in entries and what they
// support, lookup by name (unknown names list the known ones), connecting
// through an entry. The in-process entry the test library adds is tested in
// zen/testing/inproc_communicator_test.cc.
#include "zen/comm/transport.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "zen/comm/collectives.h"
#include "zen/comm/mpi_communicator.h"
#include "zen/core/error.h"

namespace zen {
namespace {

// Connects `world` threads through `id` and checks an AllGatherInt of
// 100 + rank on each.
void ConnectAndGather(const TransportRegistry& transports, const std::string& id, int world,
                      const ConnectOptions& options) {
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto comm = transports.Connect(id, r, world, options);
        EXPECT_EQ(comm->rank(), r);
        EXPECT_EQ(comm->size(), world);
        const std::vector<int64_t> all = AllGatherInt(*comm, 100 + r);
        for (int p = 0; p < world; ++p) EXPECT_EQ(all[static_cast<size_t>(p)], 100 + p);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
}

TEST(TransportTableTest, BuiltinEntriesAndWhatTheySupport) {
  const TransportRegistry transports = BuiltinTransports();
  const TransportInfo* gloo = transports.Find("gloo");
  ASSERT_NE(gloo, nullptr);
  EXPECT_TRUE(gloo->builtin);
  EXPECT_FALSE(gloo->ranks_from_launcher);
  EXPECT_EQ(gloo->url_schemes, (std::vector<std::string>{"file:", "redis://", "tcp://"}));
  EXPECT_FALSE(gloo->description.empty());
  const TransportInfo* mpi = transports.Find("mpi");
  EXPECT_EQ(mpi != nullptr, MpiAvailable());
  if (mpi) {
    EXPECT_TRUE(mpi->ranks_from_launcher);
    EXPECT_TRUE(mpi->url_schemes.empty());
  }
  // The in-process transport is the test library's, never built in.
  EXPECT_EQ(transports.Find("inproc"), nullptr);
  std::vector<std::string> want{"gloo"};
  if (MpiAvailable()) want.push_back("mpi");
  EXPECT_EQ(transports.ids(), want);
}

TEST(TransportTableTest, UnknownNamesListTheKnownOnesAndDuplicatesAreRefused) {
  const TransportRegistry transports = BuiltinTransports();
  try {
    transports.Get("nccl");
    ADD_FAILURE() << "nccl found";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'nccl'"), std::string::npos) << what;
    EXPECT_NE(what.find("gloo"), std::string::npos) << what;
  }
  EXPECT_THROW(transports.Connect("nccl", 0, 1, {}), InvalidArgument);
  TransportRegistry mine = BuiltinTransports();
  TransportInfo again = *mine.Find("gloo");
  EXPECT_THROW(mine.Add(again), InvalidArgument);
  again.id = "other";
  again.factory = {};
  EXPECT_THROW(mine.Add(again), InvalidArgument);
}

TEST(TransportTableTest, GlooEntryConnectsThroughAFileRendezvous) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "zen-transports-XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  ConnectOptions options;
  options.rendezvous = "file:" + tmpl + "/store";
  options.timeout = std::chrono::seconds(20);
  ConnectAndGather(BuiltinTransports(), "gloo", 3, options);
  std::filesystem::remove_all(tmpl);
}

}  // namespace
}  // namespace zen
