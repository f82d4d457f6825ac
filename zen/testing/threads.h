// zen/testing/threads.h — the threads of this process as the kernel counts
// them, for tests that check that a call starts no thread (zen_testing).
//
// Usage:
//   const int before = zen::testing::ProcessThreads();
//   pool.Run(1, fn);
//   EXPECT_EQ(zen::testing::ProcessThreads(), before);
#pragma once

namespace zen::testing {

// Threads of this process, from /proc/self/status, so that a check does not
// trust the pool's own bookkeeping; -1 where the file cannot be read.
int ProcessThreads();

}  // namespace zen::testing
