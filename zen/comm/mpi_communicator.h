// zen/comm/mpi_communicator.h — the Communicator over MPI (Debian's Open MPI,
// libopenmpi-dev), so zen runs wherever MPI runs (InfiniBand through UCX on
// clusters) under `mpirun -np N`.
//
// Wire: each Send is one MPI message on a private duplicate of
// MPI_COMM_WORLD, so zen never matches an application's messages. A Recv is
// an MPI_Irecv of exactly the expected size (a shorter message is a
// FormatError naming both sizes, a longer one a FormatError naming the
// expected size); a RecvUpTo waits for the message with a matched probe
// (MPI_Improbe), learns its size, and receives it with MPI_Imrecv, so `out`
// never grows beyond the message. Pending probe receives are advanced by
// every wait of the communicator, so a rank waiting for its sends still
// accepts the messages its peers send it.
//
// Tags: zen's 64-bit tags are mapped into MPI's tag range [0, MPI_TAG_UB]
// by masking to the largest 2^k - 1 <= MPI_TAG_UB (at least 2^15 - 1 by the
// standard, 2^31 - 1 in Open MPI). zen takes consecutive tags per
// collective and completes every message of a collective before the next
// collective begins, so two tags in flight between one pair of ranks never
// map to the same MPI tag.
//
// Timeouts: Wait polls MPI_Test until the request completes or the
// communicator's timeout passes; then TransportError names rank, peer, tag
// and the time waited, the request is cancelled (receives) or released, and
// the communicator refuses further calls (build a new one). Errors of MPI
// itself are returned (MPI_ERRORS_RETURN) and become TransportErrors.
//
// MPI initialization is process-wide by nature: ConnectMpi calls
// MPI_Init_thread (MPI_THREAD_SERIALIZED) when the application has not
// initialized MPI, and then registers MPI_Finalize to run at exit. An
// application that initializes MPI itself keeps finalizing it itself.
//
// Usage (under mpirun):
//   if (zen::MpiAvailable()) {
//     zen::MpiOptions opt;
//     opt.timeout = std::chrono::seconds(30);
//     std::unique_ptr<zen::Communicator> comm = zen::ConnectMpi(opt);
//     // comm->rank(), comm->size() are those of MPI_COMM_WORLD
//   }
#pragma once

#include <chrono>
#include <memory>

#include "zen/comm/communicator.h"

namespace zen {

struct MpiOptions {
  // Per-request timeout (at most kMaxTimeout, see rendezvous.h).
  std::chrono::milliseconds timeout{30000};
};

// True when this build has the MPI transport (ZEN_HAVE_MPI).
bool MpiAvailable();

// Connects every rank of MPI_COMM_WORLD (a collective call: every rank calls
// it). InvalidArgument when the build has no MPI or the timeout is invalid;
// TransportError when MPI fails to initialize.
std::unique_ptr<Communicator> ConnectMpi(const MpiOptions& options);

}  // namespace zen
