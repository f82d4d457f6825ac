// After one request of a communicator has failed (a timeout, a dead peer),
// the requests still pending on it must not each wait out a full timeout of
// their own when they are destroyed: a collective that unwinds with several
// requests in flight would otherwise report the failure only after
// (pending requests) x timeout, far beyond "timeout plus a few seconds".
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "zen/testing/ranks.h"
#include "zen/core/error.h"

namespace zen {
namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

TEST(CommunicatorSettleTest, PendingRequestsSettlePromptlyAfterAFailure) {
  const Millis timeout(400);
  testing::RunRanks(
      testing::Backend::kGlooTcp, 2,
      [&](Communicator& comm) {
        if (comm.rank() == 0) {  // alive, connected, silent
          std::this_thread::sleep_for(timeout * 6);
          return;
        }
        std::vector<std::byte> buf(4 * 64);
        const auto start = Clock::now();
        {
          std::vector<std::unique_ptr<Request>> pending;
          for (Tag t = 1; t <= 4; ++t) {
            pending.push_back(comm.Recv(0, 100 + t, std::span(buf).subspan((t - 1) * 64, 64)));
          }
          EXPECT_THROW(pending[0]->Wait(), TransportError);
        }  // three unfinished requests destroyed here
        const auto took = std::chrono::duration_cast<Millis>(Clock::now() - start);
        EXPECT_LT(took.count(), timeout.count() + 700)
            << "the failure took " << took.count() << " ms to unwind (timeout " << timeout.count()
            << " ms)";
      },
      timeout);
}

}  // namespace
}  // namespace zen
