#include "zen/comm/transport.h"

#include "zen/comm/gloo_communicator.h"
#include "zen/comm/mpi_communicator.h"
#include "zen/core/error.h"

namespace zen {

void TransportRegistry::Add(TransportInfo info) {
  if (Find(info.id)) throw InvalidArgument("transport '" + info.id + "' is registered twice");
  if (!info.factory) throw InvalidArgument("transport '" + info.id + "' has no factory");
  transports_.push_back(std::move(info));
}

const TransportInfo* TransportRegistry::Find(std::string_view id) const {
  for (const auto& t : transports_) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

const TransportInfo& TransportRegistry::Get(std::string_view id) const {
  if (const TransportInfo* t = Find(id)) return *t;
  std::string known;
  for (const auto& t : transports_) known += (known.empty() ? "" : ", ") + t.id;
  throw InvalidArgument("unknown transport '" + std::string(id) + "' (known: " + known + ")");
}

std::vector<std::string> TransportRegistry::ids() const {
  std::vector<std::string> out;
  for (const auto& t : transports_) out.push_back(t.id);
  return out;
}

std::unique_ptr<Communicator> TransportRegistry::Connect(std::string_view id, int rank, int size,
                                                         const ConnectOptions& options) const {
  return Get(id).factory(rank, size, options);
}

namespace {

std::unique_ptr<Communicator> ConnectMpiEntry(int rank, int size, const ConnectOptions& options) {
  MpiOptions mpi;
  mpi.timeout = options.timeout;
  std::unique_ptr<Communicator> comm = ConnectMpi(mpi);
  if ((rank >= 0 && rank != comm->rank()) || (size >= 0 && size != comm->size())) {
    throw MismatchError(Where{comm->rank()}, "transport mpi: rank ", rank, " / size ", size,
                        " differ from MPI's rank ", comm->rank(), " / size ", comm->size());
  }
  return comm;
}

}  // namespace

TransportRegistry BuiltinTransports() {
  TransportRegistry reg;
  reg.Add({"gloo", "Gloo over TCP; ranks meet through a file:, redis:// or tcp:// rendezvous",
           [](int rank, int size, const ConnectOptions& options) {
             return ConnectGloo(rank, size, options);
           },
           {"file:", "redis://", "tcp://"}});
  if (MpiAvailable()) {
    reg.Add({"mpi", "MPI (MPI_COMM_WORLD under mpirun / srun); ranks from the launcher",
             ConnectMpiEntry, {}, /*ranks_from_launcher=*/true});
  }
  return reg;
}

}  // namespace zen
