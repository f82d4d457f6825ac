#include "zen/core/hash_bitmap.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace zen {
namespace {

std::vector<float> Values(size_t rows, int64_t width, float base) {
  std::vector<float> v(rows * static_cast<size_t>(width));
  for (size_t i = 0; i < v.size(); ++i) v[i] = base + static_cast<float>(i);
  return v;
}

TEST(HashDomains, PartitionAllRowsInOrder) {
  for (int n : {1, 2, 3, 8}) {
    for (const RowOwner& owner : {RowOwner::Hash(6, n), RowOwner::Range(100003, n)}) {
      const HashDomains d(100003, owner, 3);
      ASSERT_EQ(d.servers(), n);
      std::vector<int> seen(100003, 0);
      for (int j = 0; j < n; ++j) {
        const auto dom = d.domain(j);
        EXPECT_EQ(static_cast<int64_t>(dom.size()), d.size(j));
        for (size_t p = 0; p < dom.size(); ++p) {
          ASSERT_EQ(owner(dom[p]), j);
          if (p) {
            ASSERT_LT(dom[p - 1], dom[p]);
          }
          ++seen[static_cast<size_t>(dom[p])];
        }
        // Even: 100003 / n rows each, within 2% for the hash.
        EXPECT_NEAR(static_cast<double>(dom.size()), 100003.0 / n, 100003.0 / n * 0.02 + 1);
      }
      for (int s : seen) ASSERT_EQ(s, 1);
    }
  }
  EXPECT_THROW(HashDomains(0, RowOwner::Hash(1, 2)), InvalidArgument);
}

// The paper's example: |G| = 15 rows, 3 servers; server 0 aggregated rows
// {5, 7}, which sit at positions {2, 3} of D_0. (Illustrative domains.)
TEST(HashBitmap, PaperExampleFifteenRowsThreeServers) {
  const HashDomains d =
      HashDomains::FromLists(15, {{0, 2, 5, 7, 11}, {1, 4, 8, 10, 13}, {3, 6, 9, 12, 14}});
  const std::vector<int64_t> ids = {5, 7};
  const std::vector<float> values = {1.5f, -2.0f};
  std::vector<std::byte> msg;
  EXPECT_EQ(EncodeRows(d, 0, 1, ids, values, EncodingChoice::kHashBitmap, msg),
            RowEncoding::kHashBitmap);
  ASSERT_EQ(msg.size(), kRowHeaderBytes + 8 + 2 * sizeof(float));
  uint64_t word = 0;
  std::memcpy(&word, msg.data() + kRowHeaderBytes, 8);
  EXPECT_EQ(word, 0b01100u);  // positions 2 and 3 of D_0
  DecodedRows got;
  DecodeRows(msg, d, 0, 1, Where{1, "G"}, got);
  EXPECT_EQ(got.encoding, RowEncoding::kHashBitmap);
  EXPECT_EQ(got.ids, ids);
  EXPECT_EQ(got.values, values);
  // kAuto: a 5-position domain costs one word, COO two ids: same 8 bytes vs
  // 16, so the bitmap.
  EXPECT_EQ(ChooseEncoding(5, 2), RowEncoding::kHashBitmap);
  EXPECT_EQ(ChooseEncoding(5, 1), RowEncoding::kCoo);
  // A row of another server's domain is refused by the encoder.
  EXPECT_THROW(EncodeRows(d, 1, 1, ids, values, EncodingChoice::kAuto, msg), InvalidArgument);
  EXPECT_THROW(HashDomains::FromLists(15, {{0, 1}, {1, 2}}), InvalidArgument);
}

TEST(HashBitmap, RoundTripsBothEncodingsAtManyDensities) {
  const int64_t rows = 20000, width = 3;
  const RowOwner owner = RowOwner::Hash(21, 4);
  const HashDomains d(rows, owner);
  std::mt19937_64 rng(5);
  for (double density : {0.0, 0.001, 0.01, 0.05, 0.5, 1.0}) {
    for (int j = 0; j < 4; ++j) {
      std::vector<int64_t> ids;
      std::bernoulli_distribution keep(density);
      for (int64_t id : d.domain(j)) {
        if (keep(rng)) ids.push_back(id);
      }
      const std::vector<float> values = Values(ids.size(), width, static_cast<float>(j));
      for (EncodingChoice c :
           {EncodingChoice::kCoo, EncodingChoice::kHashBitmap, EncodingChoice::kAuto}) {
        std::vector<std::byte> msg;
        const RowEncoding enc = EncodeRows(d, j, width, ids, values, c, msg);
        const int64_t count = static_cast<int64_t>(ids.size());
        EXPECT_EQ(msg.size(), enc == RowEncoding::kCoo
                                  ? CooMessageBytes(count, width)
                                  : BitmapMessageBytes(d.size(j), count, width));
        if (c == EncodingChoice::kAuto) {
          EXPECT_EQ(msg.size(), std::min(CooMessageBytes(count, width),
                                         BitmapMessageBytes(d.size(j), count, width)));
        }
        DecodedRows got;
        DecodeRows(msg, d, j, width, Where{}, got);
        EXPECT_EQ(got.encoding, enc);
        EXPECT_EQ(got.ids, ids);
        EXPECT_EQ(got.values, values);
      }
    }
  }
}

TEST(HashBitmap, BitmapBytesPerRankAreRowsOverEightWhateverN) {
  const int64_t rows = 1 << 20;
  for (int n : {2, 4, 8, 16, 64}) {
    const HashDomains d(rows, RowOwner::Hash(3, n), 2);
    size_t index_bytes = 0;
    for (int j = 0; j < n; ++j)
      index_bytes += BitmapMessageBytes(d.size(j), 0, 1) - kRowHeaderBytes;
    EXPECT_GE(index_bytes, static_cast<size_t>(rows / 8));
    EXPECT_LE(index_bytes, static_cast<size_t>(rows / 8 + 8 * n)) << "n " << n;
  }
}

class MalformedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int64_t id : domains_.domain(1)) {
      if (id % 3 == 0) ids_.push_back(id);
    }
    values_ = Values(ids_.size(), 2, 1.0f);
    EncodeRows(domains_, 1, 2, ids_, values_, EncodingChoice::kHashBitmap, bitmap_);
    EncodeRows(domains_, 1, 2, ids_, values_, EncodingChoice::kCoo, coo_);
  }
  void ExpectFormatError(const std::vector<std::byte>& msg, const char* what) {
    DecodedRows got;
    try {
      DecodeRows(msg, domains_, 1, 2, Where{2, "emb"}, got);
      ADD_FAILURE() << "no error for " << what;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 2, tensor 'emb'"), std::string::npos) << e.what();
    }
  }
  template <typename T>
  static void Poke(std::vector<std::byte>& msg, size_t offset, T v) {
    std::memcpy(msg.data() + offset, &v, sizeof(v));
  }

  HashDomains domains_{1000, RowOwner::Hash(9, 3)};
  std::vector<int64_t> ids_;
  std::vector<float> values_;
  std::vector<std::byte> bitmap_, coo_;
};

TEST_F(MalformedTest, EveryTruncationAndExtensionIsRejected) {
  for (const auto* msg : {&bitmap_, &coo_}) {
    for (size_t len = 0; len < msg->size(); ++len) {
      ExpectFormatError(std::vector<std::byte>(msg->begin(), msg->begin() + static_cast<long>(len)),
                        "truncated");
    }
    std::vector<std::byte> longer = *msg;
    longer.push_back(std::byte{0});
    ExpectFormatError(longer, "one byte too many");
  }
}

TEST_F(MalformedTest, HeaderFields) {
  std::vector<std::byte> m = bitmap_;
  Poke<uint32_t>(m, 0, 0x12345678);
  ExpectFormatError(m, "magic");
  m = bitmap_;
  Poke<uint8_t>(m, 4, 2);
  ExpectFormatError(m, "version");
  m = bitmap_;
  Poke<uint8_t>(m, 5, 7);
  ExpectFormatError(m, "encoding");
  m = bitmap_;
  Poke<int64_t>(m, 16, 3);
  ExpectFormatError(m, "width");
  m = bitmap_;
  Poke<int64_t>(m, 8, -1);
  ExpectFormatError(m, "negative count");
  m = bitmap_;
  Poke<int64_t>(m, 8, int64_t{1} << 62);
  ExpectFormatError(m, "huge count");
  m = bitmap_;
  Poke<int64_t>(m, 24, domains_.size(1) + 64);
  ExpectFormatError(m, "domain size");
  m = coo_;
  Poke<int64_t>(m, 24, 5);
  ExpectFormatError(m, "COO with a domain size");
}

TEST_F(MalformedTest, BitmapContent) {
  std::vector<std::byte> m = bitmap_;
  // Clear one set bit: popcount no longer equals the count.
  uint64_t w = 0;
  std::memcpy(&w, m.data() + kRowHeaderBytes, 8);
  ASSERT_NE(w, 0u);
  Poke<uint64_t>(m, kRowHeaderBytes, w & (w - 1));
  ExpectFormatError(m, "popcount");
  // Move a bit past the end of the domain (keeps the popcount).
  m = bitmap_;
  const int64_t dsize = domains_.size(1);
  ASSERT_NE(dsize % 64, 0);
  const size_t last_word = kRowHeaderBytes + static_cast<size_t>((dsize - 1) / 64) * 8;
  uint64_t lw = 0;
  std::memcpy(&lw, m.data() + last_word, 8);
  std::memcpy(&w, m.data() + kRowHeaderBytes, 8);
  if (last_word == kRowHeaderBytes) {
    lw = (lw & (lw - 1)) | (uint64_t{1} << 63);
  } else {
    Poke<uint64_t>(m, kRowHeaderBytes, w & (w - 1));
    lw |= uint64_t{1} << 63;
  }
  Poke<uint64_t>(m, last_word, lw);
  ExpectFormatError(m, "tail bit");
}

TEST_F(MalformedTest, CooIds) {
  const int64_t foreign = domains_.domain(0)[0];
  std::vector<std::byte> m = coo_;
  Poke<int64_t>(m, kRowHeaderBytes, foreign);
  ExpectFormatError(m, "id of another domain");
  m = coo_;
  Poke<int64_t>(m, kRowHeaderBytes + 8, ids_[0]);
  ExpectFormatError(m, "repeated id");
  m = coo_;
  Poke<int64_t>(m, kRowHeaderBytes, 5000);
  ExpectFormatError(m, "id past rows");
  m = coo_;
  Poke<int64_t>(m, kRowHeaderBytes, -3);
  ExpectFormatError(m, "negative id");
}

TEST_F(MalformedTest, RandomCorruptionNeverCrashes) {
  std::mt19937_64 rng(77);
  int rejected = 0, accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<std::byte> m = trial % 2 ? coo_ : bitmap_;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      m[rng() % m.size()] ^= static_cast<std::byte>(1u << (rng() % 8));
    }
    if (rng() % 4 == 0) m.resize(rng() % (m.size() + 16));
    DecodedRows got;
    try {
      DecodeRows(m, domains_, 1, 2, Where{}, got);
      ++accepted;  // e.g. a flipped value bit: still well-formed
      ASSERT_EQ(got.values.size(), got.ids.size() * 2);
      for (size_t i = 0; i < got.ids.size(); ++i) {
        ASSERT_TRUE(
            std::binary_search(domains_.domain(1).begin(), domains_.domain(1).end(), got.ids[i]));
        if (i) {
          ASSERT_LT(got.ids[i - 1], got.ids[i]);
        }
      }
    } catch (const FormatError&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
  EXPECT_GT(accepted, 0);
}

}  // namespace
}  // namespace zen
