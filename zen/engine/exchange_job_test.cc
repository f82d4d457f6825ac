#include "zen/engine/exchange_job.h"

#include <gtest/gtest.h>

#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "zen/core/error.h"
#include "zen/testing/ranks.h"

namespace zen {
namespace {

using testing::Backend;

constexpr auto kTimeout = std::chrono::seconds(20);

class ExchangeJobTest : public ::testing::TestWithParam<Backend> {};

// Bytes rank `from` sends rank `to`: uneven, empty where from + to is a
// multiple of 3, and a pattern of both ranks and the position.
int64_t Size(int from, int to) { return (from + to) % 3 == 0 ? 0 : 5 + 7 * from + 3 * to; }
std::byte Byte(int from, int to, int64_t i) {
  return static_cast<std::byte>((from * 31 + to * 7 + i * 13) & 0xFF);
}

// The send buffer of `rank` and its sizes (its own segment included, not sent).
std::vector<std::byte> SendOf(int rank, int world, std::vector<int64_t>& sizes) {
  std::vector<std::byte> out;
  sizes.assign(static_cast<size_t>(world), 0);
  for (int to = 0; to < world; ++to) {
    sizes[static_cast<size_t>(to)] = Size(rank, to);
    for (int64_t i = 0; i < Size(rank, to); ++i) out.push_back(Byte(rank, to, i));
  }
  return out;
}

// What `rank` must receive from each peer: Size(from, rank) bytes of the
// sender's pattern; its own segment stays as the caller left it (0xEE).
void ExpectReceived(const std::vector<std::byte>& recv, int rank, int world) {
  size_t at = 0;
  for (int from = 0; from < world; ++from) {
    for (int64_t i = 0; i < Size(from, rank); ++i, ++at) {
      const std::byte want = from == rank ? std::byte{0xEE} : Byte(from, rank, i);
      ASSERT_EQ(recv[at], want) << "rank " << rank << " from " << from << " byte " << i;
    }
  }
  EXPECT_EQ(at, recv.size());
}

TEST_P(ExchangeJobTest, ExchangeBytesMovesUnevenAndEmptySegments) {
  for (int world : {2, 3, 4}) {
    testing::RunRanks(GetParam(), world, [&](Communicator& comm) {
      const int r = comm.rank();
      std::vector<int64_t> send_sizes, recv_sizes(static_cast<size_t>(world));
      const std::vector<std::byte> send = SendOf(r, world, send_sizes);
      int64_t total = 0;
      for (int from = 0; from < world; ++from) total += recv_sizes[static_cast<size_t>(from)] = Size(from, r);
      std::vector<std::byte> recv(static_cast<size_t>(total), std::byte{0xEE});
      ExchangeBytes(comm, "t", send, send_sizes, recv, recv_sizes);
      ExpectReceived(recv, r, world);
    }, kTimeout);
  }
}

TEST_P(ExchangeJobTest, GatherRecordsFillsTheTable) {
  testing::RunRanks(GetParam(), 3, [&](Communicator& comm) {
    const int r = comm.rank();
    const std::vector<int64_t> mine = {0x7A656E46, 10 * r + 1, -r, r * r};
    std::vector<int64_t> table(12, -99);
    GatherRecords(comm, "t", std::as_bytes(std::span(mine)), std::as_writable_bytes(std::span(table)));
    for (int p = 0; p < 3; ++p) {
      const std::vector<int64_t> want = {0x7A656E46, 10 * p + 1, -p, p * p};
      for (size_t i = 0; i < 4; ++i) {
        EXPECT_EQ(table[static_cast<size_t>(p) * 4 + i], want[i]) << "rank " << r << " row " << p;
      }
    }
  }, kTimeout);
}

// Through a Context: gathers and exchanges queued behind a batch of
// tensors, asynchronously, come out right and in order.
TEST_P(ExchangeJobTest, ContextRunsJobsInOrderWithBatches) {
  constexpr int kWorld = 3;
  testing::RunRanks(GetParam(), kWorld, [&](Communicator& comm) {
    Context ctx(comm);
    const int r = comm.rank();
    std::vector<float> dense(6, static_cast<float>(r + 1));
    std::vector<BatchTensor> batch = {BatchTensor::Dense("d", dense, 2, 3)};
    const Handle b = ctx.Start("bucket0", batch);
    const std::vector<int64_t> mine = {42, r};
    std::vector<int64_t> table(2 * kWorld);
    const Handle g = StartGatherRecords(ctx, "t", std::as_bytes(std::span(mine)),
                                        std::as_writable_bytes(std::span(table)));
    std::vector<int64_t> send_sizes, recv_sizes(kWorld);
    const std::vector<std::byte> send = SendOf(r, kWorld, send_sizes);
    int64_t total = 0;
    for (int from = 0; from < kWorld; ++from) total += recv_sizes[static_cast<size_t>(from)] = Size(from, r);
    std::vector<std::byte> recv(static_cast<size_t>(total), std::byte{0xEE});
    bool called = false;
    const Handle x = StartExchangeBytes(ctx, "t", send, send_sizes, recv, recv_sizes,
                                        [&](std::exception_ptr e) { called = e == nullptr; });
    x.Wait();
    EXPECT_TRUE(b.Test() && g.Test());
    b.Wait();
    g.Wait();
    ctx.Drain();
    EXPECT_TRUE(called);
    for (float v : dense) EXPECT_EQ(v, 6.0f);  // 1 + 2 + 3
    for (int p = 0; p < kWorld; ++p) {
      EXPECT_EQ(table[2 * static_cast<size_t>(p)], 42);
      EXPECT_EQ(table[2 * static_cast<size_t>(p) + 1], p);
    }
    ExpectReceived(recv, r, kWorld);
  }, kTimeout);
}

// A rank whose record starts with another identity is in another call:
// every rank raises MismatchError, and the communicator refuses later calls.
TEST_P(ExchangeJobTest, AnotherIdentityIsMismatchOnEveryRankAndMarksOutOfStep) {
  testing::RunRanks(GetParam(), 3, [&](Communicator& comm) {
    const int r = comm.rank();
    const std::vector<int64_t> mine = {r == 1 ? 7 : 42, r};
    std::vector<int64_t> table(6);
    try {
      GatherRecords(comm, "fsdp", std::as_bytes(std::span(mine)), std::as_writable_bytes(std::span(table)));
      ADD_FAILURE() << "rank " << r << ": no MismatchError";
    } catch (const MismatchError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("rank " + std::to_string(r == 1 ? 0 : 1) + " was in another call"),
                std::string::npos) << what;
      EXPECT_NE(what.find("fsdp"), std::string::npos) << what;
    }
    EXPECT_FALSE(comm.out_of_step().empty());
    std::vector<int64_t> sizes(3, 0);
    std::vector<std::byte> none;
    EXPECT_THROW(ExchangeBytes(comm, "fsdp", none, sizes, none, sizes), MismatchError);
  }, kTimeout);
}

// A job's error comes from Handle::Wait() and reaches on_done, and the
// context goes on with the next job.
TEST_P(ExchangeJobTest, JobErrorsComeFromWaitAndOnDone) {
  testing::RunRanks(GetParam(), 2, [&](Communicator& comm) {
    Context ctx(comm);
    const int r = comm.rank();
    const std::vector<int64_t> mine = {r == 0 ? 1 : 2, r};
    std::vector<int64_t> table(4);
    bool saw_error = false;
    const Handle h = StartGatherRecords(ctx, "t", std::as_bytes(std::span(mine)),
                                        std::as_writable_bytes(std::span(table)),
                                        [&](std::exception_ptr e) { saw_error = e != nullptr; });
    EXPECT_THROW(h.Wait(), MismatchError);
    EXPECT_THROW(h.Wait(), MismatchError);  // on every call
    ctx.Drain();
    EXPECT_TRUE(saw_error);
    // The next job runs (and refuses: the communicator is out of step).
    std::vector<int64_t> sizes(2, 0);
    std::vector<std::byte> none;
    EXPECT_THROW(StartExchangeBytes(ctx, "t", none, sizes, none, sizes).Wait(), MismatchError);
  }, kTimeout);
}

TEST_P(ExchangeJobTest, BadBuffersAreInvalidArgumentBeforeAnythingIsQueued) {
  testing::RunRanks(GetParam(), 2, [&](Communicator& comm) {
    Context ctx(comm);
    std::vector<std::byte> four(4), eight(8), sixteen(16);
    EXPECT_THROW(StartGatherRecords(ctx, "t", four, eight), InvalidArgument);     // record < 8
    EXPECT_THROW(StartGatherRecords(ctx, "t", eight, eight), InvalidArgument);    // not 2 x 8
    EXPECT_THROW(StartExchangeBytes(ctx, "t", eight, {4, 5}, eight, {0, 0}), InvalidArgument);
    EXPECT_THROW(StartExchangeBytes(ctx, "t", eight, {-1, 1}, eight, {0, 0}), InvalidArgument);
    EXPECT_THROW(StartExchangeBytes(ctx, "t", eight, {0, 8, 0}, eight, {0, 0}), InvalidArgument);
    // Nothing was queued: the ranks are still in step and a real call works.
    const std::vector<int64_t> mine = {1, comm.rank()};
    std::vector<int64_t> table(4);
    StartGatherRecords(ctx, "t", std::as_bytes(std::span(mine)), std::as_writable_bytes(std::span(table)))
        .Wait();
    EXPECT_EQ(table[3], 1);
  }, kTimeout);
}

// A peer that never takes part: TransportError after the communicator's
// timeout, not a hang.
TEST(ExchangeJob, AbsentPeerIsTransportErrorAfterTheTimeout) {
  testing::RunRanks(Backend::kInProc, 2, [&](Communicator& comm) {
    if (comm.rank() == 1) return;
    std::vector<std::byte> send(8), recv(8);
    EXPECT_THROW(ExchangeBytes(comm, "t", send, std::vector<int64_t>{0, 8}, recv,
                               std::vector<int64_t>{0, 8}),
                 TransportError);
  }, std::chrono::milliseconds(300));
}

INSTANTIATE_TEST_SUITE_P(Backends, ExchangeJobTest,
                         ::testing::Values(Backend::kInProc, Backend::kGlooTcp),
                         [](const auto& info) {
                           return info.param == Backend::kInProc ? "InProc" : "GlooTcp";
                         });

}  // namespace
}  // namespace zen
