// zen.TopKSelector: top-k selection by magnitude with error feedback on numpy
// float32 arrays (zen/core/topk.h), in place, with the GIL released.
//
//   sel = zen.TopKSelector(threads=1, method="exact")   # or "sampled"
//   ids, values = sel.select(acc, k)       # acc: gradient + residual, float32,
//                                          # 1-D, contiguous; now the residual
//   ids, values = sel.select(acc, k, ids_out, values_out)   # into your arrays
//   k = zen.topk_count(n, 0.01)            # ceil(ratio * n)
//
// The returned arrays are the first `count` entries (views of the outputs
// when given). Bad arrays raise ValueError.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <optional>
#include <span>
#include <string>

#include "bindings.h"
#include "zen/core/error.h"
#include "zen/core/topk.h"

namespace py = pybind11;

namespace zen::python {
namespace {

TopKMethod ParseMethod(const std::string& method) {
  if (method == "exact") return TopKMethod::kExact;
  if (method == "sampled") return TopKMethod::kSampled;
  throw InvalidArgument(Where{}, "top-k method must be 'exact' or 'sampled', got '", method, "'");
}

// A writable, contiguous 1-D array of exactly dtype T (no conversion: the
// caller's own buffer is written).
template <typename T>
std::span<T> Writable(const py::array& a, const char* what) {
  if (!py::isinstance<py::array_t<T>>(a) || !a.dtype().is(py::dtype::of<T>())) {
    throw InvalidArgument(Where{}, what, " must be a numpy ",
                          py::str(py::dtype::of<T>()).cast<std::string>(), " array, got ",
                          py::str(a.dtype()).cast<std::string>());
  }
  if (a.ndim() != 1) {
    throw InvalidArgument(Where{}, what, " must be 1-D, got ", a.ndim(), " dimensions");
  }
  if (!(a.flags() & py::array::c_style)) {
    throw InvalidArgument(Where{}, what, " must be contiguous");
  }
  if (!a.writeable()) throw InvalidArgument(Where{}, what, " must be writable");
  return {static_cast<T*>(const_cast<void*>(a.data())), static_cast<size_t>(a.shape(0))};
}

py::tuple Select(TopKSelector& sel, const py::array& data, size_t k, std::optional<py::array> ids,
                 std::optional<py::array> values, const std::string& name) {
  auto d = Writable<float>(data, "data");
  const size_t kk = std::min(k, d.size());
  if (ids.has_value() != values.has_value()) {
    throw InvalidArgument(Where{-1, name}, "pass both ids and values, or neither");
  }
  if (!ids) {
    // Room for the sampled threshold's overshoot; exact uses kk.
    size_t cap = kk;
    if (sel.options().method == TopKMethod::kSampled) cap = std::min(d.size(), kk + kk / 2 + 16);
    // Allocated by numpy itself: arrays that pybind11 builds (an older
    // pybind11 under numpy 2) can carry wrong strides.
    const py::object empty = py::module_::import("numpy").attr("empty");
    ids = empty(cap, "int64").cast<py::array>();
    values = empty(cap, "float32").cast<py::array>();
  }
  auto is = Writable<int64_t>(*ids, "ids");
  auto vs = Writable<float>(*values, "values");
  size_t got;
  {
    py::gil_scoped_release release;
    got = sel.Select(d, k, is, vs, Where{-1, name});
  }
  const py::slice head(0, static_cast<py::ssize_t>(got), 1);
  return py::make_tuple((*ids)[head], (*values)[head]);
}

}  // namespace

void BindTopk(py::module_& m) {
  py::class_<TopKSelector>(m, "TopKSelector",
                           "Top-k selection by magnitude with error feedback (zen/core/topk.h).\n\n"
                           "select(data, k) picks the k values of largest |x| of a float32 array\n"
                           "(ties: lowest indices; NaN ranks above inf), returns (ids, values)\n"
                           "with ids ascending, and zeroes them in data (the residual).\n"
                           "method='sampled' estimates the threshold from a sample (DGC): the\n"
                           "count lands near k. A persistent pool of threads - 1 workers.")
      .def(py::init([](int threads, const std::string& method, double sample_fraction,
                       size_t min_sample, uint64_t seed) {
             TopKOptions opt;
             opt.method = ParseMethod(method);
             opt.sample_fraction = sample_fraction;
             opt.min_sample = min_sample;
             opt.seed = seed;
             return std::make_unique<TopKSelector>(threads, opt);
           }),
           py::arg("threads") = 1, py::kw_only(), py::arg("method") = "exact",
           py::arg("sample_fraction") = 0.01, py::arg("min_sample") = 1024,
           py::arg("seed") = 0x5eed)
      .def("select", &Select, py::arg("data"), py::arg("k"), py::arg("ids") = py::none(),
           py::arg("values") = py::none(), py::kw_only(), py::arg("name") = "",
           "Selects in place; returns (ids int64, values float32) of the selected values.")
      .def_property_readonly("threads", &TopKSelector::threads)
      .def_property_readonly(
          "method",
          [](const TopKSelector& s) {
            return s.options().method == TopKMethod::kExact ? "exact" : "sampled";
          })
      .def_property_readonly(
          "stats",
          [](const TopKSelector& s) {
            py::dict d;
            d["selected"] = s.stats().selected;
            d["k"] = s.stats().k;
            d["fell_back"] = s.stats().fell_back;
            d["one_pass"] = s.stats().one_pass;
            return d;
          },
          "What the latest select() did: selected, k, fell_back (sampled -> exact), "
          "one_pass (exact: the sample-guided one-pass path ran).");
  m.def("topk_count", [](size_t n, double ratio) { return TopKCount(n, ratio); }, py::arg("n"),
        py::arg("ratio"), "ceil(ratio * n), clamped to [0, n].");
}

}  // namespace zen::python
