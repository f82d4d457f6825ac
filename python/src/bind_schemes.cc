// zen.Scheme: the registry's schemes over numpy arrays. sync() takes COO
// input in any order (duplicates are summed) and returns the coalesced global
// sum; sync_dense() sums a float32 [rows x width] buffer in place, skipping
// zero rows. Both release the GIL while data moves. A rank whose input is bad
// still takes part in the metadata exchange with its error flag set, so every
// rank raises instead of the others waiting for it until the timeout.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "zen/core/error.h"
#include "zen/schemes/registry.h"
#if __has_include("zen/analysis/auto_scheme.h")
#include "zen/analysis/auto_scheme.h"
#define ZEN_PY_HAVE_AUTO 1
#endif

namespace py = pybind11;

namespace zen::python {
namespace {

// The one place that says which schemes Python sees: with `auto` (the cost
// model's choice) once the analysis layer provides it.
SchemeRegistry Registry() {
#ifdef ZEN_PY_HAVE_AUTO
  return AllSchemes();
#else
  return BuiltinSchemes();
#endif
}

std::string DefaultScheme() {
  const SchemeRegistry registry = Registry();
  for (const char* id : {"auto", "zen", "agsparse"}) {
    if (registry.Find(id)) return id;
  }
  return registry.ids().front();
}

std::unique_ptr<Scheme> CreateScheme(const std::string& id, std::optional<uint64_t> seed,
                                     int threads, int64_t block_values, bool check_agreement) {
  SchemeOptions options;
  if (seed) options.seed = *seed;
  options.threads = threads;
  options.block_values = block_values;
  std::unique_ptr<Scheme> scheme = Registry().Create(id, options);
  scheme->set_check_agreement(check_agreement);
  return scheme;
}

// Raises InvalidArgument(message) here and, through the metadata exchange,
// on every other rank of the collective call they are making.
[[noreturn]] void Reject(Scheme& scheme, Communicator& comm, int64_t rows, int64_t width,
                         const std::string& name, const std::string& message) {
  if (scheme.check_agreement()) {
    try {
      CheckRanksAgree(comm, scheme.name(), rows, width, name, message);
    } catch (const InvalidArgument&) {  // ours, rethrown below with the plain message
    }
  }
  throw InvalidArgument(Where{comm.rank(), name}, message);
}

template <typename T>
py::array_t<T> ToArray(std::vector<T> data, std::vector<py::ssize_t> shape) {
  auto* owned = new std::vector<T>(std::move(data));
  py::capsule free(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>(std::move(shape), owned->data(), free);
}

using IdArray = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;
using ValueArray = py::array_t<float, py::array::c_style>;

py::tuple SyncCoo(Scheme& scheme, Communicator& comm, int64_t rows, int64_t width,
                  const IdArray& ids, const ValueArray& values, const std::string& name) {
  std::vector<int64_t> id_vec(ids.data(), ids.data() + ids.size());
  std::vector<float> value_vec(values.data(), values.data() + values.size());
  SparseTensor sum;
  {
    py::gil_scoped_release release;
    SparseTensor local;
    std::string error;
    try {
      local = SparseTensor::FromCoo(rows, width, std::move(id_vec), std::move(value_vec),
                                    Duplicates::kSum, name);
    } catch (const InvalidArgument& e) {
      error = e.what();
    }
    if (!error.empty()) Reject(scheme, comm, rows, width, name, error);
    sum = scheme.Sync(comm, local);
  }
  const auto nnz = static_cast<py::ssize_t>(sum.nnz());
  // TakeIds moves only the ids out, so the values are still there to take.
  std::vector<int64_t> out_ids = std::move(sum).TakeIds();
  std::vector<float> out_values = std::move(sum).TakeValues();
  return py::make_tuple(ToArray(std::move(out_ids), {nnz}),
                        ToArray(std::move(out_values), {nnz, static_cast<py::ssize_t>(width)}));
}

// What is wrong with buffer as the in-place target of a [rows x width] sync,
// or empty.
std::string CheckDenseBuffer(const py::array& buffer, int64_t rows, int64_t width) {
  if (!buffer.dtype().is(py::dtype::of<float>())) {
    return "dense buffer has dtype " + py::str(buffer.dtype()).cast<std::string>() +
           ", zen syncs float32 only";
  }
  if (!buffer.writeable()) return "dense buffer is read-only";
  if (!(buffer.flags() & py::array::c_style)) return "dense buffer is not C-contiguous";
  if (rows >= 1 && width >= 1 && buffer.size() != rows * width) {
    return detail::Concat("dense buffer has ", buffer.size(), " floats, expected rows ", rows,
                          " x width ", width);
  }
  return {};
}

void SyncDense(Scheme& scheme, Communicator& comm, py::array buffer, int64_t rows, int64_t width,
               const std::string& name) {
  const std::string error = CheckDenseBuffer(buffer, rows, width);
  py::gil_scoped_release release;
  if (!error.empty()) Reject(scheme, comm, rows, width, name, error);
  std::span<float> data(static_cast<float*>(buffer.mutable_data()),
                        static_cast<size_t>(buffer.size()));
  scheme.SyncDense(comm, data, rows, width, name);
}

// The scheme `auto` last chose for a tensor, or None (another scheme, or no
// call for that tensor yet).
py::object Decision(const Scheme& scheme, const std::string& tensor) {
#ifdef ZEN_PY_HAVE_AUTO
  if (const auto* a = dynamic_cast<const AutoScheme*>(&scheme)) {
    if (const AutoDecision* d = a->decision(tensor)) return py::str(d->chosen);
  }
#else
  (void)scheme;
  (void)tensor;
#endif
  return py::none();
}

void RejectCall(Scheme& scheme, Communicator& comm, int64_t rows, int64_t width,
                const std::string& name, const std::string& message) {
  py::gil_scoped_release release;
  Reject(scheme, comm, rows, width, name, message);
}

}  // namespace

void BindSchemes(py::module_& m) {
  py::class_<Scheme>(m, "Scheme", "A synchronization scheme of the registry (zen.create_scheme).")
      .def_property_readonly("name", [](const Scheme& s) { return std::string(s.name()); })
      .def_property_readonly("description",
                             [](const Scheme& s) { return std::string(s.description()); })
      .def_property_readonly("check_agreement", &Scheme::check_agreement)
      .def("sync", &SyncCoo, py::arg("comm"), py::arg("rows"), py::arg("width"), py::arg("ids"),
           py::arg("values"), py::arg("name") = "",
           "Global sum of a COO tensor (ids: int64 [nnz], any order, duplicates summed; values: "
           "float32 [nnz, width]). Returns (ids, values), sorted and unique, identical on every "
           "rank.")
      .def("sync_dense", &SyncDense, py::arg("comm"), py::arg("buffer").noconvert(),
           py::arg("rows"), py::arg("width"), py::arg("name") = "",
           "Sums a C-contiguous float32 [rows x width] buffer over all ranks in place; zero rows "
           "are not sent.")
      .def("reject", &RejectCall, py::arg("comm"), py::arg("rows"), py::arg("width"),
           py::arg("name"), py::arg("message"),
           "Raises ValueError(message) on this rank and on every rank in the matching sync call.")
      .def("decision", &Decision, py::arg("tensor"),
           "For 'auto': the scheme it chose on the latest call for this tensor name; else None.")
      .def("__repr__",
           [](const Scheme& s) { return "<zen.Scheme '" + std::string(s.name()) + "'>"; });

  m.def(
      "schemes",
      [] {
        std::vector<std::pair<std::string, std::string>> out;
        const SchemeRegistry registry = Registry();
        for (const SchemeInfo& s : registry.schemes()) out.emplace_back(s.id, s.description);
        return out;
      },
      "The registered schemes as (id, description).");
  m.def("default_scheme", &DefaultScheme,
        "'auto' when the cost-model selector is built in, else 'zen', else 'agsparse'.");
  m.def("create_scheme", &CreateScheme, py::arg("id"), py::kw_only(),
        py::arg("seed") = std::nullopt, py::arg("threads") = 0, py::arg("block_values") = 256,
        py::arg("check_agreement") = true,
        "A new scheme from the registry; ValueError for an unknown id.");
}

}  // namespace zen::python
