// In-process specifics; the shared point-to-point semantics are tested for
// every backend in transport_test.cc.
#include "zen/testing/inproc_communicator.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "zen/comm/collectives.h"
#include "zen/core/error.h"

namespace zen {
namespace {

using Millis = std::chrono::milliseconds;

TEST(InProcFabricTest, RejectsBadArguments) {
  EXPECT_THROW(InProcFabric(0), InvalidArgument);
  InProcFabric fabric(2);
  EXPECT_THROW(fabric.Connect(2, Millis(10)), InvalidArgument);
  EXPECT_THROW(fabric.Connect(-1, Millis(10)), InvalidArgument);
  EXPECT_THROW(fabric.Connect(0, Millis(0)), InvalidArgument);
}

TEST(InProcFabricTest, SendIsEagerAndCommunicatorsOutliveTheFabric) {
  std::unique_ptr<Communicator> a, b;
  {
    InProcFabric fabric(2);
    a = fabric.Connect(0, Millis(1000));
    b = fabric.Connect(1, Millis(1000));
  }
  std::vector<std::byte> out = {std::byte{1}, std::byte{2}, std::byte{3}};
  auto s = a->Send(1, 4, out);
  out.assign(3, std::byte{0});  // the payload was copied on Send
  std::vector<std::byte> in(3);
  b->Recv(0, 4, in)->Wait();  // same thread: no sender needs to be running
  EXPECT_EQ(in, (std::vector<std::byte>{std::byte{1}, std::byte{2}, std::byte{3}}));
  EXPECT_EQ(a->counters().sent(1), 3u);
  EXPECT_EQ(b->counters().recv(0), 3u);
}

TEST(InProcFabricTest, KeysAreDirectional) {
  InProcFabric fabric(3);
  auto c0 = fabric.Connect(0, Millis(200));
  auto c1 = fabric.Connect(1, Millis(200));
  auto c2 = fabric.Connect(2, Millis(200));
  std::vector<std::byte> one = {std::byte{9}};
  c0->Send(1, 7, one)->Wait();
  std::vector<std::byte> in(1);
  // The same tag from another source, or in the other direction, does not match.
  EXPECT_THROW(c1->Recv(2, 7, in)->Wait(), TransportError);
  EXPECT_THROW(c0->Recv(1, 7, in)->Wait(), TransportError);
  c1->Recv(0, 7, in)->Wait();
  EXPECT_EQ(in[0], std::byte{9});
  (void)c2;
}

TEST(InProcFabricTest, WaitingTwiceReportsTheSameOutcome) {
  InProcFabric fabric(2);
  auto a = fabric.Connect(0, Millis(100));
  auto b = fabric.Connect(1, Millis(100));
  std::vector<std::byte> in(2);
  auto r = b->Recv(0, 1, in);
  EXPECT_THROW(r->Wait(), TransportError);
  EXPECT_THROW(r->Wait(), TransportError);
  // The message that comes after the timeout is dropped, not given to the next receive.
  std::vector<std::byte> late = {std::byte{1}, std::byte{1}};
  std::vector<std::byte> next = {std::byte{2}, std::byte{2}};
  a->Send(1, 1, late)->Wait();
  a->Send(1, 1, next)->Wait();
  b->Recv(0, 1, in)->Wait();
  EXPECT_EQ(in, next);
}

// AddInProcTransport: the "inproc" entry of a transport table, not built
// in, connecting the fabric's ranks by name.
TEST(InProcFabricTest, IsTheInprocEntryOfATransportTable) {
  TransportRegistry transports = BuiltinTransports();
  AddInProcTransport(transports, std::make_shared<InProcFabric>(4));
  const TransportInfo* inproc = transports.Find("inproc");
  ASSERT_NE(inproc, nullptr);
  EXPECT_FALSE(inproc->builtin);
  EXPECT_FALSE(inproc->ranks_from_launcher);
  ConnectOptions options;
  options.timeout = std::chrono::seconds(20);
  std::vector<std::string> errors(4);
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto comm = transports.Connect("inproc", r, 4, options);
        const std::vector<int64_t> all = AllGatherInt(*comm, 100 + r);
        for (int p = 0; p < 4; ++p) EXPECT_EQ(all[static_cast<size_t>(p)], 100 + p);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 4; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
  EXPECT_THROW(transports.Connect("inproc", 0, 3, options), InvalidArgument);  // not the fabric's size
  EXPECT_THROW(AddInProcTransport(transports, std::make_shared<InProcFabric>(2)), InvalidArgument);
}

}  // namespace
}  // namespace zen
