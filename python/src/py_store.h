// python/src/py_store.h — a gloo::rendezvous::Store over a Python store
// object, so that zen rendezvous through the store a PyTorch job already has
// (torch.distributed's TCPStore, FileStore, HashStore or a PrefixStore on
// them: anything with set(key, bytes), get(key) -> bytes and
// wait(keys[, timedelta])).
//
// Deadline: every store call zen makes ends by `deadline` (the end of the
// connect). torch's TCPStore calls check, get, wait and compare_set block
// for ever when the store's server (rank 0 under torchrun) is stopped: a
// receive timeout inside torch fires and the call waits again. So each call
// runs on a daemon Python thread and is waited for with the time left; one
// that does not answer in time is a TransportError naming the call and the
// time waited, and its thread is left to finish (or not) on its own, holding
// only its own references. A store whose call timed out is not used again:
// later calls fail at once (its connection may still carry the late reply).
//
// Every callback acquires the GIL; the caller of ConnectGloo releases it
// around the blocking connect, so a store call and other Python threads
// interleave. A Python exception in a store call becomes a zen::TransportError
// carrying the Python message.
//
// Usage (inside a pybind11 function, with the GIL held):
//   auto store = std::make_shared<zen::python::PyStore>(py_store, rank, deadline);
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

class PyStore final : public gloo::rendezvous::Store, public zen::KeyCheck, public zen::AtomicSet {
 public:
  // `store` must have set/get/wait methods; rank only names errors. Calls
  // end by `deadline`.
  PyStore(pybind11::object store, int rank, std::chrono::steady_clock::time_point deadline);
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
  // store.compare_set(key, "", value) when the store has it (atomic in
  // torch's stores); else a check, then a set.
  bool TrySet(const std::string& key, const std::vector<char>& value) override;

 private:
  // Calls store.<method>(*args) on a daemon thread and waits until the
  // deadline (with the GIL held by the caller; released while waiting).
  pybind11::object Call(const char* method, pybind11::tuple args, const std::string& what);

  pybind11::object store_;
  pybind11::object bounded_;  // the Python helper that runs a call on a thread
  int rank_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point deadline_;
  std::string stuck_;  // the call that did not answer in time, once one did not
};

}  // namespace zen::python
