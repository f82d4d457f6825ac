#include "py_store.h"

#include <pybind11/chrono.h>
#include <pybind11/stl.h>

#include "zen/core/error.h"

namespace py = pybind11;

namespace zen::python {
namespace {

std::string KeyList(const std::vector<std::string>& keys) {
  std::string out;
  for (const std::string& k : keys) out += (out.empty() ? "'" : ", '") + k + "'";
  return out;
}

}  // namespace

PyStore::PyStore(py::object store, int rank) : store_(std::move(store)), rank_(rank) {}

PyStore::~PyStore() {
  // The last reference may go on a thread without the GIL (inside Gloo).
  if (Py_IsInitialized()) {
    py::gil_scoped_acquire gil;
    store_ = py::object();
  } else {
    store_.release();
  }
}

void PyStore::set(const std::string& key, const std::vector<char>& data) {
  py::gil_scoped_acquire gil;
  try {
    store_.attr("set")(key, py::bytes(data.data(), data.size()));
  } catch (py::error_already_set& e) {
    throw TransportError(Where{rank_}, "Python store set('", key, "') failed: ", e.what());
  }
}

std::vector<char> PyStore::get(const std::string& key) {
  py::gil_scoped_acquire gil;
  try {
    const std::string value = store_.attr("get")(key).cast<py::bytes>();
    return {value.begin(), value.end()};
  } catch (py::error_already_set& e) {
    throw TransportError(Where{rank_}, "Python store get('", key, "') failed: ", e.what());
  }
}

void PyStore::wait(const std::vector<std::string>& keys) {
  py::gil_scoped_acquire gil;
  try {
    store_.attr("wait")(keys);
  } catch (py::error_already_set& e) {
    throw TransportError(Where{rank_}, "Python store wait(", KeyList(keys), ") failed: ", e.what());
  }
}

void PyStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  py::gil_scoped_acquire gil;
  try {
    store_.attr("wait")(keys, timeout);
  } catch (py::error_already_set& e) {
    throw TransportError(Where{rank_}, "Python store wait(", KeyList(keys), ", ", timeout.count(),
                         " ms) failed: ", e.what());
  }
}

bool PyStore::Has(const std::string& key) {
  py::gil_scoped_acquire gil;
  try {
    if (py::hasattr(store_, "check")) {
      return store_.attr("check")(std::vector<std::string>{key}).cast<bool>();
    }
    store_.attr("wait")(std::vector<std::string>{key}, std::chrono::milliseconds(1));
    return true;
  } catch (py::error_already_set& e) {
    if (py::hasattr(store_, "check")) {
      throw TransportError(Where{rank_}, "Python store check('", key, "') failed: ", e.what());
    }
    return false;  // the wait timed out
  }
}

}  // namespace zen::python
