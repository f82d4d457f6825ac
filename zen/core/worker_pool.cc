// zen/core/worker_pool.cc — see worker_pool.h.
#include "zen/core/worker_pool.h"

#include <algorithm>
#include <system_error>
#include <thread>

#include "zen/core/error.h"

namespace zen {

WorkerPool::~WorkerPool() { StopWorkers(); }

void WorkerPool::Start() {
  if (!workers_.empty()) return;
  workers_.reserve(static_cast<size_t>(threads_ - 1));
  for (int i = 0; i + 1 < threads_; ++i) {
    try {
      workers_.emplace_back([this, i] { Loop(i); });
    } catch (const std::system_error& e) {
      // A pool with fewer workers than parts would wait for the missing
      // ones forever: stop those started and say why, naming the count.
      StopWorkers();
      throw InvalidArgument(Where{}, "cannot start worker thread ", i + 1, " of ", threads_ - 1,
                            " (threads ", threads_, "): ", e.what(), "; ask for fewer threads");
    }
  }
}

void WorkerPool::StopWorkers() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  start_.notify_all();
  for (std::thread& w : workers_) w.join();
  workers_.clear();
  std::lock_guard lock(mu_);
  stop_ = false;
}

void WorkerPool::Dispatch(int parts, const FnRef& fn) {
  {
    std::lock_guard lock(mu_);
    fn_ = &fn;
    parts_ = parts;
    pending_ = parts - 1;
    ++generation_;
  }
  start_.notify_all();
  std::exception_ptr mine;
  try {
    fn(parts - 1);  // the last part on the calling thread
  } catch (...) {
    mine = std::current_exception();
  }
  std::unique_lock lock(mu_);
  done_.wait(lock, [&] { return pending_ == 0; });
  fn_ = nullptr;
  std::exception_ptr theirs = std::exchange(error_, nullptr);
  lock.unlock();
  if (mine) std::rethrow_exception(mine);
  if (theirs) std::rethrow_exception(theirs);
}

void WorkerPool::Loop(int index) {
  unsigned long long seen = 0;
  std::unique_lock lock(mu_);
  for (;;) {
    start_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    if (index >= parts_ - 1) continue;  // not needed by this Run
    const FnRef* fn = fn_;
    lock.unlock();
    std::exception_ptr error;
    try {
      (*fn)(index);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error && !error_) error_ = error;
    if (--pending_ == 0) done_.notify_one();
  }
}

int EffectiveThreads(int threads) {
  if (threads > 0) return threads;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

int CheckedThreads(int threads, std::string_view what) {
  if (threads < 0 || threads > kMaxThreads) {
    throw InvalidArgument(Where{}, what, " ", threads, " is outside [0, ", kMaxThreads,
                          "] (0 = one per hardware thread)");
  }
  return EffectiveThreads(threads);
}

int ChunkCount(int threads, int64_t items, int64_t min_chunk) {
  const int64_t by_size = std::max<int64_t>(1, items / std::max<int64_t>(1, min_chunk));
  return static_cast<int>(std::min<int64_t>(std::max(1, EffectiveThreads(threads)), by_size));
}

}  // namespace zen
