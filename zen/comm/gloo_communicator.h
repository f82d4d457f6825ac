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
#include "zen/comm/connect_options.h"
#include "zen/comm/launch_env.h"  // RendezvousFromEnv, for callers
#include "zen/comm/store.h"       // OpenStore, for callers
#include "zen/comm/timeout.h"

namespace zen {

// The Gloo transport's options are the transport table's (connect_options.h).
using GlooOptions = ConnectOptions;

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
