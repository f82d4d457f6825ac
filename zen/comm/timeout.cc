#include "zen/comm/timeout.h"

#include <algorithm>
#include <cmath>

#include "zen/core/error.h"

namespace zen {

using Millis = std::chrono::milliseconds;

void CheckTimeout(Millis timeout, const char* what, int rank) {
  if (timeout.count() <= 0 || timeout > kMaxTimeout) {
    throw InvalidArgument(Where{rank}, what, ": timeout ", timeout.count(),
                          " ms is outside (0, ", kMaxTimeout.count(), "] ms (30 days)");
  }
}

Millis TimeoutFromSeconds(double seconds, int rank) {
  if (std::isnan(seconds) || !(seconds > 0)) {
    throw InvalidArgument(Where{rank}, "timeout ", seconds, " s is not a positive number");
  }
  const double max_s = static_cast<double>(kMaxTimeout.count()) / 1000.0;
  if (seconds > max_s) {
    throw InvalidArgument(Where{rank}, "timeout ", seconds, " s is longer than the maximum of ",
                          max_s, " s (30 days)");
  }
  return Millis(std::max<int64_t>(1, static_cast<int64_t>(std::ceil(seconds * 1000.0))));
}

}  // namespace zen
