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

namespace zen::python {

void BindErrors(pybind11::module_& m);
void BindComm(pybind11::module_& m);
void BindSchemes(pybind11::module_& m);
void BindEngine(pybind11::module_& m);
void BindTrace(pybind11::module_& m);
void BindTopk(pybind11::module_& m);

}  // namespace zen::python
