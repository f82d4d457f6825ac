// python/src/py_store.h — a gloo::rendezvous::Store over a Python store
// object, so that zen rendezvous through the store a PyTorch job already has
// (torch.distributed's TCPStore, FileStore, HashStore or a PrefixStore on
// them: anything with set(key, bytes), get(key) -> bytes and
// wait(keys[, timedelta])).
//
// Every callback acquires the GIL; the caller of ConnectGloo releases it
// around the blocking connect, so a store call and other Python threads
// interleave. A Python exception in a store call becomes a zen::TransportError
// carrying the Python message.
//
// Usage (inside a pybind11 function, with the GIL held):
//   auto store = std::make_shared<zen::python::PyStore>(py_store, rank);
//   pybind11::gil_scoped_release release;
//   auto comm = zen::ConnectGloo(rank, size, store, options);
#pragma once

#include <gloo/rendezvous/store.h>
#include <pybind11/pybind11.h>

#include <chrono>
#include <string>
#include <vector>

#include "zen/comm/rendezvous.h"

namespace zen::python {

class PyStore final : public gloo::rendezvous::Store, public zen::KeyCheck {
 public:
  // `store` must have set/get/wait methods; rank only names errors.
  PyStore(pybind11::object store, int rank);
  ~PyStore() override;
  PyStore(const PyStore&) = delete;
  PyStore& operator=(const PyStore&) = delete;

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;
  // store.check([key]) when the store has it (torch's stores do), else a
  // 1 ms wait.
  bool Has(const std::string& key) override;

 private:
  pybind11::object store_;
  int rank_;
};

}  // namespace zen::python
