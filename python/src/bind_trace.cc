// zen.write_trace: writes a `zen-trace/1` file (docs/trace-format.md) from
// numpy arrays, so that zen.torch can record a job's real gradients for
// `zen analyze` / `zen simulate`.
//
//   zen.write_trace("trace.safetensors", world_size=2,
//                   tensors=[("step0.emb", rows, width, [(ids0, values0), (ids1, values1)])],
//                   metadata={"generator": "zen.torch record"})
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstdint>
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

// The dtypes sync accepts (bind_schemes.cc): ids of an integer dtype (a
// float array is refused, not truncated: 1.7 is no row id), uint64 ids that
// fit int64, values float32.
void CheckArrays(const py::handle& ids_obj, const py::handle& values_obj, const Where& where) {
  if (!py::isinstance<py::array>(ids_obj)) {
    throw InvalidArgument(where, "ids must be a numpy integer array, got ", TypeName(ids_obj));
  }
  const auto ids = py::reinterpret_borrow<py::array>(ids_obj);
  const char kind = ids.dtype().kind();
  if (kind != 'i' && kind != 'u') {
    throw InvalidArgument(where, "ids have dtype ", py::str(ids.dtype()).cast<std::string>(),
                          "; ids must be integers (int64)");
  }
  if (kind == 'u' && ids.itemsize() == 8) {
    const auto u = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>::ensure(ids);
    for (py::ssize_t i = 0; i < u.size(); ++i) {
      if (u.data()[i] > static_cast<uint64_t>(INT64_MAX)) {
        throw InvalidArgument(where, "id ", u.data()[i], " at position ", i,
                              " does not fit in int64");
      }
    }
  }
  if (!py::isinstance<py::array>(values_obj)) {
    throw InvalidArgument(where, "values must be a numpy float32 array, got ",
                          TypeName(values_obj));
  }
  const auto values = py::reinterpret_borrow<py::array>(values_obj);
  if (!values.dtype().is(py::dtype::of<float>())) {
    throw InvalidArgument(where, "values have dtype ", py::str(values.dtype()).cast<std::string>(),
                          ", zen records float32 only");
  }
}

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
    int rank = 0;
    for (const py::handle& r : t[3].cast<py::list>()) {
      const auto pair = r.cast<py::tuple>();
      CheckArrays(pair[0], pair[1], Where{rank++, name});
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
        "names 'step<k>.<param>' of [A-Za-z0-9_.:-]; ids of an integer dtype, values float32. "
        "ValueError for an invalid trace or a path that cannot be created; zen.Error when "
        "writing fails (a full disk): the file at path is then unchanged.");
}

}  // namespace zen::python
