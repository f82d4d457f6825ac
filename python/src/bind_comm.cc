// zen.Communicator and the two ways to connect one: through a Python store
// object (torch.distributed's store; the usual way) or a rendezvous URL
// ("file:DIR", "redis://HOST:PORT"). The GIL is released while connecting.
#include <chrono>
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
  auto adapter = std::make_shared<PyStore>(std::move(store), rank);
  py::gil_scoped_release release;  // the store callbacks take it back
  return ConnectGloo(rank, size, std::move(adapter), options);
}

std::unique_ptr<Communicator> ConnectUrl(const std::string& url, int rank, int size,
                                         const std::string& prefix, const std::string& hostname,
                                         double timeout_s) {
  GlooOptions options = Options(rank, prefix, hostname, timeout_s);
  options.rendezvous = url;
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
  m.def("connect_url", &ConnectUrl, py::arg("url"), py::arg("rank"), py::arg("size"), py::kw_only(),
        py::arg("prefix") = "zen", py::arg("hostname") = "127.0.0.1", py::arg("timeout") = 30.0,
        "Connects all ranks through 'file:DIR' or 'redis://HOST:PORT'.");
}

}  // namespace zen::python
