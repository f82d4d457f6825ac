#include "zen/core/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "zen/testing/threads.h"

namespace zen {
namespace {

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
  const int before = testing::ProcessThreads();
  ASSERT_GT(before, 0);
  {
    WorkerPool pool(3);
    pool.Run(1, [](int) {});
    EXPECT_EQ(testing::ProcessThreads(), before);  // one part: no thread
    std::atomic<int64_t> sum{0};
    for (int i = 0; i < 2000; ++i) {
      pool.Run(3, [&](int p) { sum += p; });
      ASSERT_EQ(pool.started(), 2);
    }
    EXPECT_EQ(sum.load(), 2000 * 3);
    EXPECT_EQ(testing::ProcessThreads(), before + 2);
  }
  EXPECT_EQ(testing::ProcessThreads(), before);  // joined by the destructor
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

TEST(ParallelChunks, CoversEveryItemOnce) {
  for (int threads : {1, 2, 5}) {
    WorkerPool pool(threads);
    for (int64_t items : {0, 1, 10, 1000, 12345}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(items));
      const int chunks = ParallelChunks(pool, threads, items, 100, [&](int, int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
      });
      EXPECT_EQ(chunks, ChunkCount(threads, items, 100));
      EXPECT_LE(chunks, threads);
      for (int64_t i = 0; i < items; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)], 1);
    }
  }
}

}  // namespace
}  // namespace zen
