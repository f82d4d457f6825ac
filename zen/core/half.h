// zen/core/half.h: 16-bit float formats for values on the wire.
//
// The conversions of the 16-bit dtypes (Widen / Narrow of Bfloat16 and
// Float16, zen/core/dtype.h) and of half-width wire values of float32
// tensors (SyncOptions::values, zen/schemes/scheme.h). These
// functions convert one value between float32 and the 16-bit bit patterns
// with round to nearest, ties to even, in portable integer arithmetic: no compiler
// `_Float16`/`__bf16` support is needed (clang on x86-64 lacks `_Float16`
// before version 15), so every build gives the same bits.
//
// Example:
//   uint16_t h = zen::FloatToHalfBits(0.1f);   // 0x2e66
//   float back = zen::HalfBitsToFloat(h);      // 0.0999755859375f
//
// NaN stays NaN (quieted), infinities stay infinities, float32 values beyond
// fp16's range become infinities, values below half of fp16's smallest
// subnormal become signed zeros.
#pragma once

#include <cstdint>
#include <cstring>

namespace zen {

// float32 -> bfloat16 bits (the upper half of the float32, rounded).
inline uint16_t FloatToBfloat16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

// bfloat16 bits -> float32 (exact).
inline float Bfloat16BitsToFloat(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// float32 -> IEEE binary16 bits.
inline uint16_t FloatToHalfBits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) {  // NaN: keep the top payload bits, set the quiet bit
    return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  }
  // 65520 (0x477ff000) is halfway between fp16's largest finite value 65504
  // and 65536; ties go to the even side, which is the infinity.
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (ax <= 0x33000000u) return static_cast<uint16_t>(sign);  // <= 2^-25: ties to 0
  if (ax < 0x38800000u) {  // below 2^-14: an fp16 subnormal, in units of 2^-24
    const uint32_t e = ax >> 23;                           // 102 .. 112
    const uint32_t m = (ax & 0x7fffffu) | 0x800000u;       // 24-bit significand
    const uint32_t shift = 126u - e;                       // 14 .. 24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;      // may carry into 0x400: fine
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = (ax - 0x38000000u) >> 13;  // rebias the exponent 127 -> 15
  const uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;  // carries stay below 0x7c00
  return static_cast<uint16_t>(sign | r);
}

// IEEE binary16 bits -> float32 (exact).
inline float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  const uint32_t m = h & 0x3ffu;
  uint32_t u;
  if (e == 0) {
    if (m == 0) {
      u = sign;
    } else {  // subnormal: m * 2^-24, exact in float32
      const float v = static_cast<float>(m) * 0x1p-24f;
      std::memcpy(&u, &v, sizeof(u));
      u |= sign;
    }
  } else if (e == 31) {
    u = sign | 0x7f800000u | (m << 13);
  } else {
    u = sign | ((e + 112u) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

}  // namespace zen
