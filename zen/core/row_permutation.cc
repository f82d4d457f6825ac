#include "zen/core/row_permutation.h"

#include <algorithm>
#include <bit>

#include "zen/core/error.h"
#include "zen/core/hash.h"

namespace zen {

RowPermutation::RowPermutation(uint64_t seed, int64_t rows) : seed_(seed), rows_(rows) {
  if (rows < 1 || rows > kMaxPermutedRows) {
    throw InvalidArgument(Where{}, "row permutation: rows ", rows, " is outside [1, 2^62]");
  }
  const int k = std::max(2, static_cast<int>(std::bit_width(static_cast<uint64_t>(rows - 1))));
  hi_bits_ = (k + 1) / 2;
  lo_bits_ = k / 2;
  hi_shift_ = 64 - hi_bits_;
  lo_shift_ = 64 - lo_bits_;
  hi_mask_ = (uint64_t{1} << hi_bits_) - 1;
  lo_mask_ = (uint64_t{1} << lo_bits_) - 1;
  for (size_t i = 0; i < kRounds; ++i) {
    keys_[i] = DeriveSeed(seed ^ 0x9E3779B97F4A7C15ULL, i);
    muls_[i] = DeriveSeed(seed ^ 0xC2B2AE3D27D4EB4FULL, i) | 1;
  }
}

}  // namespace zen
