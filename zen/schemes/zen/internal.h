// zen/schemes/zen/internal.h — what the files of ZEN's scheme share and
// nobody else uses: timing, the communicator's byte counters per phase,
// the receive bounds of the two rounds, the grouped pull's slots, the
// holder of a call's options and dtype, and the value types the scheme's
// templated phases are instantiated for. Not installed for users: include
// zen.h.
//
// Usage (inside zen/schemes/zen/*.cc):
//   const auto t0 = zen_internal::Clock::now();
//   const zen_internal::Snapshot before = zen_internal::Take(comm);
//   stats_.push_seconds = zen_internal::Since(t0);
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "zen/comm/collectives.h"
#include "zen/core/checked.h"
#include "zen/core/dtype.h"
#include "zen/core/error.h"
#include "zen/schemes/scheme.h"
#include "zen/schemes/zen/partitioner.h"
#include "zen/schemes/zen/row_codec.h"

namespace zen::zen_internal {

using Clock = std::chrono::steady_clock;

inline double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Counter totals at one instant, for per-phase differences.
struct Snapshot {
  uint64_t sent = 0;
  uint64_t recv = 0;
};
inline Snapshot Take(const Communicator& comm) {
  return {comm.counters().total_sent(), comm.counters().total_recv()};
}

// The templated phases (partition.cc, push.cc, aggregate.cc, exchange.cc,
// result.cc) are instantiated for every value type of
// ZEN_FOR_EACH_VALUE_TYPE (zen/core/dtype.h): zen sums every dtype, so a
// new one needs no line here (kZenCapabilities declares DTypeSet::All()).

// The largest message a peer may announce: a COO message of `count` rows
// of `value_bytes`-byte values (a full bitmap is smaller); saturates
// instead of overflowing.
inline int64_t CooBound(int64_t count, int64_t width, size_t value_bytes) {
  size_t rows_bytes = 0, total = 0, row_values = 0, row_bytes = 0;
  if (!TryMul(static_cast<size_t>(width), value_bytes, row_values) ||
      !TryAdd(row_values, sizeof(int64_t), row_bytes) ||
      !TryMul(static_cast<size_t>(count), row_bytes, rows_bytes) ||
      !TryAdd(rows_bytes, kRowHeaderBytes, total) || total > static_cast<size_t>(kAnyBytes)) {
    return kAnyBytes;
  }
  return static_cast<int64_t>(total);
}

// The largest pull window of wide rows: a COO message of `count` rows plus
// a grouped pull's n - 1 more headers and every message's padding;
// saturates.
inline int64_t WindowBound(int64_t count, int64_t width, size_t value_bytes, int n) {
  const int64_t coo = CooBound(count, width, value_bytes);
  const int64_t extra = static_cast<int64_t>(n) * (static_cast<int64_t>(kRowHeaderBytes) + 8);
  return coo > kAnyBytes - extra ? kAnyBytes : coo + extra;
}

// A grouped pull's message slots (zen.h): slot m < n holds the sole rows of
// rank m (class 1 + m), slot n the shared rows (class 0).
inline size_t SlotClass(size_t slot, size_t n) { return slot == n ? 0 : slot + 1; }
inline size_t ClassSlot(size_t c, size_t n) { return c == 0 ? n : c - 1; }

// A message with no bytes is how a peer says it failed in this call (every
// real push or pull message has at least its header).
inline void CheckNotFailed(const ByteBuffer& message, const char* round, int peer,
                           const Where& where) {
  if (message.empty()) {
    throw FormatError(where, "zen: rank ", peer, " failed during this call (its ", round,
                      " message is empty); its own error names the cause");
  }
}

// Holds a call's options and its values' dtype in ZenScheme::call_ and
// call_dtype_ for the call's duration (the sum order's steps are the
// caller's memory: not kept past the call).
class CallScope {
 public:
  CallScope(SyncOptions& held, const SyncOptions& options, DType& held_dtype, DType dtype)
      : held_(held), held_dtype_(held_dtype) {
    held_ = options;
    held_dtype_ = dtype;
  }
  ~CallScope() {
    held_ = SyncOptions{};
    held_dtype_ = DType::kFloat32;
  }
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;

 private:
  SyncOptions& held_;
  DType& held_dtype_;
};

}  // namespace zen::zen_internal
