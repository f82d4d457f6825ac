// `zen`: steady-state calls make no heap allocation in zen's own code
// (issue 14 item 1). This file replaces the global operator new of the
// zen_schemes_test binary with a counting one (a thread-local counter, so
// ranks running as threads count separately). A forwarding communicator
// marks the time spent inside the transport (Send / Recv / RecvUpTo, the
// request objects, Wait) so those allocations are counted apart: the
// Communicator API returns each request as a std::unique_ptr, so every
// message costs the transport at least one allocation.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>

#include "zen/testing/ranks.h"
#include "zen/testing/reference.h"
#include "zen/core/reduce.h"
#include "zen/schemes/registry.h"
#include "zen/schemes/zen/zen.h"
#include "zen/workload/synthetic.h"

namespace {
thread_local int64_t t_allocs = 0;            // outside the transport
thread_local int64_t t_transport_allocs = 0;  // inside it
thread_local int64_t t_transport_large = 0;  // inside it, of >= 64 KiB
thread_local int t_in_transport = 0;

void* Counted(std::size_t n) {
  (t_in_transport > 0 ? t_transport_allocs : t_allocs)++;
  if (t_in_transport > 0 && n >= (std::size_t{64} << 10)) ++t_transport_large;
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(std::size_t n) { return Counted(n); }
void* operator new[](std::size_t n) { return Counted(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  (t_in_transport > 0 ? t_transport_allocs : t_allocs)++;
  return std::malloc(n == 0 ? 1 : n);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  (t_in_transport > 0 ? t_transport_allocs : t_allocs)++;
  return std::malloc(n == 0 ? 1 : n);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace zen {

namespace {

struct InTransport {
  InTransport() { ++t_in_transport; }
  ~InTransport() { --t_in_transport; }
};

class MarkedRequest final : public Request {
 public:
  explicit MarkedRequest(std::unique_ptr<Request> r) : r_(std::move(r)) {}
  ~MarkedRequest() override {
    InTransport mark;
    r_.reset();
  }
  void Wait() override {
    InTransport mark;
    r_->Wait();
  }

 private:
  std::unique_ptr<Request> r_;
};

// Forwards to `inner`; every allocation inside the transport is marked.
class MarkingComm final : public Communicator {
 public:
  explicit MarkingComm(Communicator& inner)
      : Communicator(inner.rank(), inner.size(), inner.timeout()), inner_(inner) {}
  std::unique_ptr<Request> Send(int peer, Tag tag, std::span<const std::byte> data) override {
    InTransport mark;
    return std::make_unique<MarkedRequest>(inner_.Send(peer, tag, data));
  }
  std::unique_ptr<Request> Recv(int peer, Tag tag, std::span<std::byte> data) override {
    InTransport mark;
    return std::make_unique<MarkedRequest>(inner_.Recv(peer, tag, data));
  }
  std::unique_ptr<Request> RecvUpTo(int peer, Tag tag, ByteBuffer& out,
                                    int64_t max_bytes) override {
    InTransport mark;
    return std::make_unique<MarkedRequest>(inner_.RecvUpTo(peer, tag, out, max_bytes));
  }

 private:
  Communicator& inner_;
};

// Calls 3..10 of one shape (dense path, both pull encodings by density):
// zero allocations outside the transport on every rank, and none of a
// message's size inside it (Gloo's frames come from the communicator's
// pool; what remains there is a request object per message and Gloo's own
// bookkeeping).
TEST(ZenAlloc, SteadyStateDenseCallsAllocateNothingOutsideTheTransport) {
  for (auto backend : {testing::Backend::kInProc, testing::Backend::kGlooTcp}) {
    for (double density : {0.01, 0.3}) {
      SyntheticSpec spec;
      spec.rows = 12000;  // one extraction chunk: no thread per call
      spec.width = 4;
      spec.density = density;
      spec.seed = 9;
      const int n = 4;
      const std::vector<SparseTensor> inputs = GenerateSynthetic(spec, n);
      const DenseReference reference(inputs);
      std::mutex mu;
      testing::RunRanks(backend, n, [&](Communicator& inner) {
        MarkingComm comm(inner);
        ZenScheme scheme;
        scheme.set_check_agreement(false);  // the metadata round is not the scheme's code
        const std::vector<float> dense = inputs[static_cast<size_t>(comm.rank())].ToDense();
        std::vector<float> buffer(dense.size());
        int64_t outside = 0, transport = 0, large = 0;
        for (int call = 1; call <= 10; ++call) {
          std::copy(dense.begin(), dense.end(), buffer.begin());
          const int64_t a0 = t_allocs, t0 = t_transport_allocs, l0 = t_transport_large;
          scheme.SyncDense(comm, buffer, spec.rows, spec.width, "alloc");
          if (call >= 3) {
            outside += t_allocs - a0;
            transport += t_transport_allocs - t0;
            large += t_transport_large - l0;
          }
          const Agreement got = reference.CompareDense(buffer);
          std::lock_guard lock(mu);
          ASSERT_EQ(got.rows_mismatch, 0);
          ASSERT_LE(got.max_rel_error, 1e-5);
        }
        std::lock_guard lock(mu);
        EXPECT_EQ(outside, 0) << "rank " << comm.rank() << " density " << density;
        EXPECT_EQ(large, 0) << "rank " << comm.rank() << " density " << density
                            << ": message-sized allocations in the transport";
        if (comm.rank() == 0) {
          std::printf("%s, density %.2f: %lld allocations per call outside the transport, %.1f "
                      "inside it (%d messages per call)\n",
                      backend == testing::Backend::kInProc ? "inproc" : "gloo", density,
                      static_cast<long long>(outside / 8),
                      static_cast<double>(transport) / 8 - 4 * (n - 1),  // less this test's wrappers
                      4 * (n - 1));
        }
      });
    }
  }
}

// Calls 3..10 of one shape through the per-rank `sync` that make_sync()
// returns (at `density`, on `n` ranks): on every rank each call allocates
// the result's two vectors (its
// ids and values: the API's result) and nothing else outside the transport;
// every result matches the reference.
template <typename MakeSync>
void ExpectSteadyStateSparseCallsAllocateOnlyTheResult(const char* label, uint64_t seed,
                                                       const MakeSync& make_sync,
                                                       double density = 0.05, int n = 4) {
  SyntheticSpec spec;
  spec.rows = 12000;
  spec.width = 4;
  spec.density = density;
  spec.seed = seed;
  const std::vector<SparseTensor> inputs = GenerateSynthetic(spec, n);
  const DenseReference reference(inputs);
  std::mutex mu;
  testing::RunRanks(testing::Backend::kInProc, n, [&](Communicator& inner) {
    MarkingComm comm(inner);
    auto sync = make_sync();
    int64_t outside = 0;
    for (int call = 1; call <= 10; ++call) {
      const int64_t a0 = t_allocs;
      const SparseTensor sum = sync(comm, inputs[static_cast<size_t>(comm.rank())]);
      if (call >= 3) outside += t_allocs - a0;
      const Agreement got = reference.Compare(sum);
      std::lock_guard lock(mu);
      ASSERT_EQ(got.rows_mismatch, 0);
      ASSERT_LE(got.max_rel_error, 1e-5);
    }
    std::lock_guard lock(mu);
    EXPECT_LE(outside, 8 * 2) << label << ", rank " << comm.rank();  // ids + values per call
    if (comm.rank() == 0) {
      std::printf("%s: %.1f allocations per call outside the transport\n", label,
                  static_cast<double>(outside) / 8);
    }
  });
}

TEST(ZenAlloc, SteadyStateSparseCallsAllocateOnlyTheResult) {
  ExpectSteadyStateSparseCallsAllocateOnlyTheResult("zen sparse path", 4, [] {
    auto scheme = std::make_shared<ZenScheme>();
    scheme->set_check_agreement(false);  // the metadata round is not the scheme's code
    return [scheme](Communicator& comm, const SparseTensor& local) {
      return scheme->Sync(comm, local);
    };
  });
}

// Sparse in, dense out (SyncInto: the top-k hook's entry): no result is
// built, so steady-state calls allocate nothing at all outside the
// transport, for rows (width 4) and for elements (width 1, the path that
// replaces the sort by a scatter), both pull encodings.
TEST(ZenAlloc, SteadyStateSyncIntoCallsAllocateNothingOutsideTheTransport) {
  for (int64_t width : {1, 4}) {
    for (double density : {0.001, 0.01, 0.3}) {
      SyntheticSpec spec;
      spec.rows = width == 1 ? 200000 : 12000;
      spec.width = width;
      spec.density = density;
      spec.seed = 11;
      const int n = 4;
      const std::vector<SparseTensor> inputs = GenerateSynthetic(spec, n);
      const DenseReference reference(inputs);
      std::mutex mu;
      testing::RunRanks(testing::Backend::kInProc, n, [&](Communicator& inner) {
        MarkingComm comm(inner);
        ZenScheme scheme;
        scheme.set_check_agreement(false);  // the metadata round is not the scheme's code
        std::vector<float> out(static_cast<size_t>(spec.rows * width));
        int64_t outside = 0;
        for (int call = 1; call <= 10; ++call) {
          const int64_t a0 = t_allocs;
          scheme.SyncInto(comm, inputs[static_cast<size_t>(comm.rank())], out);
          if (call >= 3) outside += t_allocs - a0;
          const Agreement got = reference.CompareDense(out);
          std::lock_guard lock(mu);
          ASSERT_EQ(got.rows_mismatch, 0);
          ASSERT_LE(got.max_rel_error, 1e-5);
        }
        std::lock_guard lock(mu);
        EXPECT_EQ(outside, 0) << "rank " << comm.rank() << " width " << width << " density "
                              << density;
      });
    }
  }
}

// sparcml keeps its accumulated stream, its messages and its merge scratch
// across calls too (the comparison's other sparse baseline): at 5% its
// streams stay COO, at 30% they turn dense (presence bitmap + all values)
// after a stage; 5 ranks add the fold-in and fold-back of an extra rank.
TEST(SparcmlAlloc, SteadyStateCallsAllocateOnlyTheResult) {
  for (double density : {0.05, 0.3}) {
    for (int n : {4, 5}) {
      ExpectSteadyStateSparseCallsAllocateOnlyTheResult(
          "sparcml", 6,
          [] {
            std::shared_ptr<Scheme> scheme = BuiltinSchemes().Create("sparcml", SchemeOptions{});
            scheme->set_check_agreement(false);
            return [scheme](Communicator& comm, const SparseTensor& local) {
              return scheme->Sync(comm, local);
            };
          },
          density, n);
    }
  }
}

// agsparse (a scheme `auto` picks for small tensors) keeps its message and
// receive buffers across calls too, so its time no longer depends on what
// the process allocated before. Its public Sync runs with the metadata
// round off (that round's record is not the scheme's code).
TEST(AgSparseAlloc, SteadyStateCallsAllocateOnlyTheResult) {
  ExpectSteadyStateSparseCallsAllocateOnlyTheResult("agsparse", 5, [] {
    std::shared_ptr<Scheme> scheme = BuiltinSchemes().Create("agsparse", SchemeOptions{});
    scheme->set_check_agreement(false);
    return [scheme](Communicator& comm, const SparseTensor& local) {
      return scheme->Sync(comm, local);
    };
  });
}

}  // namespace
}  // namespace zen
