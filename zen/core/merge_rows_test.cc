// The row kernels of merge_rows.h that ZEN's phases and the merge share.
#include "zen/core/merge_rows.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace zen {
namespace {

// CopyRow copies exactly width floats for every width (its pieces for
// narrow rows overlap inside the row, never past it).
TEST(CopyRow, EveryWidthCopiesTheRowAndNothingElse) {
  for (int64_t width = 1; width <= 40; ++width) {
    std::vector<float> src(static_cast<size_t>(width) + 8), dst(static_cast<size_t>(width) + 8, -1);
    for (size_t k = 0; k < src.size(); ++k) src[k] = static_cast<float>(k + 1);
    CopyRow(dst.data() + 4, src.data() + 4, width);
    for (size_t k = 0; k < dst.size(); ++k) {
      const bool inside = k >= 4 && k < 4 + static_cast<size_t>(width);
      EXPECT_EQ(dst[k], inside ? src[k] : -1.0f) << "width " << width << ", float " << k;
    }
  }
}

}  // namespace
}  // namespace zen
