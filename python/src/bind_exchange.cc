// zen.Context.gather_records and zen.Context.exchange_bytes: the byte
// exchanges of zen/engine/exchange_job.h on a context's communicator and
// progress thread, for zen.fsdp's transport "zen" (its counts table, then
// its encoded chunks). The arrays are numpy views of the caller's torch CPU
// tensors (tensor.numpy(): no copy), read and written in place and kept
// alive until the exchange is done:
//
//   h = ctx.gather_records("zen.fsdp", mine, table)     # int64 [m], [world x m]
//   h.wait()                                            # table holds every rank's record
//   h = ctx.exchange_bytes("zen.fsdp", send, send_sizes, recv, recv_sizes)
//   ...                                                 # compute goes on
//   h.wait()                                            # raises the exchange's error
//
// Buffers that do not fit their sizes are a ValueError at once; errors of
// the exchange (zen.MismatchError, zen.TransportError) come from wait().
#include <pybind11/stl.h>

#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "zen/core/error.h"
#include "zen/engine/context.h"
#include "zen/engine/exchange_job.h"

namespace py = pybind11;

namespace zen::python {
namespace {

// One exchange until it completes: the arrays it reads and writes (touched
// only with the GIL held) and its outcome.
struct PyExchange {
  std::vector<py::object> keep;
  Handle handle;
  bool completed = false;  // set by the completion callback, GIL held
  std::exception_ptr error;
};

class ExchangeHandle {
 public:
  explicit ExchangeHandle(std::shared_ptr<PyExchange> x) : x_(std::move(x)) {}

  void Wait() {
    if (x_->completed) {
      if (x_->error) std::rethrow_exception(x_->error);
      return;
    }
    py::gil_scoped_release release;
    x_->handle.Wait();
  }
  bool Done() const { return x_->completed || x_->handle.Test(); }

 private:
  std::shared_ptr<PyExchange> x_;
};

// A C-contiguous numpy array's bytes, kept alive by the exchange.
std::span<std::byte> BytesOf(PyExchange& x, const py::object& obj, const char* what,
                             bool writable) {
  if (!py::isinstance<py::array>(obj)) {
    throw InvalidArgument(std::string("zen.Context: ") + what + " must be a numpy array, got " +
                          TypeName(obj));
  }
  auto a = py::reinterpret_borrow<py::array>(obj);
  if (!(a.flags() & py::array::c_style) || (writable && !a.writeable())) {
    throw InvalidArgument(std::string("zen.Context: ") + what + " must be C-contiguous" +
                          (writable ? " and writable" : ""));
  }
  x.keep.push_back(obj);
  auto* data = static_cast<std::byte*>(const_cast<void*>(a.data()));
  // numpy's own nbytes: pybind11's itemsize() reads a descriptor field
  // whose place numpy 2 moved (it reads 0 there).
  return {data, a.attr("nbytes").cast<size_t>()};
}

// The completion callback: drops the arrays with the GIL held.
std::function<void(std::exception_ptr)> Done(std::shared_ptr<PyExchange> x) {
  return [x](std::exception_ptr error) mutable {
    if (_Py_IsFinalizing()) {  // the interpreter is going away: touch nothing
      new std::shared_ptr<PyExchange>(std::move(x));  // leaked on purpose
      return;
    }
    py::gil_scoped_acquire gil;
    x->error = error;
    x->completed = true;
    x->keep.clear();
    x.reset();
  };
}

ExchangeHandle GatherRecords(Context& ctx, std::string name, const py::object& mine,
                             const py::object& table) {
  auto x = std::make_shared<PyExchange>();
  const std::span<const std::byte> m = BytesOf(*x, mine, "mine", false);
  const std::span<std::byte> t = BytesOf(*x, table, "table", true);
  {
    py::gil_scoped_release release;
    x->handle = StartGatherRecords(ctx, std::move(name), m, t, Done(x));
  }
  return ExchangeHandle(x);
}

ExchangeHandle ExchangeBytes(Context& ctx, std::string name, const py::object& send,
                             std::vector<int64_t> send_sizes, const py::object& recv,
                             std::vector<int64_t> recv_sizes) {
  auto x = std::make_shared<PyExchange>();
  const std::span<const std::byte> s = BytesOf(*x, send, "send", false);
  const std::span<std::byte> r = BytesOf(*x, recv, "recv", true);
  {
    py::gil_scoped_release release;
    x->handle = StartExchangeBytes(ctx, std::move(name), s, std::move(send_sizes), r,
                                   std::move(recv_sizes), Done(x));
  }
  return ExchangeHandle(x);
}

}  // namespace

void BindExchange(py::module_& m) {
  py::class_<ExchangeHandle>(m, "ExchangeHandle",
                             "The completion of zen.Context.gather_records / exchange_bytes.")
      .def("wait", &ExchangeHandle::Wait,
           "Blocks until the exchange is done (GIL released); raises its error on every call.")
      .def("done", &ExchangeHandle::Done, "True once the exchange is done; never blocks.");
  // Methods of zen.Context (bind_engine.cc defines the class).
  auto context = py::reinterpret_borrow<py::object>(py::type::of<Context>());
  context.attr("gather_records") = py::cpp_function(
      &GatherRecords, py::name("gather_records"), py::is_method(context), py::arg("name"),
      py::arg("mine"), py::arg("table"),
      "Queues an all-gather of one record per rank (numpy arrays: mine, and table of world x "
      "mine's bytes, written in place) on the progress thread; returns a zen.ExchangeHandle. A "
      "record's first 8 bytes are the call's identity: a rank whose record starts otherwise is "
      "in another call (zen.MismatchError on wait(), communicator out of step).");
  context.attr("exchange_bytes") = py::cpp_function(
      &ExchangeBytes, py::name("exchange_bytes"), py::is_method(context), py::arg("name"),
      py::arg("send"), py::arg("send_sizes"), py::arg("recv"), py::arg("recv_sizes"),
      "Queues an all-to-all of byte segments on the progress thread; returns a "
      "zen.ExchangeHandle. Segment p of send (at sum(send_sizes[:p])) goes to rank p; rank p's "
      "lands in segment p of recv; this rank's own segments are not moved. The sizes must "
      "agree between every sender and receiver. The arrays are read / written in place until "
      "the handle is done.");
}

}  // namespace zen::python
