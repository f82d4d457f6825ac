#include "zen/core/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace zen {
namespace {

// Independent reference: decode fp16 bits with ldexp from the format's
// definition, and round a float to the nearest of those values (ties to the
// even bit pattern) by search over the sorted table of all finite halves.
double RefDecode(uint16_t h) {
  const int sign = (h & 0x8000) ? -1 : 1;
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  if (e == 0) return sign * std::ldexp(static_cast<double>(m), -24);
  if (e == 31) return m ? std::numeric_limits<double>::quiet_NaN()
                        : sign * std::numeric_limits<double>::infinity();
  return sign * std::ldexp(1.0 + m / 1024.0, e - 15);
}

uint16_t RefEncode(float f) {
  const double x = f;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(x);
  // Positive finite halves 0x0000..0x7bff are increasing in their bits.
  const double max = RefDecode(0x7bff);
  const double next = 65536.0;  // where 0x7c00 would be if it were finite
  if (a >= (max + next) / 2) return sign | 0x7c00;
  uint16_t lo = 0, hi = 0x7bff;
  while (lo < hi) {  // first half >= a
    const uint16_t mid = static_cast<uint16_t>((lo + hi) / 2);
    if (RefDecode(mid) < a) lo = static_cast<uint16_t>(mid + 1); else hi = mid;
  }
  uint16_t best = lo;
  if (lo > 0) {
    const double up = RefDecode(lo) - a, down = a - RefDecode(static_cast<uint16_t>(lo - 1));
    if (down < up || (down == up && ((lo - 1) & 1) == 0)) best = static_cast<uint16_t>(lo - 1);
  }
  return sign | best;
}

float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
uint32_t FloatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

TEST(Half, DecodesEveryBitPatternLikeTheDefinition) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const double want = RefDecode(static_cast<uint16_t>(h));
    const float got = HalfBitsToFloat(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << h;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << std::hex << h;
      EXPECT_EQ(std::signbit(got), (h & 0x8000) != 0) << std::hex << h;
    }
  }
}

TEST(Half, RoundsToNearestEvenAroundEveryValueAndMidpoint) {
  std::vector<float> probes;
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const double v = RefDecode(static_cast<uint16_t>(h));
    const double next = h == 0x7bff ? 65536.0 : RefDecode(static_cast<uint16_t>(h + 1));
    for (double x : {v, (v + next) / 2}) {
      const float f = static_cast<float>(x);  // all exact in float32
      const uint32_t b = FloatToBits(f);
      for (uint32_t d : {0u, 1u}) {
        probes.push_back(BitsToFloat(b + d));
        if (b >= d) probes.push_back(BitsToFloat(b - d));
      }
    }
  }
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any(0, 0x7f7fffffu);
  for (int i = 0; i < 200000; ++i) probes.push_back(BitsToFloat(any(rng)));
  for (float p : {0.0f, 1e-30f, 1e30f, std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min()}) {
    probes.push_back(p);
  }
  for (float p : probes) {
    for (float s : {p, -p}) {
      ASSERT_EQ(FloatToHalfBits(s), RefEncode(s)) << std::hexfloat << s;
    }
  }
}

TEST(Half, NanStaysNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(HalfBitsToFloat(FloatToHalfBits(nan))));
  EXPECT_TRUE(std::isnan(HalfBitsToFloat(FloatToHalfBits(-nan))));
  EXPECT_TRUE(std::isnan(HalfBitsToFloat(FloatToHalfBits(BitsToFloat(0x7f800001u)))));  // low payload
  EXPECT_TRUE(std::isnan(Bfloat16BitsToFloat(FloatToBfloat16Bits(BitsToFloat(0x7f800001u)))));
}

TEST(Bfloat16, IsTheRoundedUpperHalfOfFloat32) {
  // Independent reference: bfloat16 values are the floats whose low 16 bits
  // are zero; the nearest one (ties to even upper half) by comparing doubles.
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> any(0, 0xffffffffu);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t b = any(rng);
    const float f = BitsToFloat(b);
    if (std::isnan(f)) continue;
    const uint32_t down = b & 0xffff0000u, up = down + 0x10000u;
    uint16_t want;
    if ((b & 0xffffu) == 0) {
      want = static_cast<uint16_t>(b >> 16);
    } else {
      const double lo = BitsToFloat(down);
      const double hi = ((up & 0x7f800000u) == 0x7f800000u && (up & 0x7fffffu) == 0)
                            ? std::copysign(std::ldexp(1.0, 128), f)  // next is infinity
                            : static_cast<double>(BitsToFloat(up));
      const double dl = std::fabs(f - lo), dh = std::fabs(hi - f);
      want = static_cast<uint16_t>((dl < dh || (dl == dh && ((down >> 16) & 1u) == 0)) ? down >> 16
                                                                                       : up >> 16);
    }
    ASSERT_EQ(FloatToBfloat16Bits(f), want) << std::hex << b;
    ASSERT_EQ(FloatToBits(Bfloat16BitsToFloat(want)), static_cast<uint32_t>(want) << 16);
  }
}

}  // namespace
}  // namespace zen
