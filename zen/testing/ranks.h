// zen/testing/ranks.h — run N ranks as threads for tests (zen_testing: not
// installed with zen::zen).
//
// Backends:
//   kInProc   in-process mailboxes (algorithm logic only; no network)
//   kGlooTcp  real Gloo TCP over loopback, rendezvous through an in-memory
//             gloo::rendezvous::HashStore shared by the threads
//
// Usage (in a test):
//   zen::testing::RunRanks(zen::testing::Backend::kGlooTcp, /*world=*/5,
//       [&](zen::Communicator& comm) {
//         auto sum = scheme->Sync(comm, inputs[comm.rank()]);
//         EXPECT_EQ(reference.Compare(sum).rows_mismatch, 0);
//       });
// An exception thrown on any rank is rethrown by RunRanks after all threads
// have ended (the first one, with its rank in the message).
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "zen/comm/communicator.h"

namespace zen::testing {

enum class Backend { kInProc, kGlooTcp };

std::string BackendName(Backend b);

void RunRanks(Backend backend, int world, const std::function<void(Communicator&)>& body,
              std::chrono::milliseconds timeout = std::chrono::seconds(30));

}  // namespace zen::testing
