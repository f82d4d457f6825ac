// zen/comm/connect_options.h — what every transport of the transport table
// (transport.h) is connected with: the rendezvous, the interface, the key
// prefix and job id, the store's secret, the timeout and the waiting
// notices. A transport reads the fields it needs (MPI: the timeout only).
//
// Usage:
//   zen::ConnectOptions opt;
//   opt.rendezvous = "tcp://10.0.0.1:29501";
//   opt.secret = secret_from_the_launcher;
//   opt.progress.notice = [](const std::string& line) { std::cerr << line << "\n"; };
//   auto comm = zen::BuiltinTransports().Connect("gloo", rank, size, opt);
#pragma once

#include <chrono>
#include <string>

#include "zen/comm/rendezvous.h"  // WaitProgress

namespace zen {

struct ConnectOptions {
  // "file:DIR", "redis://HOST:PORT" or "tcp://HOST:PORT" (rank 0 hosts the
  // store), each with an optional "?job=ID" (see rendezvous.h). env:// and
  // mpi:// are resolved at the edge with RendezvousFromEnv. Ignored by the
  // ConnectGloo overload taking a store and by transports whose launcher
  // connects the ranks (MPI).
  std::string rendezvous;
  // Interface address to bind and advertise; never all interfaces by default.
  std::string hostname = "127.0.0.1";
  // Store key prefix, so that several communicators can share a store.
  std::string prefix = "zen";
  // Job id ([A-Za-z0-9._-], at most 128): keys are "<prefix>/<job>/...".
  // Concurrent jobs on one store need distinct ids (or prefixes); reruns of
  // one job need nothing: each run claims a fresh generation of keys (see
  // rendezvous.h), so leftovers of an earlier run are never read. Empty:
  // the URL's "?job=" if any.
  std::string job;
  // The job's secret for zen's TCP store (tcp:// only; at most 256 bytes):
  // every rank of the job must have the same, and a connection to the store
  // without it is refused. Under a launcher, LaunchInfo::secret (from
  // ZEN_STORE_SECRET, else derived from the launcher's variables). Empty:
  // none, and anyone who can reach the port can join.
  std::string secret;
  // Per-request timeout, and the bound on the whole connect (rendezvous,
  // TCP connections and the closing barrier together). At most kMaxTimeout.
  std::chrono::milliseconds timeout{30000};
  // Lines saying whom a rank waits for at rendezvous, every 5 s (see
  // WaitProgress in rendezvous.h). Silent unless the caller sets a notice:
  // the CLI's main and the Python edge print them to stderr.
  WaitProgress progress;
};

}  // namespace zen
