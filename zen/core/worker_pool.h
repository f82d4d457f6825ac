// zen/core/worker_pool.h — persistent worker threads for zen's data-parallel
// loops (partitioning dense buffers, the hierarchical hash, top-k
// selection), so that no call creates a thread.
//
// A WorkerPool of size t owns t - 1 worker threads, started by the first
// Run() that needs them (a pool that only ever runs one part starts none)
// and joined by the destructor. Run(parts, f) calls f(0) .. f(parts - 1)
// once each, the last part on the calling thread, and returns when all are
// done; handing work over allocates nothing. An exception thrown by a part
// is rethrown by Run (the calling thread's first, else a worker's) after
// every part has finished. Run is not reentrant and takes one caller at a
// time (each partitioner or selector owns its pool and is itself used by
// one thread at a time).
//
// Usage:
//   zen::WorkerPool pool(4);
//   std::vector<int64_t> sums(4);
//   pool.Run(4, [&](int part) { sums[part] = SumOfChunk(part); });
#pragma once

#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace zen {

class WorkerPool {
 public:
  // threads >= 1 (smaller values count as 1); no thread starts here.
  explicit WorkerPool(int threads) : threads_(threads < 1 ? 1 : threads) {}
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // The most parts one Run executes at once (workers + the caller).
  int size() const { return threads_; }
  // Worker threads started so far (0 until a Run of more than one part).
  int started() const { return static_cast<int>(workers_.size()); }

  // Calls f(part) for part in [0, parts); parts in [0, size()] (more is
  // clamped to size(): the parts above are not run, so callers split their
  // work into at most size() parts).
  template <typename F>
  void Run(int parts, F&& f) {
    if (parts > threads_) parts = threads_;
    if (parts <= 1) {
      if (parts == 1) f(0);
      return;
    }
    Start();
    Ref<std::remove_reference_t<F>> ref(f);
    Dispatch(parts, ref);
  }

 private:
  // A non-owning callable reference: no allocation per Run.
  struct FnRef {
    virtual void operator()(int part) const = 0;

   protected:
    ~FnRef() = default;
  };
  template <typename F>
  struct Ref final : FnRef {
    explicit Ref(F& f) : f_(f) {}
    void operator()(int part) const override { f_(part); }
    F& f_;
  };

  void Start();  // the workers, once
  void StopWorkers();  // joins the workers started (the pool may start again)
  void Dispatch(int parts, const FnRef& fn);
  void Loop(int index);

  const int threads_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  std::vector<std::thread> workers_;
  const FnRef* fn_ = nullptr;
  int parts_ = 0;
  int pending_ = 0;
  unsigned long long generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace zen
