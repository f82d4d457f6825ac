#include "zen/schemes/wire.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "zen/core/error.h"

namespace zen {
namespace {

// ViewCoo reads a message in place: the same rows as DecodeCoo, pointing
// into the message; the same rejections; a message that does not start
// 8-byte aligned is refused (DecodeCoo copies, so it takes any alignment).
TEST(ViewCoo, ViewsWhatDecodeCooDecodesAndRefusesMisalignedMessages) {
  const std::vector<int64_t> ids = {2, 5, 9};
  const std::vector<float> values = {1, 2, 3, 4, 5, 6};  // width 2
  const ByteBuffer msg = EncodeCoo(ids, values);
  const Where where{1, "w"};
  const CooView v = ViewCoo(msg, 10, 2, where, 3);
  EXPECT_EQ(std::vector<int64_t>(v.ids.begin(), v.ids.end()), ids);
  EXPECT_EQ(std::vector<float>(v.values.begin(), v.values.end()), values);
  EXPECT_EQ(static_cast<const void*>(v.ids.data()), static_cast<const void*>(msg.data()));
  const SparseTensor t = DecodeCoo(msg, 10, 2, where, 3);
  EXPECT_EQ(std::vector<int64_t>(t.ids().begin(), t.ids().end()), ids);

  EXPECT_TRUE(ViewCoo({}, 10, 2, where, 3).ids.empty());
  EXPECT_THROW(ViewCoo(msg, 9, 2, where, 3), FormatError);  // id 9 outside [0, 9)
  EXPECT_THROW(ViewCoo(std::span(msg).first(msg.size() - 4), 10, 2, where, 3), FormatError);
  ByteBuffer unsorted = EncodeCoo(std::vector<int64_t>{5, 2}, std::vector<float>{1, 2});
  EXPECT_THROW(ViewCoo(unsorted, 10, 1, where, 3), FormatError);

  ByteBuffer shifted(msg.size() + 4);
  std::copy(msg.begin(), msg.end(), shifted.begin() + 4);
  const std::span<const std::byte> odd = std::span<const std::byte>(shifted).subspan(4);
  EXPECT_THROW(ViewCoo(odd, 10, 2, where, 3), InvalidArgument);
  const SparseTensor copied = DecodeCoo(odd, 10, 2, where, 3);  // any alignment
  EXPECT_EQ(std::vector<float>(copied.values().begin(), copied.values().end()), values);
}

// Wire sizes near int64 limits (issue 13, item 2) saturate instead of
// wrapping.
TEST(WireSizes, SaturateInsteadOfWrapping) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(CooBytes(3, 2), 3u * (8 + 8));
  EXPECT_EQ(CooBytes(size_t{1} << 62, 64), SIZE_MAX);
  EXPECT_EQ(CooBytes(1, kMax), SIZE_MAX);
  EXPECT_EQ(CooBytesBound(kMax, 1), kMax);
  EXPECT_EQ(CooBytesBound(10, kMax), kMax);  // per-row bytes beyond int64: capped, not -1
  EXPECT_EQ(CooBytesBound(10, 2), 160);
}

}  // namespace
}  // namespace zen
