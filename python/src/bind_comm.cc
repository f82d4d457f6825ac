// zen.Communicator and the two ways to connect one: through a Python store
// object (torch.distributed's store; the usual way) or a rendezvous URL
// ("file:DIR", "redis://HOST:PORT", "tcp://HOST:PORT", "env://", "mpi://")
// with a transport picked by name from the transport table
// (zen/comm/transport.h: "gloo", and "mpi" in builds with MPI). The GIL is
// released while connecting. A rank waiting for its peers says so on stderr
// every 5 s, naming who is missing (progress=False silences it).
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "bindings.h"
#include "py_store.h"
#include "zen/comm/gloo_communicator.h"
#include "zen/comm/rendezvous_url.h"
#include "zen/comm/transport.h"
#include "zen/core/error.h"

namespace py = pybind11;

namespace zen::python {
namespace {

ConnectOptions Options(int rank, const std::string& prefix, const std::string& hostname,
                       double timeout_s, bool progress) {
  ConnectOptions options;
  options.prefix = prefix;
  options.hostname = hostname;
  // NaN, <= 0 and > 30 days (1e30 s) are InvalidArguments naming the value.
  options.timeout = TimeoutFromSeconds(timeout_s, rank);
  if (progress) {
    // Called without the GIL, from the connecting thread: straight to fd 2.
    options.progress.notice = [](const std::string& line) {
      std::fprintf(stderr, "%s\n", line.c_str());
      std::fflush(stderr);
    };
  }
  return options;
}

std::unique_ptr<Communicator> ConnectStore(py::object store, int rank, int size,
                                           const std::string& prefix, const std::string& hostname,
                                           double timeout_s, bool progress) {
  const ConnectOptions options = Options(rank, prefix, hostname, timeout_s, progress);
  // Every store call ends with the connect (torch's may otherwise block).
  auto adapter = std::make_shared<PyStore>(std::move(store), rank,
                                           std::chrono::steady_clock::now() + options.timeout);
  py::gil_scoped_release release;  // the store callbacks take it back
  return ConnectGloo(rank, size, std::move(adapter), options);
}

// env:// and mpi:// are resolved here, at the edge, from os.environ; rank
// and size then come from the launcher (when also given they must agree).
// A transport whose launcher connects the ranks (mpi) takes "mpi://" or
// "env://" and rank and size from its launcher.
std::unique_ptr<Communicator> ConnectUrl(const std::string& url, int rank, int size,
                                         const std::string& prefix, const std::string& hostname,
                                         double timeout_s, const std::string& job,
                                         const std::string& transport, bool progress) {
  const RendezvousUrl parsed = ParseRendezvousUrl(url);
  const TransportRegistry transports = BuiltinTransports();
  const TransportInfo& chosen = transports.Get(transport);  // unknown: lists the known ones
  if (chosen.ranks_from_launcher) {
    if (parsed.kind != RendezvousUrl::Kind::kMpi && parsed.kind != RendezvousUrl::Kind::kEnv) {
      throw InvalidArgument(Where{rank}, "connect_url('", url, "', transport='", transport,
                            "'): this transport's ranks come from its launcher; pass 'mpi://' "
                            "or 'env://'");
    }
    const ConnectOptions options = Options(rank, prefix, hostname, timeout_s, progress);
    py::gil_scoped_release release;
    return chosen.factory(rank, size, options);
  }
  std::string target = url;
  std::string launch_job;
  std::map<std::string, std::string> env;
  for (auto item : py::module_::import("os").attr("environ").attr("items")()) {
    auto kv = item.cast<py::tuple>();
    env[kv[0].cast<std::string>()] = kv[1].cast<std::string>();
  }
  // zen's TCP store takes the job's secret from ZEN_STORE_SECRET (or, under
  // a launcher, from its variables: RendezvousFromEnv).
  std::string secret = env.count("ZEN_STORE_SECRET") ? env["ZEN_STORE_SECRET"] : "";
  if (parsed.kind == RendezvousUrl::Kind::kEnv || parsed.kind == RendezvousUrl::Kind::kMpi) {
    const auto launch = RendezvousFromEnv(env);
    if (!launch) {
      throw InvalidArgument(Where{rank}, "connect_url('", url,
                            "'): no launcher variables (torchrun: RANK, WORLD_SIZE, MASTER_ADDR, "
                            "MASTER_PORT; mpirun: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE)");
    }
    if ((rank >= 0 && rank != launch->rank) || (size >= 0 && size != launch->size)) {
      throw MismatchError(Where{rank}, "connect_url: rank ", rank, " / size ", size,
                          " differ from the launcher's rank ", launch->rank, " / size ",
                          launch->size);
    }
    rank = launch->rank;
    size = launch->size;
    target = launch->rendezvous;
    launch_job = launch->job;
    secret = launch->secret;
    if (ParseRendezvousUrl(target).kind == RendezvousUrl::Kind::kMpi) {
      throw InvalidArgument(Where{rank}, "connect_url: under mpirun the Gloo transport needs a "
                                         "store: set ZEN_RENDEZVOUS=file:DIR or redis://HOST:PORT, "
                                         "or pass transport='mpi'");
    }
  } else if (rank < 0 || size < 0) {
    throw InvalidArgument(Where{rank}, "connect_url('", url, "') needs rank and size");
  }
  ConnectOptions options = Options(rank, prefix, hostname, timeout_s, progress);
  options.rendezvous = target;
  options.job = job.empty() ? launch_job : job;
  options.secret = secret;
  py::gil_scoped_release release;
  return chosen.factory(rank, size, options);
}

}  // namespace

void BindComm(py::module_& m) {
  py::class_<Communicator>(m, "Communicator",
                           "A connection of `size` ranks (Gloo over TCP). Not thread-safe: use "
                           "one communicator from one thread at a time.")
      .def_property_readonly("rank", &Communicator::rank)
      .def_property_readonly("size", &Communicator::size)
      .def_property_readonly(
          "timeout", [](const Communicator& c) { return c.timeout().count() / 1000.0; },
          "Per-request timeout in seconds.")
      .def_property_readonly(
          "bytes_sent", [](const Communicator& c) { return c.counters().total_sent(); },
          "Payload bytes this rank has sent (framing excluded).")
      .def_property_readonly(
          "bytes_received", [](const Communicator& c) { return c.counters().total_recv(); },
          "Payload bytes this rank has received (framing excluded).")
      .def_property_readonly("messages_sent",
                             [](const Communicator& c) { return c.counters().messages_sent(); })
      .def("reset_counters", &Communicator::ResetCounters)
      .def("__repr__", [](const Communicator& c) {
        return "<zen.Communicator rank " + std::to_string(c.rank()) + " of " +
               std::to_string(c.size()) + ">";
      });

  m.def("connect", &ConnectStore, py::arg("store"), py::arg("rank"), py::arg("size"), py::kw_only(),
        py::arg("prefix") = "zen", py::arg("hostname") = "127.0.0.1", py::arg("timeout") = 30.0,
        py::arg("progress") = true,
        "Connects all ranks through a store with set/get/wait (e.g. torch.distributed's). "
        "Every rank calls it with the same size and prefix; keys are '<prefix>/rank_<r>'.");
  m.def("connect_url", &ConnectUrl, py::arg("url"), py::arg("rank") = -1, py::arg("size") = -1,
        py::kw_only(), py::arg("prefix") = "zen", py::arg("hostname") = "127.0.0.1",
        py::arg("timeout") = 30.0, py::arg("job") = "", py::arg("transport") = "gloo",
        py::arg("progress") = true,
        "Connects all ranks through 'file:DIR', 'redis://HOST:PORT' or 'tcp://HOST:PORT' (rank 0 "
        "hosts zen's store), each with an optional '?job=ID', or through 'env://' (torchrun's "
        "or mpirun's variables from os.environ give rank, size and store; under torchrun rank 0 "
        "hosts zen's store on MASTER_PORT+1). A rerun with the same directory or job id "
        "never meets the keys of the last run. transport='mpi' (builds with MPI) connects "
        "MPI_COMM_WORLD instead; its URL is 'mpi://' or 'env://'. While waiting for its peers, a "
        "rank says every 5 s on stderr who is missing (progress=False: silent).");
  m.def(
      "transports",
      [] {
        py::list out;
        for (const TransportInfo& t : BuiltinTransports().transports()) {
          py::dict d;
          d["id"] = t.id;
          d["description"] = t.description;
          py::list schemes;
          for (const std::string& u : t.url_schemes) schemes.append(u);
          d["url_schemes"] = schemes;
          d["ranks_from_launcher"] = t.ranks_from_launcher;
          out.append(d);
        }
        return out;
      },
      "The transport table of this build: one dict per transport (id, description, url_schemes, "
      "ranks_from_launcher); connect_url(..., transport=id) picks one.");
}

}  // namespace zen::python
