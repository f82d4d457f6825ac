// python/src/bindings.h — the parts of the `zen._zen` extension module, one
// function per file, called from module.cc.
//
//   BindErrors   zen::Error and its subclasses as Python exceptions
//   BindComm     zen.Communicator and connect()/connect_url()
//   BindSchemes  the registry and zen.Scheme (sync, sync_dense, reject)
//   BindEngine   zen.Context and zen.Handle (asynchronous, batched calls)
//   BindTrace    zen.write_trace (zen-trace/1 files of recorded gradients)
//   BindTopk     zen.TopKSelector and topk_count (top-k with error feedback)
//
// The pure-Python layer (python/zen/torch.py) is what users call; this module
// works on numpy arrays so that it needs no libtorch headers.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

namespace zen::python {

// The Python type name of an object, for error messages.
inline std::string TypeName(const pybind11::handle& h) {
  return pybind11::str(pybind11::type::handle_of(h).attr("__name__")).cast<std::string>();
}


void BindErrors(pybind11::module_& m);
void BindComm(pybind11::module_& m);
void BindSchemes(pybind11::module_& m);
void BindEngine(pybind11::module_& m);
void BindTrace(pybind11::module_& m);
void BindTopk(pybind11::module_& m);

}  // namespace zen::python
