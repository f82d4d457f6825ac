#include "zen/core/row_permutation.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "zen/core/error.h"
#include "zen/core/hash.h"

namespace zen {
namespace {

// The network (or its inverse) over the key field of every word, sixteen
// words at a time (NetworkWords below). A result that falls outside
// [0, rows) walks its cycle on: it is applied the network again until it
// lands inside. Such results are common (the network permutes [0, 2^k),
// 2^k the power of two at or above rows: 32% of them for rows 714,120,
// half for rows just above a power of two), so they are not walked one at a
// time: each block's out-of-range results are collected and the network is
// applied to them again, sixteen at a time, until none is left (about
// 1 / (rows / 2^k) passes over a block in all, instead of a scalar walk for
// most groups of sixteen). Half-round i of the forward network xors hi with
// F_i(lo) (i even) or lo with F_i(hi) (i odd); the inverse runs the same
// half-rounds from the last to the first. The direction is a template
// argument so that each body unrolls with its half-rounds fixed (a run-time
// direction measured 1.7x slower).
struct NetworkParams {
  const RowPermutation* perm;  // its scalar form, for the last words
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
// form). Four vectors of four words per group, each half-round applied to
// all four before the next, so that four chains of dependent multiplies
// are in flight.
constexpr size_t kWidth = 4, kVecs = 4, kLanes = kVecs * kWidth;
// Words per block whose out-of-range results are collected (on the stack).
constexpr size_t kBlock = 1024;

// The rounds of one pass of the network (no cycle walk) over the halves of
// kVecs values: T is U64x4 (a group of sixteen keys) or uint64_t (single
// keys); the same operations either way.
template <bool kInverse, typename T>
inline __attribute__((always_inline)) void Rounds(T (&hi)[kVecs], T (&lo)[kVecs],
                                                  const NetworkParams& p) {
  constexpr size_t kRounds = RowPermutation::kRounds;
  const int hi_shift = p.hi_shift, lo_shift = p.lo_shift;
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
}

// One pass over keys[0, n) (no cycle walk), sixteen at a time.
template <bool kInverse>
inline __attribute__((always_inline)) void PassKeys(uint64_t* keys, size_t n,
                                                    const NetworkParams& p) {
  const int lo_bits = p.lo_bits;
  const uint64_t lo_mask = p.lo_mask;
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    U64x4 hi[kVecs], lo[kVecs];
    for (size_t v = 0; v < kVecs; ++v) {
      U64x4 x;
      std::memcpy(&x, keys + i + v * kWidth, sizeof(x));
      hi[v] = x >> lo_bits;
      lo[v] = x & lo_mask;
    }
    Rounds<kInverse>(hi, lo, p);
    for (size_t v = 0; v < kVecs; ++v) {
      const U64x4 x = (hi[v] << lo_bits) | lo[v];
      std::memcpy(keys + i + v * kWidth, &x, sizeof(x));
    }
  }
  for (; i < n; i += kVecs) {  // the last ones, up to four at a time
    const size_t m = std::min(kVecs, n - i);
    uint64_t hi[kVecs] = {}, lo[kVecs] = {};
    for (size_t v = 0; v < m; ++v) {
      hi[v] = keys[i + v] >> lo_bits;
      lo[v] = keys[i + v] & lo_mask;
    }
    Rounds<kInverse>(hi, lo, p);
    for (size_t v = 0; v < m; ++v) keys[i + v] = (hi[v] << lo_bits) | lo[v];
  }
}

template <bool kInverse>
inline __attribute__((always_inline)) void NetworkWords(uint64_t* words, size_t count,
                                                        const NetworkParams& p) {
  const uint64_t low_mask = p.shift == 0 ? 0 : (uint64_t{1} << p.shift) - 1;
  const int shift = p.shift, lo_bits = p.lo_bits;
  const uint64_t lo_mask = p.lo_mask, rows = p.rows;
  auto put = [&](uint64_t* w, uint64_t key) { *w = (key << shift) | (*w & low_mask); };
  // A block's words whose result is still outside [0, rows): that result
  // (the next pass starts from it) and the word's index in the block.
  uint64_t pending_key[kBlock];
  uint32_t pending_at[kBlock];
  size_t i0 = 0;
  for (; i0 + kLanes <= count; i0 += kBlock) {
    const size_t block = std::min(kBlock, (count - i0) / kLanes * kLanes);
    uint64_t* b = words + i0;
    size_t pending = 0;
    for (size_t g = 0; g < block; g += kLanes) {
      U64x4 hi[kVecs], lo[kVecs];
      for (size_t v = 0; v < kVecs; ++v) {
        U64x4 x;
        std::memcpy(&x, b + g + v * kWidth, sizeof(x));
        x >>= shift;
        hi[v] = x >> lo_bits;
        lo[v] = x & lo_mask;
      }
      Rounds<kInverse>(hi, lo, p);
      for (size_t v = 0; v < kVecs; ++v) {
        const U64x4 x = (hi[v] << lo_bits) | lo[v];
        const U64x4 out = x >= rows;
        if ((out[0] | out[1] | out[2] | out[3]) != 0) {
          for (size_t l = 0; l < kWidth; ++l) {
            pending_key[pending] = x[l];
            pending_at[pending] = static_cast<uint32_t>(g + v * kWidth + l);
            pending += out[l] != 0;
          }
        }
        uint64_t* w = b + g + v * kWidth;
        U64x4 old;
        std::memcpy(&old, w, sizeof(old));
        const U64x4 y = (x << shift) | (old & low_mask);
        std::memcpy(w, &y, sizeof(y));
      }
    }
    // The cycle walks: every pending result is written back (the last
    // write, once it is inside, is the answer) and kept while still out.
    while (pending > 0) {
      PassKeys<kInverse>(pending_key, pending, p);
      size_t left = 0;
      for (size_t j = 0; j < pending; ++j) {
        const uint64_t k = pending_key[j];
        const uint32_t at = pending_at[j];
        put(b + at, k);
        pending_key[left] = k;
        pending_at[left] = at;
        left += k >= rows;
      }
      pending = left;
    }
    if (block < kBlock) {
      i0 += block;
      break;
    }
  }
  for (; i0 < count; ++i0) {  // the last words, one at a time
    const uint64_t key = words[i0] >> shift;
    put(words + i0,
        static_cast<uint64_t>(kInverse ? p.perm->Inverse(static_cast<int64_t>(key))
                                       : (*p.perm)(static_cast<int64_t>(key))));
  }
}

// (Not under ThreadSanitizer: see CountBits in zen/schemes/zen/row_codec.cc.)
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__)
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
