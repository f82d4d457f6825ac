// zen's error model in Python: InvalidArgument is a ValueError (the caller's
// input is wrong); MismatchError, FormatError and TransportError are classes
// of their own under zen, all deriving from zen.Error(RuntimeError). The C++
// message is passed on unchanged.
#include <exception>

#include "bindings.h"
#include "zen/core/error.h"

namespace py = pybind11;

namespace zen::python {

void BindErrors(py::module_& m) {
  // pybind11 tries translators from the last registered to the first, so the
  // most general one goes first.
  auto& base = py::register_exception<zen::Error>(m, "Error", PyExc_RuntimeError);
  base.doc() = "Base of zen's errors (except InvalidArgument, which is a ValueError).";
  py::register_exception<zen::MismatchError>(m, "MismatchError", base.ptr());
  py::register_exception<zen::FormatError>(m, "FormatError", base.ptr());
  py::register_exception<zen::TransportError>(m, "TransportError", base.ptr());
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const zen::InvalidArgument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
}

}  // namespace zen::python
