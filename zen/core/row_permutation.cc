#include "zen/core/row_permutation.h"

#include <algorithm>
#include <bit>

#include "zen/core/error.h"
#include "zen/core/hash.h"

namespace zen {
namespace {

// The network (or its inverse) over the key field of every word, eight
// words at a time so that eight independent multiply chains are in flight;
// a result that falls outside [0, rows) walks its cycle on (rare: fewer than
// half of them, none when rows is a power of two). Half-round t of the
// forward network xors hi with F_t(lo) (t even) or lo with F_t(hi) (t odd);
// the inverse runs the same half-rounds from the last to the first.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx2", "default")))
#endif
void NetworkWords(uint64_t* words, size_t count, int shift, uint64_t rows, const uint64_t* keys,
                  const uint64_t* muls, int lo_bits, uint64_t lo_mask, int lo_shift,
                  int hi_shift, bool inverse) {
  constexpr size_t kLanes = 8;
  constexpr size_t kRounds = RowPermutation::kRounds;
  const uint64_t low_mask = shift == 0 ? 0 : (uint64_t{1} << shift) - 1;
  auto one = [&](uint64_t x) {
    uint64_t hi = x >> lo_bits, lo = x & lo_mask;
    for (size_t t = 0; t < kRounds; ++t) {
      const size_t i = inverse ? kRounds - 1 - t : t;
      if (i % 2 == 0) {
        hi ^= ((lo ^ keys[i]) * muls[i]) >> hi_shift;
      } else {
        lo ^= ((hi ^ keys[i]) * muls[i]) >> lo_shift;
      }
    }
    return (hi << lo_bits) | lo;
  };
  for (size_t i0 = 0; i0 < count; i0 += kLanes) {
    const size_t lanes = count - i0 < kLanes ? count - i0 : kLanes;
    uint64_t hi[kLanes] = {}, lo[kLanes] = {};
    for (size_t l = 0; l < lanes; ++l) {
      const uint64_t x = words[i0 + l] >> shift;
      hi[l] = x >> lo_bits;
      lo[l] = x & lo_mask;
    }
    for (size_t t = 0; t < kRounds; ++t) {
      const size_t i = inverse ? kRounds - 1 - t : t;
      if (i % 2 == 0) {
        for (size_t l = 0; l < kLanes; ++l) hi[l] ^= ((lo[l] ^ keys[i]) * muls[i]) >> hi_shift;
      } else {
        for (size_t l = 0; l < kLanes; ++l) lo[l] ^= ((hi[l] ^ keys[i]) * muls[i]) >> lo_shift;
      }
    }
    for (size_t l = 0; l < lanes; ++l) {
      uint64_t x = (hi[l] << lo_bits) | lo[l];
      while (x >= rows) x = one(x);  // cycle walking
      words[i0 + l] = x << shift | (words[i0 + l] & low_mask);
    }
  }
}

}  // namespace

void RowPermutation::InverseInPlace(std::span<uint64_t> words, int shift) const {
  NetworkWords(words.data(), words.size(), shift, static_cast<uint64_t>(rows_), keys_.data(),
               muls_.data(), lo_bits_, lo_mask_, lo_shift_, hi_shift_, /*inverse=*/true);
}

void RowPermutation::ForwardInPlace(std::span<uint64_t> words, int shift) const {
  NetworkWords(words.data(), words.size(), shift, static_cast<uint64_t>(rows_), keys_.data(),
               muls_.data(), lo_bits_, lo_mask_, lo_shift_, hi_shift_, /*inverse=*/false);
}

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
