// python/src/bindings.h — the parts of the `zen._zen` extension module, one
// function per file, called from module.cc.
//
//   BindErrors   zen::Error and its subclasses as Python exceptions
//   BindComm     zen.Communicator and connect()/connect_url()
//   BindSchemes  the registry and zen.Scheme (sync, sync_dense, reject)
//   BindEngine   zen.Context and zen.Handle (asynchronous, batched calls)
//   BindExchange zen.Context's byte exchanges (zen.fsdp's transport "zen")
//   BindTrace    zen.write_trace (zen-trace/1 files of recorded gradients)
//   BindTopk     zen.TopKSelector and topk_count (top-k with error feedback)
//
// The pure-Python layer (python/zen/torch.py) is what users call; this module
// works on numpy arrays so that it needs no libtorch headers.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "zen/core/dtype.h"

#include <string>
#include <utility>
#include <vector>

namespace zen::python {

// The Python type name of an object, for error messages.
inline std::string TypeName(const pybind11::handle& h) {
  return pybind11::str(pybind11::type::handle_of(h).attr("__name__")).cast<std::string>();
}


// A numpy array that owns `data` (moved in, not copied; freed with the
// array).
template <typename T>
pybind11::array_t<T> ToArray(std::vector<T> data, std::vector<pybind11::ssize_t> shape) {
  auto* owned = new std::vector<T>(std::move(data));
  pybind11::capsule free(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return pybind11::array_t<T>(std::move(shape), owned->data(), free);
}

// The numpy dtype values of `d` are returned in: numpy's own of that name
// (float32, float64, float16; bfloat16 where ml_dtypes registers it), else
// an unsigned integer of its size holding the bits (bfloat16 as uint16).
pybind11::dtype NumpyDType(DType d);

// ToArray for the values of any dtype (dtype.h), as NumpyDType(DTypeOf<T>).
template <typename T>
pybind11::array ToValueArray(std::vector<T> data, std::vector<pybind11::ssize_t> shape) {
  auto* owned = new std::vector<T>(std::move(data));
  pybind11::capsule free(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return pybind11::array(NumpyDType(DTypeOf<T>), std::move(shape), owned->data(), free);
}

// The dtype of a numpy array's values, read in place (no converting copy),
// or false with the problem in `error`. The dtype numpy names (float32,
// float64, float16, or bfloat16 where ml_dtypes registers it), or
// `named`, a zen dtype name (DTypeName), for an array of that item size
// whose elements hold the values' bits: bfloat16, which numpy lacks, as a
// uint16 or int16 view. `strict`: a `named` whose size is not the array's
// item size is an error; otherwise it is ignored (the engine's "dtype",
// which names the caller's dtype before a conversion to float32).
bool ValueDType(const pybind11::array& a, const std::string& named, bool strict, DType& out,
                std::string& error);

void BindErrors(pybind11::module_& m);
void BindComm(pybind11::module_& m);
void BindSchemes(pybind11::module_& m);
void BindEngine(pybind11::module_& m);
void BindExchange(pybind11::module_& m);  // after BindEngine: adds methods to zen.Context
void BindTrace(pybind11::module_& m);
void BindTopk(pybind11::module_& m);

}  // namespace zen::python
