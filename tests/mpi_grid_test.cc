// zen_mpi_grid — the scheme grid over the MPI transport, run by ctest as
//   mpirun --allow-run-as-root --oversubscribe -np 3 zen_mpi_grid
// Every rank syncs every registered scheme (AllSchemes: builtin + auto) on a
// few shapes and checks the sum against zen::DenseReference over all ranks'
// inputs (each rank regenerates every rank's synthetic input). Then the
// point-to-point contract: sizes, RecvUpTo, a wrong-size FormatError, a
// timeout TransportError, and counters. Exit 0 when everything agreed on
// this rank, 1 otherwise; every failure is printed with rank and case.
#include <cstdio>
#include <string>
#include <vector>

#include "zen/analysis/auto_scheme.h"
#include "zen/comm/collectives.h"
#include "zen/comm/mpi_communicator.h"
#include "zen/core/error.h"
#include "zen/core/reduce.h"
#include "zen/testing/reference.h"
#include "zen/workload/synthetic.h"

namespace {

int failures = 0;

void Check(bool ok, int rank, const std::string& what) {
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "rank %d: FAILED %s\n", rank, what.c_str());
  }
}

}  // namespace

int main() {
  if (!zen::MpiAvailable()) {
    std::fprintf(stderr, "built without MPI\n");
    return 77;
  }
  zen::MpiOptions opt;
  opt.timeout = std::chrono::seconds(60);
  std::unique_ptr<zen::Communicator> comm = zen::ConnectMpi(opt);
  const int rank = comm->rank(), world = comm->size();
  int cases = 0;

  // ---- the scheme grid ----
  const std::vector<zen::SyntheticSpec> shapes = {
      {"zipf", 1000, 4, 0.05, 1.1, 1},
      {"zipf", 50000, 16, 0.01, 1.1, 2},
      {"zipf", 20000, 1, 0.3, 0.0, 3},
      {"zipf", 300, 8, 0.0, 0.0, 4},  // empty inputs
  };
  for (const auto& info : zen::AllSchemes().schemes()) {
    for (const auto& spec : shapes) {
      std::vector<zen::SparseTensor> inputs;
      for (int r = 0; r < world; ++r) inputs.push_back(zen::GenerateSyntheticRank(spec, r));
      const zen::DenseReference ref(inputs);
      const std::string name = info.id + " " + zen::ToString(spec);
      try {
        auto scheme = zen::AllSchemes().Create(info.id);
        zen::SparseTensor local = inputs[static_cast<size_t>(rank)];
        local.set_name("grid");
        const zen::SparseTensor sum = scheme->Sync(*comm, local);
        const zen::Agreement a = ref.Compare(sum);
        Check(a.rows_mismatch == 0 && a.max_rel_error <= 1e-5, rank,
              name + ": rows_mismatch " + std::to_string(a.rows_mismatch) + " relerr " +
                  std::to_string(a.max_rel_error));
      } catch (const std::exception& e) {
        Check(false, rank, name + ": " + e.what());
      }
      ++cases;
    }
  }

  // ---- point to point ----
  const int next = (rank + 1) % world, prev = (rank + world - 1) % world;
  {
    std::vector<int64_t> out = {rank, 7}, in(2);
    const zen::Tag tag = comm->NextTag();
    auto r = comm->Recv(prev, tag, zen::AsWritableBytes(in));
    auto s = comm->Send(next, tag, zen::AsBytes(out));
    s->Wait();
    r->Wait();
    Check(in[0] == prev && in[1] == 7, rank, "ring exchange");
  }
  {
    // RecvUpTo learns the size; `out` ends exactly that long.
    std::vector<std::byte> payload(static_cast<size_t>(1000 + rank), std::byte{0x5a});
    zen::ByteBuffer got;
    const zen::Tag tag = comm->NextTag();
    auto r = comm->RecvUpTo(prev, tag, got, 1 << 20);
    auto s = comm->Send(next, tag, payload);
    r->Wait();
    s->Wait();
    Check(got.size() == static_cast<size_t>(1000 + prev), rank, "RecvUpTo size");
  }
  {
    // A message longer than RecvUpTo's bound is a FormatError naming both sizes.
    std::vector<std::byte> payload(64);
    zen::ByteBuffer got;
    const zen::Tag tag = comm->NextTag();
    auto r = comm->RecvUpTo(prev, tag, got, 10);
    auto s = comm->Send(next, tag, payload);
    std::string error;
    try {
      r->Wait();
    } catch (const zen::FormatError& e) {
      error = e.what();
    }
    s->Wait();
    Check(error.find("64 bytes") != std::string::npos && error.find("10 bytes") != std::string::npos,
          rank, "RecvUpTo overflow error: '" + error + "'");
    Check(got.size() <= 10, rank, "RecvUpTo did not grow beyond the bound");
  }
  {
    // A shorter message than Recv expects is a FormatError naming both sizes.
    std::vector<std::byte> payload(5), in(8);
    const zen::Tag tag = comm->NextTag();
    auto r = comm->Recv(prev, tag, in);
    auto s = comm->Send(next, tag, payload);
    std::string error;
    try {
      r->Wait();
    } catch (const zen::FormatError& e) {
      error = e.what();
    }
    s->Wait();
    Check(error.find("5 bytes") != std::string::npos && error.find("8 bytes") != std::string::npos,
          rank, "Recv size error: '" + error + "'");
  }
  {
    // Tags beyond MPI's range map into it (2^40 + k).
    std::vector<int32_t> out = {rank}, in(1);
    const zen::Tag tag = (zen::Tag{1} << 40) + 3;
    auto r = comm->Recv(prev, tag, zen::AsWritableBytes(in));
    auto s = comm->Send(next, tag, zen::AsBytes(out));
    s->Wait();
    r->Wait();
    Check(in[0] == prev, rank, "large tag");
  }
  Check(comm->counters().total_sent() > 0 && comm->counters().total_recv() > 0, rank, "counters");
  zen::Barrier(*comm);

  // ---- timeout: a receive nobody answers ends within the timeout ----
  {
    zen::MpiOptions short_opt;
    short_opt.timeout = std::chrono::milliseconds(300);
    auto c2 = zen::ConnectMpi(short_opt);
    if (rank == 0) {
      std::vector<std::byte> in(4);
      const auto start = std::chrono::steady_clock::now();
      std::string error;
      try {
        c2->Recv(1 % world, 12345, in)->Wait();
      } catch (const zen::TransportError& e) {
        error = e.what();
      }
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - start)
                          .count();
      Check(error.find("timeout 300 ms") != std::string::npos, rank, "timeout error: '" + error + "'");
      Check(ms >= 300 && ms < 300 + 1000, rank, "timeout after " + std::to_string(ms) + " ms");
      try {
        c2->Send(1 % world, 1, in);
        Check(false, rank, "a timed-out communicator accepted a send");
      } catch (const zen::TransportError&) {
      }
    }
  }
  zen::Barrier(*comm);
  std::printf("rank %d: %d scheme cases over MPI, %d failure(s)\n", rank, cases, failures);
  return failures == 0 ? 0 : 1;
}
