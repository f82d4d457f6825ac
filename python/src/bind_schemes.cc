// zen.Scheme: the registry's schemes over numpy arrays. sync() takes COO
// input in any order (duplicates are summed) and returns the coalesced global
// sum; sync_dense() sums a float32 [rows x width] buffer in place, skipping
// zero rows. Both release the GIL while data moves. A rank whose input is bad
// still takes part in the metadata exchange with its error flag set, so every
// rank raises instead of the others waiting for it until the timeout.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <climits>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "zen/core/checked.h"
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

// The arguments of one sync call as Python gave them, converted here rather
// than by pybind11's signature matching: a conversion that fails must still
// take part in the metadata exchange (Scheme::Reject), or the peers would
// pair this call with this rank's next one and return a wrong sum.
struct CallArgs {
  int64_t rows = 0;
  int64_t width = 0;
  std::string name;
  std::string error;  // the first thing wrong, empty when fine

  void Fail(std::string why) {
    if (error.empty()) error = std::move(why);
  }
};

// An exact Python or numpy integer (not bool, not float) in int64 range.
bool ToInt64(const py::handle& obj, const char* what, int64_t& out, CallArgs& args) {
  if (py::isinstance<py::bool_>(obj) || !py::hasattr(obj, "__index__")) {
    args.Fail(detail::Concat(what, " must be an int, got ", TypeName(obj)));
    return false;
  }
  const py::int_ value = py::reinterpret_steal<py::int_>(PyNumber_Index(obj.ptr()));
  if (!value) {
    PyErr_Clear();
    args.Fail(detail::Concat(what, " must be an int, got ", TypeName(obj)));
    return false;
  }
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
  if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    args.Fail(detail::Concat(what, " ", py::str(static_cast<py::handle>(value)).cast<std::string>(),
                             " does not fit in int64"));
    return false;
  }
  out = static_cast<int64_t>(v);
  return true;
}

CallArgs ReadCommon(const py::handle& rows, const py::handle& width, const py::handle& name) {
  CallArgs args;
  if (py::isinstance<py::str>(name)) {
    args.name = name.cast<std::string>();
  } else {
    args.Fail("name must be a str, got " + TypeName(name));
  }
  ToInt64(rows, "rows", args.rows, args);
  ToInt64(width, "width", args.width, args);
  return args;
}

std::string DtypeName(const py::array& a) { return py::str(a.dtype()).cast<std::string>(); }

// The Python dtype argument (None or a str) as a name; a wrong type fails
// the call.
std::string DTypeArg(const py::object& obj, CallArgs& args) {
  if (obj.is_none()) return {};
  if (!py::isinstance<py::str>(obj)) {
    args.Fail("dtype must be None or a str, got " + TypeName(obj));
    return {};
  }
  return obj.cast<std::string>();
}

py::tuple SyncCoo(Scheme& scheme, Communicator& comm, const py::object& rows_obj,
                  const py::object& width_obj, const py::object& ids_obj,
                  const py::object& values_obj, const py::object& name_obj,
                  const py::object& dtype_obj) {
  CallArgs args = ReadCommon(rows_obj, width_obj, name_obj);
  const std::string named = DTypeArg(dtype_obj, args);
  // The arrays are read in place for the call (SparseTensor::ViewOrCoo); ids of another
  // integer type or arrays that are not C-contiguous are converted first.
  py::object ids_keep, values_keep;
  std::span<const int64_t> id_span;
  DType dtype = DType::kFloat32;
  const std::byte* value_data = nullptr;
  size_t value_count = 0;
  // ids: an integer array (a float array is refused, not truncated).
  if (!py::isinstance<py::array>(ids_obj)) {
    args.Fail("ids must be a numpy int64 array, got " + TypeName(ids_obj));
  } else {
    const auto ids = py::reinterpret_borrow<py::array>(ids_obj);
    const char kind = ids.dtype().kind();
    if (kind != 'i' && kind != 'u') {
      args.Fail("ids have dtype " + DtypeName(ids) + "; ids must be integers (int64)");
    } else if (ids.ndim() != 1) {
      args.Fail(detail::Concat("ids must be 1-D, got ", ids.ndim(), " dimensions"));
    } else if (kind == 'u' && ids.itemsize() == 8) {
      const auto u = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>::ensure(ids);
      for (py::ssize_t i = 0; i < u.size(); ++i) {
        if (u.data()[i] > static_cast<uint64_t>(INT64_MAX)) {
          args.Fail(detail::Concat("id ", u.data()[i], " at position ", i,
                                   " does not fit in int64"));
          break;
        }
      }
      // Every id fits int64 (checked above): the same bits read as int64.
      ids_keep = u;
      id_span = std::span(reinterpret_cast<const int64_t*>(u.data()),
                          static_cast<size_t>(u.size()));
    } else {
      const auto c = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(ids);
      ids_keep = c;
      id_span = std::span(c.data(), static_cast<size_t>(c.size()));
    }
  }
  // values: any of zen's dtypes (ValueDType), each summed as its dtype says.
  if (!py::isinstance<py::array>(values_obj)) {
    args.Fail("values must be a numpy array, got " + TypeName(values_obj));
  } else {
    const auto values = py::reinterpret_borrow<py::array>(values_obj);
    std::string error;
    if (!ValueDType(values, named, /*strict=*/true, dtype, error)) {
      args.Fail(error);
    } else {
      const auto c = py::array::ensure(values, py::array::c_style);
      values_keep = c;
      value_data = static_cast<const std::byte*>(c.data());
      value_count = static_cast<size_t>(c.size());
    }
  }
  SparseTensor sum;
  {
    py::gil_scoped_release release;
    SparseTensor local;
    if (args.error.empty()) {
      try {
        local = WithValueType(dtype, [&]<typename T>() {
          return SparseTensor::ViewOrCoo<T>(
              args.rows, args.width, id_span,
              std::span<const T>(reinterpret_cast<const T*>(value_data), value_count), args.name);
        });
      } catch (const InvalidArgument& e) {
        args.Fail(e.what());
      } catch (const std::bad_alloc&) {
        args.Fail("out of memory building the input tensor");
      }
    }
    if (!args.error.empty()) {
      scheme.Reject(comm, args.rows, args.width, args.name, args.error, dtype);
    }
    sum = scheme.Sync(comm, local);
  }
  const auto nnz = static_cast<py::ssize_t>(sum.nnz());
  // TakeIds moves only the ids out, so the values are still there to take.
  std::vector<int64_t> out_ids = std::move(sum).TakeIds();
  py::object out_values = WithValueType(sum.dtype(), [&]<typename T>() -> py::object {
    return ToValueArray(std::move(sum).TakeValues<T>(),
                        {nnz, static_cast<py::ssize_t>(args.width)});
  });
  return py::make_tuple(ToArray(std::move(out_ids), {nnz}), out_values);
}

// What is wrong with buffer as the in-place target of a [rows x width] sync,
// or empty.
std::string CheckDenseBuffer(const py::handle& obj, int64_t rows, int64_t width,
                             const std::string& named, DType& dtype) {
  if (!py::isinstance<py::array>(obj)) {
    return "dense buffer must be a numpy array, got " + TypeName(obj);
  }
  const auto buffer = py::reinterpret_borrow<py::array>(obj);
  std::string error;
  if (!ValueDType(buffer, named, /*strict=*/true, dtype, error)) return "dense buffer: " + error;
  if (!buffer.writeable()) return "dense buffer is read-only";
  if (!(buffer.flags() & py::array::c_style)) return "dense buffer is not C-contiguous";
  int64_t elements = 0;
  if (rows >= 1 && width >= 1 && TryMul(rows, width, elements) && buffer.size() != elements) {
    return detail::Concat("dense buffer has ", buffer.size(), " floats, expected rows ", rows,
                          " x width ", width);
  }
  return {};
}

void SyncDense(Scheme& scheme, Communicator& comm, const py::object& buffer_obj,
               const py::object& rows_obj, const py::object& width_obj,
               const py::object& name_obj, const py::object& dtype_obj) {
  CallArgs args = ReadCommon(rows_obj, width_obj, name_obj);
  const std::string named = DTypeArg(dtype_obj, args);
  DType dtype = DType::kFloat32;
  if (args.error.empty()) args.Fail(CheckDenseBuffer(buffer_obj, args.rows, args.width, named, dtype));
  DenseValues data;
  if (args.error.empty()) {
    auto buffer = py::reinterpret_borrow<py::array>(buffer_obj);
    data.dtype = dtype;
    data.bytes = std::span(static_cast<std::byte*>(buffer.mutable_data()),
                           static_cast<size_t>(buffer.nbytes()));
  }
  py::gil_scoped_release release;
  if (!args.error.empty()) {
    scheme.Reject(comm, args.rows, args.width, args.name, args.error, data.dtype);
  }
  scheme.SyncDenseValues(comm, data, args.rows, args.width, args.name, {});
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

void RejectCall(Scheme& scheme, Communicator& comm, const py::object& rows_obj,
                const py::object& width_obj, const py::object& name_obj,
                const std::string& message) {
  CallArgs args = ReadCommon(rows_obj, width_obj, name_obj);
  py::gil_scoped_release release;
  scheme.Reject(comm, args.rows, args.width, args.name, message);
}

}  // namespace

py::dtype NumpyDType(DType d) {
  try {
    return py::dtype::from_args(py::str(DTypeName(d)));
  } catch (py::error_already_set&) {  // numpy has no such dtype (bfloat16): the bits
    return py::dtype::from_args(py::str("uint" + std::to_string(8 * DTypeSize(d))));
  }
}

bool ValueDType(const py::array& a, const std::string& named, bool strict, DType& out,
                std::string& error) {
  const std::string own = py::str(a.dtype()).cast<std::string>();
  DType d = DType::kFloat32;
  if (!named.empty() && named != own && DTypeFromName(named, d)) {
    const char kind = a.dtype().kind();
    if (static_cast<size_t>(a.itemsize()) == DTypeSize(d) &&
        (kind == 'f' || kind == 'i' || kind == 'u')) {
      out = d;
      return true;
    }
    if (strict) {
      error = detail::Concat("values of numpy dtype ", own, " given as ", named, " (",
                             DTypeSize(d), "-byte values)");
      return false;
    }
  } else if (!named.empty() && named != own && strict) {
    error = detail::Concat("dtype '", named, "' is none of zen's (", DTypeSet::All().Names(), ")");
    return false;
  }
  if (DTypeFromName(own, out)) return true;
  error = detail::Concat("values have dtype ", own, ", zen syncs ", DTypeSet::All().Names(),
                         " (bfloat16 as a uint16 or int16 view with dtype='bfloat16')");
  return false;
}

void BindSchemes(py::module_& m) {
  py::class_<Scheme>(m, "Scheme", "A synchronization scheme of the registry (zen.create_scheme).")
      .def_property_readonly("name", [](const Scheme& s) { return std::string(s.name()); })
      .def_property_readonly("description",
                             [](const Scheme& s) { return std::string(s.description()); })
      .def_property_readonly("check_agreement", &Scheme::check_agreement)
      .def("sync", &SyncCoo, py::arg("comm"), py::arg("rows"), py::arg("width"), py::arg("ids"),
           py::arg("values"), py::arg("name") = "", py::arg("dtype") = py::none(),
           "Global sum of a COO tensor (ids: int64 [nnz], any order, duplicates summed; values: "
           "[nnz, width] of float32, float64 or float16, or of any 2-byte type holding bfloat16 "
           "bits with dtype='bfloat16'; read in place). Returns (ids, values), sorted and unique, "
           "identical on every rank; bfloat16 values come back as uint16 bits.")
      .def("sync_dense", &SyncDense, py::arg("comm"), py::arg("buffer"),
           py::arg("rows"), py::arg("width"), py::arg("name") = "", py::arg("dtype") = py::none(),
           "Sums a C-contiguous [rows x width] buffer (float32, float64, float16, or bfloat16 "
           "bits with dtype='bfloat16') over all ranks in place; zero rows are not sent.")
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
  m.def(
      "scheme_dtypes",
      [] {
        std::vector<std::pair<std::string, std::vector<std::string>>> out;
        const SchemeRegistry registry = Registry();
        for (const SchemeInfo& s : registry.schemes()) {
          std::vector<std::string> names;
#define ZEN_DTYPE_IF_SUMMED(T, e, code, name) \
  if (s.capabilities.Sums(DType::e)) names.emplace_back(name);
          ZEN_FOR_EACH_VALUE_TYPE(ZEN_DTYPE_IF_SUMMED)
#undef ZEN_DTYPE_IF_SUMMED
          out.emplace_back(s.id, std::move(names));
        }
        return out;
      },
      "The dtypes each registered scheme sums, as (id, [dtype name, ...]) (SyncCapabilities).");
  m.def("default_scheme", &DefaultScheme,
        "'auto' when the cost-model selector is built in, else 'zen', else 'agsparse'.");
  m.def("create_scheme", &CreateScheme, py::arg("id"), py::kw_only(),
        py::arg("seed") = std::nullopt, py::arg("threads") = 0, py::arg("block_values") = 256,
        py::arg("check_agreement") = true,
        "A new scheme from the registry; ValueError for an unknown id.");
}

}  // namespace zen::python
