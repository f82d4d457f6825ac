// zen/comm/timeout.h — the one rule for the timeouts every transport and
// store takes: positive and at most kMaxTimeout (30 days), so deadline
// arithmetic on steady_clock never overflows.
//
// Usage:
//   std::chrono::milliseconds t = zen::TimeoutFromSeconds(seconds_from_user, rank);
//   zen::CheckTimeout(options.timeout, "ConnectGloo", rank);
#pragma once

#include <chrono>
#include <cstdint>

namespace zen {

// The longest timeout zen accepts: 30 days. Longer values (or 1e30 s from a
// user) would overflow clock arithmetic.
inline constexpr std::chrono::milliseconds kMaxTimeout{int64_t{30} * 24 * 3600 * 1000};

// Seconds (from a flag or Python) to milliseconds: InvalidArgument naming the
// value when it is NaN, not positive, or above kMaxTimeout; values between
// 0 and 1 ms round up to 1 ms.
std::chrono::milliseconds TimeoutFromSeconds(double seconds, int rank = -1);

// InvalidArgument unless 0 < timeout <= kMaxTimeout. `what` names the caller.
void CheckTimeout(std::chrono::milliseconds timeout, const char* what, int rank = -1);

// Milliseconds elapsed on the steady clock since `start` (what every wait
// compares with its timeout, and every timeout message reports).
inline std::chrono::milliseconds Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               start);
}

}  // namespace zen
