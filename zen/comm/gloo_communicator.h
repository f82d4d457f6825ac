// zen/comm/gloo_communicator.h — the real transport: Gloo over TCP
// (Debian's libgloo-dev), with rendezvous through a file directory, a Redis
// server, or any gloo::rendezvous::Store the caller brings (torch's store via
// an adapter, an in-memory HashStore in tests).
//
// Wire format: each Send is a Gloo message of 8 bytes (the payload length)
// followed, when the payload is not empty, by the payload itself. The length
// goes to a slot derived from the tag only and the payload to a slot derived
// from (tag, length), so a receive of the wrong size never meets a payload
// it cannot hold: the receiver reads the length, reports a FormatError that
// names both sizes, and discards the payload. The length messages are
// framing and are not counted in ByteCounters.
//
// Threads: Send and Recv only queue their post; Gloo's event-loop thread
// (one per communicator, Gloo's own) makes it, so the caller never holds a
// Gloo pair's lock (which made that thread spin; gloo_communicator.cc). A
// post Gloo refuses is raised by the request's Wait.
//
// Timeouts: a Wait that times out raises TransportError naming rank, peer,
// tag and the time waited. Gloo then closes every connection of the
// communicator, so after a timeout the communicator is unusable (every later
// call raises TransportError); build a new one.
//
// Trust: the TCP transport is unauthenticated and unencrypted. It binds only
// to `hostname` (127.0.0.1 unless told otherwise); anyone who can reach that
// address and the store can join or disturb a job.
//
// Usage:
//   zen::GlooOptions opt;
//   opt.rendezvous = "file:/shared/job42";       // or "redis://10.0.0.1:6379"
//   opt.hostname = "10.0.0.7";                   // interface to bind
//   std::unique_ptr<zen::Communicator> comm = zen::ConnectGloo(rank, size, opt);
//   // With a store of one's own (e.g. an adapter over torch's store):
//   auto comm2 = zen::ConnectGloo(rank, size, store, opt);
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <string>

#include "zen/comm/communicator.h"
#include "zen/comm/rendezvous.h"  // OpenStore, RendezvousFromEnv

namespace zen {

struct GlooOptions {
  // "file:DIR", "redis://HOST:PORT" or "tcp://HOST:PORT" (rank 0 hosts the
  // store), each with an optional "?job=ID" (see rendezvous.h). env:// and
  // mpi:// are resolved at the edge with RendezvousFromEnv. Ignored by the
  // ConnectGloo overload taking a store.
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
};

// Opens options.rendezvous and connects. The whole call ends within
// options.timeout (plus a few ms): a peer that dies or stops at any point, or
// a stranger connecting to a listening port first, ends it with a
// TransportError naming the rank waited for; a peer with another world size
// with a MismatchError naming both sizes.
std::unique_ptr<Communicator> ConnectGloo(int rank, int size, const GlooOptions& options);

// Connects through an existing store (options.rendezvous is ignored). The
// store is used only during this call; every rank of the job must call this
// with the same size and prefix. Returns once every rank is connected (a
// barrier over the new mesh; its messages are not left in the counters).
// TransportError on a rendezvous or connection failure, naming the keys or
// ranks waited for and for how long.
std::unique_ptr<Communicator> ConnectGloo(int rank, int size,
                                          std::shared_ptr<gloo::rendezvous::Store> store,
                                          const GlooOptions& options);

}  // namespace zen
