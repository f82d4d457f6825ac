// The `zen._zen` extension module: see bindings.h.
#include "bindings.h"

#ifndef ZEN_VERSION_STRING
#error "ZEN_VERSION_STRING is set by python/CMakeLists.txt from project(zen VERSION ...)"
#endif

PYBIND11_MODULE(_zen, m) {
  m.doc() = "zen: sparsity-driven gradient synchronization (C++ core). Use zen.torch.";
  m.attr("__version__") = ZEN_VERSION_STRING;
  // numpy's C API is loaded here, while importing holds the GIL alone:
  // pybind11 loads it lazily behind a static guard, and two threads making
  // their first numpy call at once (ranks on threads) deadlock, one waiting
  // on the guard with the GIL held, the other inside the guard for the GIL.
  (void)pybind11::dtype::of<float>();
  zen::python::BindErrors(m);
  zen::python::BindComm(m);
  zen::python::BindSchemes(m);
  zen::python::BindEngine(m);
  zen::python::BindExchange(m);
  zen::python::BindTrace(m);
  zen::python::BindTopk(m);
}
