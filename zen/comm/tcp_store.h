// zen/comm/tcp_store.h — zen's TCP store (tcp://HOST:PORT; env:// under
// torchrun).
//
// Rank 0 hosts it (host_it = true): a thread serving set-if-absent, get and
// has on HOST:PORT (bound to that address only) for as long as the returned
// store lives, which ConnectGloo keeps until the mesh is up. The other ranks
// connect to it, retrying until `timeout` (rank 0 may start later); no reply
// is waited for past `timeout` after the store was opened.
//
// Every connection starts with `secret` (at most 256 bytes; the server
// compares it in constant time and closes a connection that brings another
// one). Empty secrets match each other: without one, anyone who can reach
// the port can read and add keys, i.e. join the job. RendezvousFromEnv
// derives one from the launcher's variables (see LaunchInfo::secret).
//
// Limits: keys of at most 4 KiB, values of at most 16 MiB, 256 MiB and 4096
// connections in all; a client that breaks them is disconnected. Replies are
// buffered only up to 1 MiB per client (plus one value) and 64 MiB in all:
// the server reads no more requests from a client until its replies drain,
// and disconnects a client whose replies make no progress for `timeout`
// (at least 1 s). The protocol is zen's own (not torch's TCPStore
// protocol) and unencrypted.
//
// Usage:
//   // rank 0 hosts, the others connect; every rank passes the job's secret
//   auto store = zen::OpenTcpStore("10.0.0.1", 29501, rank == 0, std::chrono::seconds(30),
//                                  rank, secret);
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace zen {

std::shared_ptr<gloo::rendezvous::Store> OpenTcpStore(const std::string& host, int port,
                                                      bool host_it,
                                                      std::chrono::milliseconds timeout,
                                                      int rank = -1,
                                                      const std::string& secret = "");

// The TCP store's request framing, for its fuzz target (fuzz/store_fuzz.cc)
// and tests: applies the complete requests at the front of `in` to `table`,
// appending their replies to `out`, until `out` holds `out_limit` bytes.
// `hello_done` says whether the connection has sent a matching secret; a
// first request other than a hello with `secret` is malformed. ok = false
// for a malformed request (the server then drops the client); `consumed`
// counts the bytes of the requests served.
class TcpStoreTable;
std::shared_ptr<TcpStoreTable> NewTcpStoreTable();
struct TcpStoreFraming {
  size_t consumed = 0;
  bool ok = true;
};
TcpStoreFraming ServeTcpStoreRequests(TcpStoreTable& table, std::span<const char> in,
                                      std::vector<char>& out, size_t out_limit, bool& hello_done,
                                      std::string_view secret);

}  // namespace zen
