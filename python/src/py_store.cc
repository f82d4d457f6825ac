#include "py_store.h"

#include <pybind11/chrono.h>
#include <pybind11/eval.h>
#include <pybind11/stl.h>

#include <algorithm>

#include "zen/core/error.h"

namespace py = pybind11;

namespace zen::python {
namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

std::string KeyList(const std::vector<std::string>& keys) {
  std::string out;
  for (const std::string& k : keys) out += (out.empty() ? "'" : ", '") + k + "'";
  return out;
}

// Runs fn(*args) on a daemon thread (one that never keeps the interpreter
// from exiting) and waits at most `seconds`: (True, result), (False, None)
// when it has not returned by then; fn's exception is raised here.
constexpr const char* kBounded = R"(
import threading

def bounded(fn, args, seconds):
    box = {}
    done = threading.Event()

    def run():
        try:
            box['value'] = fn(*args)
        except BaseException as e:
            box['error'] = e
        finally:
            done.set()

    threading.Thread(target=run, daemon=True, name='zen-store-call').start()
    if not done.wait(seconds):
        return (False, None)
    if 'error' in box:
        raise box['error']
    return (True, box.get('value'))
)";

}  // namespace

PyStore::PyStore(py::object store, int rank, Clock::time_point deadline)
    : store_(std::move(store)), rank_(rank), start_(Clock::now()), deadline_(deadline) {
  py::dict scope;
  scope["__builtins__"] = py::module_::import("builtins");
  py::exec(kBounded, scope);
  bounded_ = scope["bounded"];
}

PyStore::~PyStore() {
  // The last reference may go on a thread without the GIL (inside Gloo).
  if (Py_IsInitialized()) {
    py::gil_scoped_acquire gil;
    store_ = py::object();
    bounded_ = py::object();
  } else {
    store_.release();
    bounded_.release();
  }
}

py::object PyStore::Call(const char* method, py::tuple args, const std::string& what) {
  if (!stuck_.empty()) {
    throw TransportError(Where{rank_}, "Python store ", what, " not tried: an earlier call (",
                         stuck_, ") did not answer in time and may still be pending");
  }
  const auto left = std::chrono::duration_cast<Millis>(deadline_ - Clock::now());
  const double seconds = std::max<double>(0.001, static_cast<double>(left.count()) / 1000.0);
  py::tuple result = bounded_(store_.attr(method), args, seconds);
  if (!result[0].cast<bool>()) {
    stuck_ = what;
    const auto waited = std::chrono::duration_cast<Millis>(Clock::now() - start_);
    throw TransportError(Where{rank_}, "Python store ", what, " did not answer within the ",
                         std::chrono::duration_cast<Millis>(deadline_ - start_).count(),
                         " ms timeout (", waited.count(),
                         " ms since the connect began): is the store's server (rank 0 under "
                         "torchrun) stopped or unreachable?");
  }
  return result[1];
}

void PyStore::set(const std::string& key, const std::vector<char>& data) {
  py::gil_scoped_acquire gil;
  const std::string what = "set('" + key + "')";
  try {
    Call("set", py::make_tuple(key, py::bytes(data.data(), data.size())), what);
  } catch (py::error_already_set& e) {
    throw TransportError(Where{rank_}, "Python store ", what, " failed: ", e.what());
  }
}

std::vector<char> PyStore::get(const std::string& key) {
  py::gil_scoped_acquire gil;
  const std::string what = "get('" + key + "')";
  try {
    const std::string value = Call("get", py::make_tuple(key), what).cast<py::bytes>();
    return {value.begin(), value.end()};
  } catch (py::error_already_set& e) {
    throw TransportError(Where{rank_}, "Python store ", what, " failed: ", e.what());
  }
}

void PyStore::wait(const std::vector<std::string>& keys) {
  py::gil_scoped_acquire gil;
  const std::string what = "wait(" + KeyList(keys) + ")";
  try {
    Call("wait", py::make_tuple(keys), what);
  } catch (py::error_already_set& e) {
    throw TransportError(Where{rank_}, "Python store ", what, " failed: ", e.what());
  }
}

void PyStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  py::gil_scoped_acquire gil;
  const std::string what = "wait(" + KeyList(keys) + ", " + std::to_string(timeout.count()) + " ms)";
  try {
    Call("wait", py::make_tuple(keys, timeout), what);
  } catch (py::error_already_set& e) {
    throw TransportError(Where{rank_}, "Python store ", what, " failed: ", e.what());
  }
}

bool PyStore::Has(const std::string& key) {
  py::gil_scoped_acquire gil;
  const bool has_check = py::hasattr(store_, "check");
  const std::string what = (has_check ? "check('" : "wait('") + key + "')";
  try {
    if (has_check) {
      return Call("check", py::make_tuple(std::vector<std::string>{key}), what).cast<bool>();
    }
    Call("wait", py::make_tuple(std::vector<std::string>{key}, std::chrono::milliseconds(1)), what);
    return true;
  } catch (py::error_already_set& e) {
    if (has_check) {
      throw TransportError(Where{rank_}, "Python store ", what, " failed: ", e.what());
    }
    return false;  // the wait timed out
  }
}

bool PyStore::TrySet(const std::string& key, const std::vector<char>& value) {
  {
    py::gil_scoped_acquire gil;
    if (py::hasattr(store_, "compare_set")) {
      const std::string what = "compare_set('" + key + "')";
      try {
        // Sets when the key is absent; returns the value the key then holds.
        const std::string now =
            Call("compare_set", py::make_tuple(key, py::bytes(""), py::bytes(value.data(), value.size())),
                 what)
                .cast<py::bytes>();
        return now.size() == value.size() && std::equal(now.begin(), now.end(), value.begin());
      } catch (py::error_already_set& e) {
        throw TransportError(Where{rank_}, "Python store ", what, " failed: ", e.what());
      }
    }
  }
  if (Has(key)) return false;
  set(key, value);
  return true;
}

}  // namespace zen::python
