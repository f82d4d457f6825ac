// The `zen._zen` extension module: see bindings.h.
#include "bindings.h"

PYBIND11_MODULE(_zen, m) {
  m.doc() = "zen: sparsity-driven gradient synchronization (C++ core). Use zen.torch.";
  zen::python::BindErrors(m);
  zen::python::BindComm(m);
  zen::python::BindSchemes(m);
  zen::python::BindEngine(m);
  zen::python::BindTopk(m);
}
