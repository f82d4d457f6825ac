// zen.Communicator and the two ways to connect one: through a Python store
// object (torch.distributed's store; the usual way) or a rendezvous URL
// ("file:DIR", "redis://HOST:PORT", "tcp://HOST:PORT", "env://"). The GIL is
// released while connecting.
#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "bindings.h"
#include "py_store.h"
#include "zen/comm/gloo_communicator.h"
#include "zen/core/error.h"

namespace py = pybind11;

namespace zen::python {
namespace {

GlooOptions Options(int rank, const std::string& prefix, const std::string& hostname,
                    double timeout_s) {
  GlooOptions options;
  options.prefix = prefix;
  options.hostname = hostname;
  // NaN, <= 0 and > 30 days (1e30 s) are InvalidArguments naming the value.
  options.timeout = TimeoutFromSeconds(timeout_s, rank);
  return options;
}

std::unique_ptr<Communicator> ConnectStore(py::object store, int rank, int size,
                                           const std::string& prefix, const std::string& hostname,
                                           double timeout_s) {
  const GlooOptions options = Options(rank, prefix, hostname, timeout_s);
  // Every store call ends with the connect (torch's may otherwise block).
  auto adapter = std::make_shared<PyStore>(std::move(store), rank,
                                           std::chrono::steady_clock::now() + options.timeout);
  py::gil_scoped_release release;  // the store callbacks take it back
  return ConnectGloo(rank, size, std::move(adapter), options);
}

// env:// and mpi:// are resolved here, at the edge, from os.environ; rank
// and size then come from the launcher (when also given they must agree).
std::unique_ptr<Communicator> ConnectUrl(const std::string& url, int rank, int size,
                                         const std::string& prefix, const std::string& hostname,
                                         double timeout_s, const std::string& job) {
  const RendezvousUrl parsed = ParseRendezvousUrl(url);
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
                                         "store: set ZEN_RENDEZVOUS=file:DIR or redis://HOST:PORT");
    }
  } else if (rank < 0 || size < 0) {
    throw InvalidArgument(Where{rank}, "connect_url('", url, "') needs rank and size");
  }
  GlooOptions options = Options(rank, prefix, hostname, timeout_s);
  options.rendezvous = target;
  options.job = job.empty() ? launch_job : job;
  options.secret = secret;
  py::gil_scoped_release release;
  return ConnectGloo(rank, size, options);
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
        "Connects all ranks through a store with set/get/wait (e.g. torch.distributed's). "
        "Every rank calls it with the same size and prefix; keys are '<prefix>/rank_<r>'.");
  m.def("connect_url", &ConnectUrl, py::arg("url"), py::arg("rank") = -1, py::arg("size") = -1,
        py::kw_only(), py::arg("prefix") = "zen", py::arg("hostname") = "127.0.0.1",
        py::arg("timeout") = 30.0, py::arg("job") = "",
        "Connects all ranks through 'file:DIR', 'redis://HOST:PORT' or 'tcp://HOST:PORT' (rank 0 "
        "hosts zen's store), each with an optional '?job=ID', or through 'env://' (torchrun's "
        "or mpirun's variables from os.environ give rank, size and store; under torchrun rank 0 "
        "hosts zen's store on MASTER_PORT+1). A rerun with the same directory or job id "
        "never meets the keys of the last run.");
}

}  // namespace zen::python
