// zen.Context: asynchronous, batched synchronization over numpy arrays (see
// zen/engine/context.h). zen.torch's DDP hook starts one batch per bucket and
// completes its torch future from `on_done`, which runs on the context's
// progress thread with the GIL held.
//
//   ctx = zen.Context(comm, scheme="auto")
//   h = ctx.start("bucket0", [
//       ("dense", "fc.weight", array, rows, width),       # summed in place
//       ("sparse", "emb.weight", rows, width, ids, values, {"scheme": "zen"}),
//       ("reject", "x", rows, width, "why this rank cannot take part")],
//       on_done=lambda handle: ...)
//   sums = h.wait()   # [(ids, values)] of the sparse items, in order (the
//                     # sums' own storage: the same arrays on every wait())
//
// Every array is read (dense: also written) where it lies, as torch's
// asynchronous collectives do: the batch keeps it alive, and the caller
// must not write it until the handle is done. A sparse item whose ids are
// strictly increasing (a coalesced gradient's, a top-k selection's) is not
// copied at all; other ids are copied, sorted and summed when the batch is
// started.
//
// A sparse item with {"out": array, "divisor": d} has its sum divided by d
// written into `array` (the values' dtype, C-contiguous, rows x width; zeros
// elsewhere: Scheme::SyncInto) and None in wait()'s list: no sorted result,
// no copy (the top-k hook writes each bucket's mean this way).
//
// Every item's problem (dtype, layout, ids that are not integers) is put on
// the item rather than raised here, so that it travels through the batch's
// metadata round and every rank raises for the batch. A dense or sparse item
// may end with a dict of options: "scheme" (this tensor's scheme id),
// "dtype" (compared across ranks: a zen dtype name for arrays of its item
// size that hold its bits, e.g. "bfloat16" for a uint16 view, read as that
// dtype in place; otherwise the caller's dtype before a conversion to
// float32, only compared), "values" ("bf16"/"fp16": values at half width on the wire,
// summed in float32), "sum_order" ([(first element, start rank), ...]:
// the order ranks' values are added in, SyncOptions::sum_order; these two
// need a scheme whose registry entry declares them, SyncCapabilities: zen,
// which "auto" then means) and "rank_order" (True: the sum
// is added in ascending rank order, bit for bit; "auto" then chooses among
// the schemes that do, BatchTensor::rank_order).
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bindings.h"
#include "zen/core/checked.h"
#include "zen/core/error.h"
#include "zen/analysis/auto_scheme.h"
#include "zen/engine/context.h"

namespace py = pybind11;

namespace zen::python {
namespace {

// Everything one batch needs until it completes. Python objects in here are
// only touched with the GIL held.
struct PyBatch {
  std::vector<BatchTensor> tensors;
  std::vector<py::object> keep;  // the arrays read in place (dense, sparse), alive until done
  std::vector<std::unique_ptr<SparseTensor>> inputs;
  std::vector<std::unique_ptr<SparseTensor>> outputs;
  std::vector<int64_t> out_width;
  py::object on_done;
  Handle handle;  // assigned after Context::Start returns: not for the callback
  // Set by the completion callback (GIL held) before on_done runs, so that
  // handle.wait() inside on_done needs no Handle.
  bool completed = false;
  std::exception_ptr error;
  // wait()'s list, built by the first wait() (the sums move into numpy
  // arrays, no copy) and returned again by every later one.
  py::object results;
};

class PyHandle {
 public:
  explicit PyHandle(std::shared_ptr<PyBatch> b) : batch_(std::move(b)) {}

  py::object Wait() {
    if (batch_->completed) {
      if (batch_->error) std::rethrow_exception(batch_->error);
    } else {
      py::gil_scoped_release release;
      batch_->handle.Wait();
    }
    if (batch_->results) return batch_->results;
    py::list out;
    for (size_t i = 0; i < batch_->outputs.size(); ++i) {
      if (batch_->outputs[i] == nullptr) {  // written into the item's "out" array
        out.append(py::none());
        continue;
      }
      // The arrays take the sum's storage: the result is not copied again.
      SparseTensor& s = *batch_->outputs[i];
      const auto nnz = static_cast<py::ssize_t>(s.nnz());
      const auto width = static_cast<py::ssize_t>(batch_->out_width[i]);
      py::object values = WithValueType(s.dtype(), [&]<typename T>() -> py::object {
        return ToValueArray(std::move(s).TakeValues<T>(), {nnz, width});
      });
      out.append(py::make_tuple(ToArray(std::move(s).TakeIds(), {nnz}), values));
    }
    batch_->results = out;
    return out;
  }
  bool Done() const { return batch_->completed || batch_->handle.Test(); }

 private:
  std::shared_ptr<PyBatch> batch_;
};

int64_t ToInt64(const py::handle& obj, const char* what, std::string& error) {
  if (py::isinstance<py::bool_>(obj) || !py::isinstance<py::int_>(obj)) {
    if (error.empty()) error = std::string(what) + " must be an int, got " + TypeName(obj);
    return 0;
  }
  try {
    return obj.cast<int64_t>();
  } catch (const py::cast_error&) {
    if (error.empty()) error = std::string(what) + " does not fit in int64";
    return 0;
  }
}

// A writable C-contiguous numpy array of one of zen's dtypes (ValueDType:
// `named` is the item's "dtype", e.g. bfloat16 bits in a uint16 array) as
// a buffer of that dtype (read and written in place, no converting copy),
// kept alive by the batch; otherwise an empty buffer and the first problem
// in `error`.
DenseValues WritableValues(PyBatch& b, const py::object& obj, const std::string& what,
                           const std::string& named, std::string& error) {
  if (!py::isinstance<py::array>(obj)) {
    if (error.empty()) error = what + " must be a numpy array, got " + TypeName(obj);
    return {};
  }
  auto a = py::reinterpret_borrow<py::array>(obj);
  DenseValues out;
  std::string problem;
  if (!ValueDType(a, named, /*strict=*/false, out.dtype, problem)) {
    if (error.empty()) error = what + ": " + problem;
    return {};
  }
  if (!a.writeable() || !(a.flags() & py::array::c_style)) {
    if (error.empty()) error = what + " must be writable and C-contiguous";
    return {};
  }
  b.keep.push_back(obj);
  out.bytes = std::span(static_cast<std::byte*>(a.mutable_data()), static_cast<size_t>(a.nbytes()));
  return out;
}

// Adds one item of the Python list to the batch (never throws for a bad
// item: its problem goes on BatchTensor::error).
void AddItem(PyBatch& b, const py::handle& item) {
  BatchTensor t;
  std::string error;
  const auto tuple = py::reinterpret_borrow<py::object>(item);
  if (!py::isinstance<py::tuple>(tuple) || py::len(tuple) < 5) {
    throw InvalidArgument("zen.Context.start: each item is a tuple ('dense', name, array, rows, "
                          "width), ('sparse', name, rows, width, ids, values) or ('reject', "
                          "name, rows, width, message)");
  }
  const auto kind = tuple[py::int_(0)].cast<std::string>();
  t.name = py::str(tuple[py::int_(1)]).cast<std::string>();
  const size_t n = py::len(tuple);
  // An optional trailing dict: {"scheme": id, "dtype": "bfloat16",
  // "values": "bf16" | "fp16" | "fp32" (on the wire)}.
  auto options = [&](size_t at) {
    if (n <= at) return;
    const py::object o = tuple[py::int_(at)];
    if (!py::isinstance<py::dict>(o)) {
      throw InvalidArgument("zen.Context.start: the last element of an item, if any, is a dict");
    }
    const auto d = py::reinterpret_borrow<py::dict>(o);
    if (d.contains("scheme")) t.scheme = py::str(d["scheme"]).cast<std::string>();
    if (d.contains("dtype")) t.dtype = py::str(d["dtype"]).cast<std::string>();
    if (d.contains("values")) {
      // Values on the wire; a bad name fails this item on every rank.
      const std::string v = py::str(d["values"]).cast<std::string>();
      if (v == "bf16" || v == "bfloat16") {
        t.values = WireValues::kBfloat16;
      } else if (v == "fp16" || v == "float16") {
        t.values = WireValues::kFloat16;
      } else if (v != "fp32" && v != "float32") {
        if (error.empty()) error = "values must be 'fp32', 'bf16' or 'fp16', got '" + v + "'";
      }
    }
    if (d.contains("rank_order")) t.rank_order = py::bool_(d["rank_order"]);
    if (d.contains("out")) {  // sparse items only (checked by the caller)
      t.into = true;
      t.sparse_into = WritableValues(b, d["out"], "out", t.dtype, error);
    }
    if (d.contains("divisor")) {
      try {
        t.divisor = d["divisor"].cast<double>();
      } catch (const py::cast_error&) {
        if (error.empty()) error = "divisor must be a number, got " + TypeName(d["divisor"]);
      }
    }
    if (d.contains("sum_order")) {
      // [(first element, start rank), ...]: the order ranks are added in.
      try {
        for (const py::handle step : py::reinterpret_borrow<py::sequence>(d["sum_order"])) {
          const auto pair = py::reinterpret_borrow<py::sequence>(step);
          if (pair.size() != 2) throw py::value_error("a step is (first element, start rank)");
          t.sum_order.emplace_back(pair[0].cast<int64_t>(), pair[1].cast<int>());
        }
      } catch (const std::exception& e) {
        if (error.empty()) error = std::string("sum_order must be [(first element, start rank), ...]: ") + e.what();
      }
    }
  };
  if (kind == "dense" && (n == 5 || n == 6)) {
    options(5);
    if (t.into && error.empty()) error = "\"out\" is for sparse items";
    t.kind = BatchTensor::Kind::kDense;
    t.rows = ToInt64(tuple[py::int_(3)], "rows", error);
    t.width = ToInt64(tuple[py::int_(4)], "width", error);
    t.dense = WritableValues(b, tuple[py::int_(2)], "dense buffer", t.dtype, error);
  } else if (kind == "sparse" && (n == 6 || n == 7)) {
    options(6);
    t.kind = BatchTensor::Kind::kSparse;
    t.rows = ToInt64(tuple[py::int_(2)], "rows", error);
    t.width = ToInt64(tuple[py::int_(3)], "width", error);
    const py::object ids_obj = tuple[py::int_(4)], values_obj = tuple[py::int_(5)];
    // The arrays are read in place (kept alive by the batch until it is
    // done); only ids of another integer type or arrays that are not
    // C-contiguous are converted first.
    std::span<const int64_t> ids;
    DType dtype = DType::kFloat32;
    const std::byte* values = nullptr;
    size_t count = 0;
    if (!py::isinstance<py::array>(ids_obj) ||
        (py::reinterpret_borrow<py::array>(ids_obj).dtype().kind() != 'i')) {
      if (error.empty()) error = "ids must be a numpy array of signed integers";
    } else {
      const auto c =
          py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(ids_obj);
      b.keep.push_back(c);
      ids = std::span(c.data(), static_cast<size_t>(c.size()));
    }
    const auto values_array = py::isinstance<py::array>(values_obj)
                                  ? py::reinterpret_borrow<py::array>(values_obj)
                                  : py::array();
    std::string problem;
    if (!values_array) {
      if (error.empty()) error = "values must be a numpy array";
    } else if (!ValueDType(values_array, t.dtype, /*strict=*/false, dtype, problem)) {
      if (error.empty()) error = problem;
    } else {  // read in place (C-contiguous, or made so), kept alive by the batch
      const auto c = py::array::ensure(values_array, py::array::c_style);
      b.keep.push_back(c);
      values = static_cast<const std::byte*>(c.data());
      count = static_cast<size_t>(c.size());
    }
    auto input = std::make_unique<SparseTensor>();
    if (error.empty()) {
      py::gil_scoped_release release;
      try {
        *input = WithValueType(dtype, [&]<typename T>() {
          return SparseTensor::ViewOrCoo<T>(
              t.rows, t.width, ids, std::span<const T>(reinterpret_cast<const T*>(values), count),
              t.name);
        });
      } catch (const InvalidArgument& e) {
        error = e.what();
      } catch (const std::bad_alloc&) {
        error = "out of memory building the input tensor";
      }
    }
    // One output per sparse item (none when written into "out"); with an
    // error it stays empty (the batch fails on every rank).
    b.outputs.push_back(t.into ? nullptr : std::make_unique<SparseTensor>());
    b.out_width.push_back(t.width > 0 ? t.width : 1);
    if (error.empty()) {
      t.sparse = input.get();
      t.sparse_out = b.outputs.back().get();
    }
    b.inputs.push_back(std::move(input));
  } else if (kind == "reject" && n == 5) {
    t.rows = ToInt64(tuple[py::int_(2)], "rows", error);
    t.width = ToInt64(tuple[py::int_(3)], "width", error);
    error = py::str(tuple[py::int_(4)]).cast<std::string>();
  } else {
    throw InvalidArgument("zen.Context.start: unknown item kind '" + kind + "' or wrong length");
  }
  t.error = std::move(error);
  b.tensors.push_back(std::move(t));
}

PyHandle Start(Context& ctx, const std::string& name, const py::list& items,
               py::object on_done) {
  auto batch = std::make_shared<PyBatch>();
  batch->tensors.reserve(py::len(items));
  for (const py::handle& item : items) AddItem(*batch, item);
  batch->on_done = std::move(on_done);
  // The callback owns a reference to the batch until it has run; it drops
  // it (and so the arrays) with the GIL held.
  std::function<void(std::exception_ptr)> done = [batch](std::exception_ptr error) mutable {
    if (_Py_IsFinalizing()) {  // the interpreter is going away: touch nothing
      new std::shared_ptr<PyBatch>(std::move(batch));  // leaked on purpose
      return;
    }
    py::gil_scoped_acquire gil;
    batch->error = error;
    batch->completed = true;
    if (batch->on_done && !batch->on_done.is_none()) {
      try {
        batch->on_done(PyHandle(batch));
      } catch (py::error_already_set& e) {
        e.discard_as_unraisable("zen.Context on_done callback");
      }
    }
    batch->on_done = py::none();
    batch->keep.clear();
    batch.reset();
  };
  {
    py::gil_scoped_release release;
    batch->handle = ctx.Start(name, batch->tensors, std::move(done));
  }
  return PyHandle(batch);
}

// Deleting a context joins its progress thread, which may need the GIL for
// a callback: let go of it meanwhile.
// When the last reference goes away inside a completion callback (on the
// progress thread itself, e.g. a hook's closure that held the ZenState),
// another thread deletes it, so that the join waits for the callback to
// return instead of failing with EDEADLK.
struct ReleasingDelete {
  void operator()(Context* c) const {
    if (c->OnProgressThread()) {
      std::thread([c] { delete c; }).detach();
      return;
    }
    py::gil_scoped_release release;
    delete c;
  }
};

}  // namespace

void BindEngine(py::module_& m) {
  py::class_<PyHandle>(m, "Handle", "The completion of zen.Context.start().")
      .def("wait", &PyHandle::Wait,
           "Blocks until the batch is done (GIL released); returns [(ids, values)] of its "
           "sparse items in order (the same list and arrays on every call: they hold the sums, "
           "not copies); raises the batch's error on every call.")
      .def("done", &PyHandle::Done, "True once the batch is done; never blocks.");

  py::class_<Context, std::unique_ptr<Context, ReleasingDelete>>(
      m, "Context",
      "Asynchronous, batched synchronization on one progress thread (zen/engine/context.h). "
      "Batches run in start() order, which must be the same on every rank.")
      .def(py::init([](Communicator& comm, const std::string& scheme, int threads,
                       std::optional<uint64_t> seed) {
             ContextOptions o;
             o.scheme = scheme;
             o.scheme_options.threads = threads;
             if (seed) o.scheme_options.seed = *seed;
             return std::unique_ptr<Context, ReleasingDelete>(new Context(comm, o));
           }),
           py::arg("comm"), py::kw_only(), py::arg("scheme") = "auto", py::arg("threads") = 0,
           py::arg("seed") = std::nullopt, py::keep_alive<1, 2>())
      .def("start", &Start, py::arg("name"), py::arg("items"), py::arg("on_done") = py::none(),
           "Queues one batch; returns a zen.Handle at once. on_done(handle), if given, runs on "
           "the progress thread (GIL held) when the batch completes. The items' arrays are read "
           "in place (dense ones summed in place) while the batch runs: do not write them until "
           "the handle is done. Keep batch and item names the same from step to step ('bucket3', "
           "not 'step12.bucket3'): scheme 'auto' keeps its decision per name, and a new name is "
           "profiled and timed afresh.")
      .def(
          "close",
          [](Context& c) {
            py::gil_scoped_release release;
            c.Close();
          },
          "Finishes the queued batches and stops the progress thread; start() then raises. "
          "zen closes every context at interpreter exit (atexit), while callbacks can still "
          "run.")
      .def(
          "drain",
          [](Context& c) {
            py::gil_scoped_release release;
            c.Drain();
          },
          "Blocks until every batch started so far is done.")
      .def(
          "decision",
          [](Context& c, const std::string& tensor) -> py::object {
            // Only between batches: the progress thread uses the scheme.
            // The tensor's auto is the plain one or the rank-order one.
            for (const bool rank_order : {false, true}) {
              const auto* a = dynamic_cast<const AutoScheme*>(
                  &c.scheme("auto", rank_order));
              if (a == nullptr) continue;
              if (const AutoDecision* d = a->decision(tensor)) return py::str(d->chosen);
            }
            return py::none();
          },
          py::arg("tensor"),
          "The scheme 'auto' chose on its latest call for this tensor name, or None. Call it "
          "between batches (e.g. after drain()).")
      .def_property_readonly("comm", [](Context& c) -> Communicator& { return c.comm(); },
                             py::return_value_policy::reference_internal);
}

}  // namespace zen::python
