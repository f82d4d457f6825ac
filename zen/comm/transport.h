// zen/comm/transport.h — the transport table: every way zen can connect its
// ranks, selected by name (the CLI's --transport, Python's
// connect_url(..., transport=)), like the scheme table (schemes/registry.h).
//
// Each entry: id (what users type), a one-line description, a factory
// (rank, size, ConnectOptions -> Communicator) and what it supports: the
// rendezvous URL schemes it takes, whether rank and size come from its own
// launcher (mpirun) rather than from the caller, and whether it is built in.
// BuiltinTransports() holds Gloo over TCP and, in builds with MPI, MPI; the
// in-process transport (ranks as threads) is added by the test library only
// (zen/testing/inproc_communicator.h, AddInProcTransport). Nothing outside
// this table switches on transport names.
//
// Adding a transport: its communicator (one .h/.cc pair in zen/comm), one
// entry in BuiltinTransports() (transport.cc), its docs section, its tests
// (docs/architecture.md, "How to add a transport").
//
// Usage:
//   zen::TransportRegistry transports = zen::BuiltinTransports();
//   zen::ConnectOptions opt;
//   opt.rendezvous = "file:/shared/job42";
//   auto comm = transports.Connect("gloo", rank, size, opt);   // InvalidArgument if unknown
//   auto mpi = transports.Connect("mpi", -1, -1, opt);         // under mpirun
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "zen/comm/communicator.h"
#include "zen/comm/connect_options.h"

namespace zen {

// rank and size are -1 for a transport with ranks_from_launcher when the
// caller does not know them; given, they must agree with the launcher's.
using TransportFactory =
    std::function<std::unique_ptr<Communicator>(int rank, int size, const ConnectOptions&)>;

struct TransportInfo {
  std::string id;
  std::string description;
  TransportFactory factory;
  // The rendezvous URL schemes it takes ("file:", "redis://", "tcp://");
  // empty when its launcher connects the ranks.
  std::vector<std::string> url_schemes;
  // Rank and size come from the transport's own launcher (MPI: mpirun),
  // which also starts the processes.
  bool ranks_from_launcher = false;
  // In BuiltinTransports(); false for one a program adds (in-process).
  bool builtin = true;
};

class TransportRegistry {
 public:
  void Add(TransportInfo info);  // InvalidArgument on a duplicate id or a missing factory
  const std::vector<TransportInfo>& transports() const& { return transports_; }
  // On a temporary registry (`for (auto& t : BuiltinTransports().transports())`)
  // the list is moved out, so the loop never reads a destroyed registry.
  std::vector<TransportInfo> transports() && { return std::move(transports_); }
  const TransportInfo* Find(std::string_view id) const;
  // The entry, or InvalidArgument naming `id` and listing the known ids.
  const TransportInfo& Get(std::string_view id) const;
  std::vector<std::string> ids() const;
  // Get(id).factory(rank, size, options).
  std::unique_ptr<Communicator> Connect(std::string_view id, int rank, int size,
                                        const ConnectOptions& options) const;

 private:
  std::vector<TransportInfo> transports_;
};

// gloo, and mpi in builds with MPI (ZEN_HAVE_MPI).
TransportRegistry BuiltinTransports();

}  // namespace zen
