#include "zen/core/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "zen/core/partition.h"

namespace zen {
namespace {

// Threads of this process, from the kernel (/proc/self/status), so the
// check does not trust the pool's own bookkeeping.
int ProcessThreads() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "Threads:") {
      int n = 0;
      status >> n;
      return n;
    }
  }
  return -1;
}

TEST(WorkerPool, RunsEveryPartOnceOnDistinctThreads) {
  WorkerPool pool(4);
  EXPECT_EQ(pool.size(), 4);
  EXPECT_EQ(pool.started(), 0);  // nothing starts before a parallel Run
  for (int parts : {0, 1, 2, 3, 4}) {
    std::vector<std::atomic<int>> calls(4);
    std::vector<std::thread::id> who(4);
    pool.Run(parts, [&](int p) {
      ++calls[static_cast<size_t>(p)];
      who[static_cast<size_t>(p)] = std::this_thread::get_id();
    });
    std::set<std::thread::id> distinct;
    for (int p = 0; p < 4; ++p) {
      EXPECT_EQ(calls[static_cast<size_t>(p)].load(), p < parts ? 1 : 0) << parts << " parts";
      if (p < parts) distinct.insert(who[static_cast<size_t>(p)]);
    }
    EXPECT_EQ(static_cast<int>(distinct.size()), parts);
    if (parts >= 1) {
      EXPECT_EQ(who[static_cast<size_t>(parts - 1)], std::this_thread::get_id());
    }
  }
  // More parts than threads are clamped: the pool never runs part size().
  std::atomic<int> total{0};
  pool.Run(9, [&](int p) { total += p < 4 ? 1 : 100; });
  EXPECT_EQ(total.load(), 4);
}

TEST(WorkerPool, StartsItsWorkersOnceAndReusesThem) {
  const int before = ProcessThreads();
  ASSERT_GT(before, 0);
  {
    WorkerPool pool(3);
    pool.Run(1, [](int) {});
    EXPECT_EQ(ProcessThreads(), before);  // one part: no thread
    std::atomic<int64_t> sum{0};
    for (int i = 0; i < 2000; ++i) {
      pool.Run(3, [&](int p) { sum += p; });
      ASSERT_EQ(pool.started(), 2);
    }
    EXPECT_EQ(sum.load(), 2000 * 3);
    EXPECT_EQ(ProcessThreads(), before + 2);
  }
  EXPECT_EQ(ProcessThreads(), before);  // joined by the destructor
}

TEST(WorkerPool, RethrowsAPartsExceptionAfterAllPartsFinish) {
  WorkerPool pool(3);
  for (int thrower : {0, 1, 2}) {
    std::atomic<int> finished{0};
    try {
      pool.Run(3, [&](int p) {
        if (p == thrower) throw std::runtime_error("part " + std::to_string(p));
        ++finished;
      });
      ADD_FAILURE() << "no exception from part " << thrower;
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), "part " + std::to_string(thrower));
    }
    EXPECT_EQ(finished.load(), 2);
    // The pool stays usable.
    std::atomic<int> ok{0};
    pool.Run(3, [&](int) { ++ok; });
    EXPECT_EQ(ok.load(), 3);
  }
}

// The partitioners' parallel paths run on their own pool: after the first
// call started it, later calls start no thread (issue 14: no thread created
// per call).
TEST(WorkerPool, PartitionersCreateNoThreadPerCall) {
  const int64_t rows = 200000, width = 2;  // several chunks of 16384 rows
  std::vector<float> dense(static_cast<size_t>(rows * width), 0.0f);
  for (int64_t r = 0; r < rows; r += 3) dense[static_cast<size_t>(r * width)] = 1.0f;
  const RowOwner owner = RowOwner::Permuted(5, rows, 4);
  for (const char* kind : {"counting", "hierarchical"}) {
    auto part = MakePartitioner(kind, 3);
    Partitions p;
    part->PartitionDense(dense, rows, width, owner, p);
    const int after_first = ProcessThreads();
    for (int i = 0; i < 20; ++i) {
      part->PartitionDense(dense, rows, width, owner, p);
      ASSERT_EQ(ProcessThreads(), after_first) << kind << " call " << i;
    }
    EXPECT_EQ(p.total(), (rows + 2) / 3) << kind;
  }
}

}  // namespace
}  // namespace zen
