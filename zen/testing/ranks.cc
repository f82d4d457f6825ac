#include "zen/testing/ranks.h"

#include <gloo/rendezvous/hash_store.h>

#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "zen/comm/gloo_communicator.h"
#include "zen/testing/inproc_communicator.h"
#include "zen/core/error.h"

namespace zen::testing {
namespace {

// The same exception type, with "RunRanks: rank r of n (backend): " in front,
// so tests can still EXPECT_THROW(..., zen::FormatError).
std::exception_ptr WithRank(std::exception_ptr ex, const std::string& prefix) {
  try {
    std::rethrow_exception(ex);
  } catch (const FormatError& e) {
    return std::make_exception_ptr(FormatError(prefix + e.what()));
  } catch (const MismatchError& e) {
    return std::make_exception_ptr(MismatchError(prefix + e.what()));
  } catch (const InvalidArgument& e) {
    return std::make_exception_ptr(InvalidArgument(prefix + e.what()));
  } catch (const TransportError& e) {
    return std::make_exception_ptr(TransportError(prefix + e.what()));
  } catch (const Error& e) {
    return std::make_exception_ptr(Error(prefix + e.what()));
  } catch (const std::exception& e) {
    return std::make_exception_ptr(std::runtime_error(prefix + e.what()));
  } catch (...) {
    return std::make_exception_ptr(std::runtime_error(prefix + "unknown exception"));
  }
}

// Keeps the exception that was thrown first (in time), with its rank.
class FirstError {
 public:
  void Record(int rank, int world, Backend backend, std::exception_ptr ex) {
    std::lock_guard lock(mu_);
    if (first_) return;
    first_ = WithRank(ex, "RunRanks: rank " + std::to_string(rank) + " of " +
                              std::to_string(world) + " (" + BackendName(backend) + "): ");
  }
  void RethrowIfAny() {
    if (first_) std::rethrow_exception(first_);
  }

 private:
  std::mutex mu_;
  std::exception_ptr first_;
};

}  // namespace

std::string BackendName(Backend b) {
  switch (b) {
    case Backend::kInProc:
      return "inproc";
    case Backend::kGlooTcp:
      return "gloo-tcp";
  }
  return "unknown";
}

void RunRanks(Backend backend, int world, const std::function<void(Communicator&)>& body,
              std::chrono::milliseconds timeout) {
  if (world < 1) throw InvalidArgument(Where{}, "RunRanks: world size ", world, " < 1");
  std::unique_ptr<InProcFabric> fabric;
  std::shared_ptr<gloo::rendezvous::Store> store;
  if (backend == Backend::kInProc) {
    fabric = std::make_unique<InProcFabric>(world);
  } else {
    store = std::make_shared<gloo::rendezvous::HashStore>();
  }
  GlooOptions options;
  options.hostname = "127.0.0.1";
  options.prefix = "runranks";
  options.timeout = timeout;

  FirstError first;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(world));
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        std::unique_ptr<Communicator> comm = backend == Backend::kInProc
                                                 ? fabric->Connect(rank, timeout)
                                                 : ConnectGloo(rank, world, store, options);
        body(*comm);
      } catch (...) {
        first.Record(rank, world, backend, std::current_exception());
      }
    });
  }
  for (auto& t : threads) t.join();
  first.RethrowIfAny();
}

}  // namespace zen::testing
