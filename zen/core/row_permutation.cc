#include "zen/core/row_permutation.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "zen/core/error.h"
#include "zen/core/hash.h"

namespace zen {
namespace {

// The network (or its inverse) over the key field of every word, sixteen
// words at a time (NetworkWords below); a result that falls outside
// [0, rows) walks its cycle on (rare: fewer than half of them, none when
// rows is a power of two). Half-round i of the
// forward network xors hi with F_i(lo) (i even) or lo with F_i(hi) (i odd);
// the inverse runs the same half-rounds from the last to the first. The
// direction is a template argument so that each body unrolls with its
// half-rounds fixed (a run-time direction measured 1.7x slower).
struct NetworkParams {
  const RowPermutation* perm;  // its scalar form, for the last words and cycle walks
  int shift;
  uint64_t rows;
  const uint64_t* keys;
  const uint64_t* muls;
  int lo_bits;
  uint64_t lo_mask;
  int lo_shift;
  int hi_shift;
};

typedef uint64_t U64x4 __attribute__((vector_size(32)));

// Written with GCC/Clang vector types: the compiler did not vectorize the
// lane loops of plain arrays (their shifts are by a run-time count), and
// AVX2, which has no 64-bit lane multiply, multiplies four lanes with a
// few 32-bit multiplies (exactly: the product mod 2^64, as the scalar
// form). Four vectors of four words per group, so that four chains of
// dependent multiplies are in flight.
template <bool kInverse>
inline __attribute__((always_inline)) void NetworkWords(uint64_t* words, size_t count,
                                                        const NetworkParams& p) {
  constexpr size_t kRounds = RowPermutation::kRounds;
  constexpr size_t kVecs = 4, kWidth = 4, kLanes = kVecs * kWidth;
  const uint64_t low_mask = p.shift == 0 ? 0 : (uint64_t{1} << p.shift) - 1;
  const int shift = p.shift, lo_bits = p.lo_bits, hi_shift = p.hi_shift, lo_shift = p.lo_shift;
  const uint64_t lo_mask = p.lo_mask, rows = p.rows;
  // The scalar permutation: applies the network until the value is below
  // rows, so started from a value the batched pass left at or above rows it
  // finishes that value's cycle walk.
  auto scalar = [&p](uint64_t x) {
    const auto v = static_cast<int64_t>(x);
    return static_cast<uint64_t>(kInverse ? p.perm->Inverse(v) : (*p.perm)(v));
  };
  size_t i0 = 0;
  for (; i0 + kLanes <= count; i0 += kLanes) {
    U64x4 hi[kVecs], lo[kVecs];
    for (size_t v = 0; v < kVecs; ++v) {
      U64x4 x;
      std::memcpy(&x, words + i0 + v * kWidth, sizeof(x));
      x >>= shift;
      hi[v] = x >> lo_bits;
      lo[v] = x & lo_mask;
    }
    // hi ^= F_i(lo), lo ^= F_i(hi), over all lanes.
    auto mix_hi = [&](size_t i) {
      for (size_t v = 0; v < kVecs; ++v) hi[v] ^= ((lo[v] ^ p.keys[i]) * p.muls[i]) >> hi_shift;
    };
    auto mix_lo = [&](size_t i) {
      for (size_t v = 0; v < kVecs; ++v) lo[v] ^= ((hi[v] ^ p.keys[i]) * p.muls[i]) >> lo_shift;
    };
    if constexpr (kInverse) {
      for (size_t i = kRounds; i >= 2; i -= 2) {
        mix_lo(i - 1);
        mix_hi(i - 2);
      }
    } else {
      for (size_t i = 0; i < kRounds; i += 2) {
        mix_hi(i);
        mix_lo(i + 1);
      }
    }
    for (size_t v = 0; v < kVecs; ++v) {
      U64x4 x = (hi[v] << lo_bits) | lo[v];
      const U64x4 out = x >= rows;  // cycle walking (rare)
      if ((out[0] | out[1] | out[2] | out[3]) != 0) {
        for (size_t l = 0; l < kWidth; ++l) {
          if (x[l] >= rows) x[l] = scalar(x[l]);
        }
      }
      uint64_t* w = words + i0 + v * kWidth;
      U64x4 old;
      std::memcpy(&old, w, sizeof(old));
      x = (x << shift) | (old & low_mask);
      std::memcpy(w, &x, sizeof(x));
    }
  }
  for (; i0 < count; ++i0) {  // the last words, one at a time
    words[i0] = scalar(words[i0] >> p.shift) << p.shift | (words[i0] & low_mask);
  }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define ZEN_AVX2_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define ZEN_AVX2_CLONES
#endif

ZEN_AVX2_CLONES void InverseWords(uint64_t* words, size_t count, const NetworkParams& p) {
  NetworkWords<true>(words, count, p);
}

ZEN_AVX2_CLONES void ForwardWords(uint64_t* words, size_t count, const NetworkParams& p) {
  NetworkWords<false>(words, count, p);
}

}  // namespace

void RowPermutation::InverseInPlace(std::span<uint64_t> words, int shift) const {
  InverseWords(words.data(), words.size(),
               {this, shift, static_cast<uint64_t>(rows_), keys_.data(), muls_.data(), lo_bits_,
                lo_mask_, lo_shift_, hi_shift_});
}

void RowPermutation::ForwardInPlace(std::span<uint64_t> words, int shift) const {
  ForwardWords(words.data(), words.size(),
               {this, shift, static_cast<uint64_t>(rows_), keys_.data(), muls_.data(), lo_bits_,
                lo_mask_, lo_shift_, hi_shift_});
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
