// zen.write_trace: writes a `zen-trace/1` file (docs/trace-format.md) from
// numpy arrays, so that zen.torch can record a job's real gradients for
// `zen analyze` / `zen simulate`.
//
//   zen.write_trace("trace.safetensors", world_size=2,
//                   tensors=[("step0.emb", rows, width, [(ids0, values0), (ids1, values1)])],
//                   metadata={"generator": "zen.torch record"})
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "zen/core/error.h"
#include "zen/workload/trace.h"

namespace py = pybind11;

namespace zen::python {
namespace {

using IdArray = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;
using ValueArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

void Write(const std::string& path, int world_size, const py::list& tensors,
           const std::map<std::string, std::string>& metadata) {
  Trace trace;
  trace.world_size = world_size;
  trace.metadata = metadata;
  for (const py::handle& item : tensors) {
    const auto t = item.cast<py::tuple>();
    if (t.size() != 4) {
      throw InvalidArgument("zen.write_trace: each tensor is (name, rows, width, per_rank)");
    }
    const auto name = t[0].cast<std::string>();
    const auto rows = t[1].cast<int64_t>();
    const auto width = t[2].cast<int64_t>();
    std::vector<SparseTensor> per_rank;
    for (const py::handle& r : t[3].cast<py::list>()) {
      const auto pair = r.cast<py::tuple>();
      const IdArray ids = IdArray::ensure(pair[0]);
      const ValueArray values = ValueArray::ensure(pair[1]);
      if (!ids || !values) throw InvalidArgument(Where{-1, name}, "ids or values not arrays");
      per_rank.push_back(SparseTensor::FromCoo(
          rows, width, std::vector<int64_t>(ids.data(), ids.data() + ids.size()),
          std::vector<float>(values.data(), values.data() + values.size()), Duplicates::kReject,
          name));
    }
    trace.Add(name, std::move(per_rank));
  }
  py::gil_scoped_release release;
  WriteTrace(path, trace);
}

}  // namespace

void BindTrace(py::module_& m) {
  m.def("write_trace", &Write, py::arg("path"), py::arg("world_size"), py::arg("tensors"),
        py::arg("metadata") = std::map<std::string, std::string>{},
        "Writes a zen-trace/1 file. tensors: [(name, rows, width, [(ids, values) per rank])]; "
        "names 'step<k>.<param>' of [A-Za-z0-9_.:-]. ValueError for an invalid trace.");
}

}  // namespace zen::python
