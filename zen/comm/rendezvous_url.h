// zen/comm/rendezvous_url.h — the rendezvous URLs users type, parsed apart
// from the stores behind them.
//
//   file:DIR[?job=ID]          a directory every rank sees (file_store.h)
//   redis://HOST:PORT[?job=ID] a Redis server (redis_store.h; builds with
//                              hiredis only)
//   tcp://HOST:PORT[?job=ID]   zen's own TCP store, hosted by rank 0 on
//                              HOST:PORT (tcp_store.h)
//   env://                     rank, world size and store from the launcher's
//                              variables; resolved by RendezvousFromEnv
//                              (launch_env.h) at the edge (CLI main, Python),
//                              never by the library
//   mpi://                     the same, from mpirun's variables
//
// Usage:
//   zen::RendezvousUrl url = zen::ParseRendezvousUrl("file:/shared/run?job=42");
//   // url.kind == kFile, url.path == "/shared/run", url.job == "42"
#pragma once

#include <string>

namespace zen {

struct RendezvousUrl {
  enum class Kind { kFile, kRedis, kTcp, kEnv, kMpi };
  Kind kind = Kind::kFile;
  std::string path;  // kFile: the directory
  std::string host;  // kRedis, kTcp
  int port = 0;      // kRedis, kTcp
  std::string job;   // from "?job=ID"; empty when absent
  // The URL without its query ("file:DIR", "redis://HOST:PORT", ...).
  std::string base;
};

// Parses the forms listed above. InvalidArgument naming the URL for anything
// else (unknown scheme, missing directory, bad port, unknown query key, a job
// id with characters other than [A-Za-z0-9._-] or longer than 128).
RendezvousUrl ParseRendezvousUrl(const std::string& url);

// Whether `job` is a valid job id: 1 to 128 characters of [A-Za-z0-9._-].
bool ValidJobId(const std::string& job);

}  // namespace zen
