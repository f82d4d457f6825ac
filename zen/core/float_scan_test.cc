// Tests of float_scan.h against plain loops over the same floats.
#include "zen/core/float_scan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

namespace zen {
namespace {

// The values a gradient may hold where "zero" must be decided right.
std::vector<float> Specials() {
  return {0.0f,
          -0.0f,
          1e-45f,  // denormal
          -1e-45f,
          std::numeric_limits<float>::quiet_NaN(),
          -std::numeric_limits<float>::infinity(),
          1.0f,
          -3.5f};
}

// Rows of `width` floats, most of them zero (+0 or -0), some with one or a
// few non-zeros at their first, last or a random place.
std::vector<float> SparseRows(int64_t rows, int64_t width, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto specials = Specials();
  std::vector<float> d(static_cast<size_t>(rows * width), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = d.data() + r * width;
    const uint64_t pick = rng() % 16;
    if (pick == 0) row[rng() % static_cast<uint64_t>(width)] = -0.0f;  // still zero
    if (pick == 1) row[0] = specials[2 + rng() % 6];
    if (pick == 2) row[width - 1] = specials[2 + rng() % 6];
    if (pick == 3) {
      for (int k = 0; k < 3; ++k) row[rng() % static_cast<uint64_t>(width)] = specials[rng() % 8];
    }
  }
  return d;
}

std::vector<int64_t> ReferenceRows(const std::vector<float>& d, int64_t width, int64_t begin,
                                   int64_t end) {
  std::vector<int64_t> out;
  for (int64_t r = begin; r < end; ++r) {
    for (int64_t k = 0; k < width; ++k) {
      if (d[static_cast<size_t>(r * width + k)] != 0.0f) {
        out.push_back(r);
        break;
      }
    }
  }
  return out;
}

TEST(FloatScan, ForEachNonZeroRowMatchesAPlainLoop) {
  // Widths that divide 64 (block masks) and that do not (row by row, 64
  // floats at a time inside wide rows); ranges not aligned to blocks.
  for (int64_t width : {1, 2, 3, 4, 5, 8, 16, 32, 63, 64, 65, 100, 128, 768}) {
    const int64_t rows = 1 + 20'000 / width;
    const auto d = SparseRows(rows, width, static_cast<uint64_t>(width));
    for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, rows}, {1, rows - 1},
                              {rows / 3, std::min(rows, rows / 3 + 37)}, {5, 5}}) {
      SCOPED_TRACE(testing::Message() << "width " << width << " rows [" << begin << ", " << end
                                      << ")");
      std::vector<int64_t> got;
      ForEachNonZeroRow(d.data(), width, begin, end, [&](int64_t r) { got.push_back(r); });
      EXPECT_EQ(got, ReferenceRows(d, width, begin, end));
    }
  }
}

TEST(FloatScan, RowIsNonZeroMatchesAPlainLoop) {
  for (int64_t width : {1, 7, 63, 64, 65, 129, 1000}) {
    const auto d = SparseRows(300, width, 100 + static_cast<uint64_t>(width));
    const auto want = ReferenceRows(d, width, 0, 300);
    std::vector<int64_t> got;
    for (int64_t r = 0; r < 300; ++r) {
      if (RowIsNonZero(d.data() + r * width, width)) got.push_back(r);
    }
    EXPECT_EQ(got, want) << "width " << width;
  }
}

TEST(FloatScan, MasksOfOneBlock) {
  std::mt19937_64 rng(7);
  const auto specials = Specials();
  for (int trial = 0; trial < 2000; ++trial) {
    float block[64];
    // A value is drawn from Specials() never, 1 in 16, 1 in 2 or always;
    // else it is +0 or -0.
    const uint64_t one_in = std::vector<uint64_t>{0, 16, 2, 1}[rng() % 4];
    for (float& x : block) {
      const bool special = one_in != 0 && rng() % one_in == 0;
      x = special ? specials[rng() % 8] : (rng() % 2 ? 0.0f : -0.0f);
    }
    uint64_t nonzero = 0;
    for (int i = 0; i < 64; ++i) nonzero |= static_cast<uint64_t>(block[i] != 0.0f) << i;
    ASSERT_EQ(NonZeroMask64(block), nonzero) << "trial " << trial;
    ASSERT_EQ(AnyNonZero64(block), nonzero != 0) << "trial " << trial;
    // Thresholds: none, every key, a key present, just above it, NaN's key,
    // and above every key.
    const uint32_t present = FloatKey(block[rng() % 16]);
    for (uint32_t low : {0u, 1u, present, present + 1, 0x7FC00000u, 0x80000000u, 0xFFFFFFFFu}) {
      uint32_t want = 0;
      for (int j = 0; j < 16; ++j) want |= static_cast<uint32_t>(FloatKey(block[j]) >= low) << j;
      ASSERT_EQ(KeysAtLeast16(block, low), want) << "trial " << trial << " low " << low;
    }
  }
}

TEST(RowIsNonZero, ZeroSignAndNaN) {
  const float neg_zero[2] = {-0.0f, 0.0f};
  const float nan[2] = {0.0f, std::numeric_limits<float>::quiet_NaN()};
  const float tiny[1] = {1e-40f};
  EXPECT_FALSE(RowIsNonZero(neg_zero, 2));
  EXPECT_TRUE(RowIsNonZero(nan, 2));
  EXPECT_TRUE(RowIsNonZero(tiny, 1));
}

}  // namespace
}  // namespace zen
