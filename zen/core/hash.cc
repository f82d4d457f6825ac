#include "zen/core/hash.h"

#include "zen/core/error.h"

namespace zen {
namespace {

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t DeriveSeed(uint64_t base, uint64_t i) {
  uint64_t state = base + i * 0x9E3779B97F4A7C15ULL;
  return SplitMix64(state);
}

UniversalHash::UniversalHash(uint64_t seed, int independence)
    : seed_(seed), independence_(independence) {
  if (independence < 2 || independence > kMaxIndependence) {
    throw InvalidArgument(Where{}, "UniversalHash: independence ", independence, " is outside [2, ",
                          kMaxIndependence, "]");
  }
  uint64_t state = seed;
  for (int i = 0; i < independence; ++i) {
    uint64_t c = 0;
    // Rejection keeps the draw uniform on Z_p (and the leading one non-zero).
    do {
      c = SplitMix64(state) >> 3;
    } while (c >= kHashPrime || (i == independence - 1 && c == 0));
    coeff_[static_cast<size_t>(i)] = c;
  }
}

ServerHash::ServerHash(uint64_t seed, int servers) : hash_(seed, 4), servers_(servers) {
  if (servers < 1) throw InvalidArgument(Where{}, "ServerHash: servers ", servers, " must be >= 1");
}

}  // namespace zen
