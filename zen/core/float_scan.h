// zen/core/float_scan.h — tests over short runs of floats for the passes that
// look for the few values that matter in a large buffer: the non-zero rows of
// a dense gradient bucket (ForEachNonZeroRow below: the partitioners'
// extraction, SparseTensor::FromDense) and the values above a top-k
// threshold (topk.cc). Each reads a fixed block with SSE2 (every
// x86-64 has it; a scalar loop elsewhere) and answers with a bit mask, so a
// pass skips a block that holds nothing in a few instructions and visits
// only the set bits of one that does. GCC did not vectorize the plain loops
// these replace (a compare per float and a branch or cmov: 2.7x the time of
// a memcpy of the buffer for a 4M-float bucket at 0.1% non-zeros).
//
// Usage:
//   zen::ForEachNonZeroRow(bucket, width, 0, rows, [&](int64_t r) { take(r); });
//
//   for (int64_t i = 0; i + 64 <= n; i += 64) {   // the blocks themselves
//     if (!zen::AnyNonZero64(data + i)) continue;          // 64 zeros: skip
//     for (uint64_t m = zen::NonZeroMask64(data + i); m; m &= m - 1)
//       visit(i + std::countr_zero(m));
//   }
//
// RowIsNonZero and ForEachNonZeroRow take every value type (dtype.h): the
// float32 ones are the SSE2 blocks, the others a row at a time.
//
// "Non-zero" is a bit pattern other than +0 and -0 (NaN and denormals are
// non-zero), as `x != 0.0f`. A key is a float's bit pattern without the sign
// (|x| as an integer: its order is |x|'s, NaN above +inf).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "zen/core/dtype.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace zen {

inline uint32_t FloatKey(float x) { return std::bit_cast<uint32_t>(x) & 0x7FFFFFFFu; }

// Whether any of the 64 floats at p is non-zero.
inline bool AnyNonZero64(const float* p) {
#if defined(__SSE2__)
  __m128i acc = _mm_setzero_si128();
  for (int v = 0; v < 16; ++v) {
    acc = _mm_or_si128(acc, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 4 * v)));
  }
  acc = _mm_and_si128(acc, _mm_set1_epi32(0x7FFFFFFF));
  return _mm_movemask_epi8(_mm_cmpeq_epi32(acc, _mm_setzero_si128())) != 0xFFFF;
#else
  uint32_t acc = 0;
  for (int i = 0; i < 64; ++i) acc |= FloatKey(p[i]);
  return acc != 0;
#endif
}

// Bit i set: p[i] is non-zero (i < 64).
inline uint64_t NonZeroMask64(const float* p) {
#if defined(__SSE2__)
  const __m128i abs = _mm_set1_epi32(0x7FFFFFFF);
  const __m128i zero = _mm_setzero_si128();
  uint64_t mask = 0;
  for (int v = 0; v < 16; ++v) {
    const __m128i x =
        _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 4 * v)), abs);
    const int is_zero = _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(x, zero)));
    mask |= static_cast<uint64_t>(~is_zero & 0xF) << (4 * v);
  }
  return mask;
#else
  uint64_t mask = 0;
  for (int i = 0; i < 64; ++i) mask |= static_cast<uint64_t>(FloatKey(p[i]) != 0) << i;
  return mask;
#endif
}

// Bit j set: the key of p[j] is at least `low` (j < 16).
inline uint32_t KeysAtLeast16(const float* p, uint32_t low) {
  if (low == 0) return 0xFFFF;
  if (low > 0x7FFFFFFFu) return 0;  // above every key
#if defined(__SSE2__)
  // Keys are below 2^31, so SSE2's signed compare is exact.
  const __m128i abs = _mm_set1_epi32(0x7FFFFFFF);
  const __m128i below = _mm_set1_epi32(static_cast<int32_t>(low - 1));
  uint32_t mask = 0;
  for (int v = 0; v < 4; ++v) {
    const __m128i x =
        _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 4 * v)), abs);
    const int m = _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpgt_epi32(x, below)));
    mask |= static_cast<uint32_t>(m) << (4 * v);
  }
  return mask;
#else
  uint32_t mask = 0;
  for (int j = 0; j < 16; ++j) mask |= static_cast<uint32_t>(FloatKey(p[j]) >= low) << j;
  return mask;
#endif
}

// True if any of the width floats at row is non-zero (-0.0 counts as zero).
inline bool RowIsNonZero(const float* row, int64_t width) {
  int64_t i = 0;
  for (; i + 64 <= width; i += 64) {
    if (AnyNonZero64(row + i)) return true;
  }
  for (; i < width; ++i) {
    if (FloatKey(row[i]) != 0) return true;
  }
  return false;
}

// Calls fn(r) for every non-zero row r in [begin, end) of dense (row-major,
// `width` floats per row), in ascending order. Where width divides 64, 64
// floats are tested at once (float_scan.h): a block of zeros costs a few
// instructions and a block with non-zeros yields its rows from one bit mask.
// Other widths test row by row (64 floats at a time within a row).
template <typename Fn>
void ForEachNonZeroRow(const float* dense, int64_t width, int64_t begin, int64_t end, Fn&& fn) {
  constexpr int64_t kBlock = 64;  // floats tested at once
  int64_t r = begin;
  if (width <= kBlock && kBlock % width == 0) {
    const int64_t rows_per_block = kBlock / width;
    // A row's bits in the block's mask (width <= 64 bits).
    const uint64_t row_bits = width == 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1;
    for (; r + rows_per_block <= end; r += rows_per_block) {
      const float* p = dense + r * width;
      if (!AnyNonZero64(p)) continue;
      uint64_t mask = NonZeroMask64(p);
      while (mask != 0) {
        // The row of the lowest non-zero float; then past its bits.
        const int64_t k = std::countr_zero(mask) / width;
        fn(r + k);
        mask &= ~(row_bits << (k * width));
      }
    }
  }
  for (; r < end; ++r) {
    if (RowIsNonZero(dense + r * width, width)) fn(r);
  }
}

// The float64 forms: a double's bits without the sign are 0 only for +-0.0.
inline uint64_t DoubleKey(double x) {
  return std::bit_cast<uint64_t>(x) & 0x7FFFFFFFFFFFFFFFull;
}
inline bool RowIsNonZero(const double* row, int64_t width) {
  uint64_t any = 0;
  for (int64_t i = 0; i < width; ++i) any |= DoubleKey(row[i]);
  return any != 0;
}
// The 16-bit forms (bfloat16, float16; dtype.h): a value is zero when its
// widened value is (+0 and -0); one OR over the row, no branch per value.
template <typename T>
  requires(std::is_same_v<AccumOf<T>, float> && !std::is_same_v<T, float>)
bool RowIsNonZero(const T* row, int64_t width) {
  bool any = false;
  for (int64_t i = 0; i < width; ++i) any |= Widen(row[i]) != 0.0f;
  return any;
}
// ForEachNonZeroRow over rows of any value type but float: row by row, one
// OR per row (no branch per value).
template <typename T, typename Fn>
void ForEachNonZeroRow(const T* dense, int64_t width, int64_t begin, int64_t end, Fn&& fn) {
  for (int64_t r = begin; r < end; ++r) {
    if (RowIsNonZero(dense + r * width, width)) fn(r);
  }
}

}  // namespace zen
