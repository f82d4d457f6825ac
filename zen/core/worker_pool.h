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
// Beside it, what every object with a `threads` option shares: the option's
// check and resolution (CheckedThreads, at most kMaxThreads) and the split
// of [0, items) into contiguous chunks run on a pool (ParallelChunks).
//
// Usage:
//   zen::WorkerPool pool(4);
//   std::vector<int64_t> sums(4);
//   pool.Run(4, [&](int part) { sums[part] = SumOfChunk(part); });
//   const int threads = zen::CheckedThreads(options.threads, "topk: threads");
//   zen::ParallelChunks(pool, threads, rows, /*min_chunk=*/16384,
//                       [&](int chunk, int64_t begin, int64_t end) { Scan(begin, end); });
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string_view>
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

// 0 -> std::thread::hardware_concurrency() (at least 1); otherwise threads.
int EffectiveThreads(int threads);

// The most threads one object (a scheme, a partitioner, a top-k selector)
// may run: each is a kernel thread with its own stack, and a count far above
// the machine's cores is a mistake that would otherwise end in a bare
// "Resource temporarily unavailable" from the first parallel call.
inline constexpr int kMaxThreads = 1024;

// A `threads` option checked and resolved: 0 -> EffectiveThreads(0), else
// it must be in [1, kMaxThreads]; InvalidArgument naming `what` (the option,
// e.g. "zen: threads") and the value otherwise.
int CheckedThreads(int threads, std::string_view what);

// The number of chunks ParallelChunks would use.
int ChunkCount(int threads, int64_t items, int64_t min_chunk);

// Splits [0, items) into at most min(threads, pool.size()) contiguous
// chunks of at least min_chunk items (one chunk if items is small) and runs
// fn(chunk, begin, end) for each on the pool's persistent workers and the
// calling thread (no thread is created per call). Returns the number of
// chunks. fn must not throw. One chunk runs inline on the caller: no
// hand-over and no allocation (the steady state of small calls).
template <typename Fn>
int ParallelChunks(WorkerPool& pool, int threads, int64_t items, int64_t min_chunk, const Fn& fn) {
  const int chunks = ChunkCount(std::min(std::max(threads, 1), pool.size()), items, min_chunk);
  if (chunks == 1) {
    fn(0, int64_t{0}, items);
    return 1;
  }
  auto bounds = [&](int c) { return items * c / chunks; };
  pool.Run(chunks, [&](int c) { fn(c, bounds(c), bounds(c + 1)); });
  return chunks;
}

}  // namespace zen
