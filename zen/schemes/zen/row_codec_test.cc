#include "zen/schemes/zen/row_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <random>

#include "zen/schemes/zen/decoded_rows.h"
#include "zen/core/half.h"

namespace zen {
namespace {

std::vector<float> Values(size_t rows, int64_t width, float base) {
  std::vector<float> v(rows * static_cast<size_t>(width));
  for (size_t i = 0; i < v.size(); ++i) v[i] = base + static_cast<float>(i);
  return v;
}

// Brute force: every id's (server, position) is hit exactly once, positions
// fill [0, |D_j|), IdAt inverts Locate, sizes are even.
TEST(HashDomains, PartitionAllRowsArithmetically) {
  const int64_t rows = 100003;
  for (int n : {1, 2, 3, 8}) {
    for (const RowOwner& owner : {RowOwner::Permuted(6, rows, n), RowOwner::Range(rows, n)}) {
      const HashDomains d(owner);
      ASSERT_EQ(d.servers(), n);
      ASSERT_EQ(d.rows(), rows);
      std::vector<std::vector<int>> seen(static_cast<size_t>(n));
      int64_t total = 0;
      for (int j = 0; j < n; ++j) {
        seen[static_cast<size_t>(j)].assign(static_cast<size_t>(d.size(j)), 0);
        EXPECT_EQ(d.start(j), total);
        total += d.size(j);
        EXPECT_NEAR(static_cast<double>(d.size(j)), static_cast<double>(rows) / n, 1.0);
        EXPECT_LE(d.size(j), d.max_size());
      }
      EXPECT_EQ(total, rows);
      for (int64_t id = 0; id < rows; ++id) {
        const RowPlace at = d.Locate(id);
        ASSERT_EQ(at.server, owner(id));
        ASSERT_GE(at.position, 0);
        ASSERT_LT(at.position, d.size(at.server));
        ASSERT_EQ(d.IdAt(at.server, at.position), id);
        ++seen[static_cast<size_t>(at.server)][static_cast<size_t>(at.position)];
      }
      for (const auto& s : seen) {
        for (int c : s) ASSERT_EQ(c, 1);
      }
    }
  }
  EXPECT_THROW(HashDomains(RowOwner::Hash(1, 2)), InvalidArgument);
}

// The paper's example: |G| = 15 rows, 3 servers; server 0 (D_0 = ids 0..4
// under even ranges) aggregated the rows at positions {2, 3}.
TEST(HashBitmap, PaperExampleFifteenRowsThreeServers) {
  const HashDomains d(RowOwner::Range(15, 3));
  ASSERT_EQ(d.size(0), 5);
  const std::vector<int64_t> positions = {2, 3};
  const std::vector<float> values = {1.5f, -2.0f};
  std::vector<std::byte> msg;
  EXPECT_EQ(EncodeRows(d.size(0), 1, positions, values, EncodingChoice::kHashBitmap, msg),
            RowEncoding::kHashBitmap);
  ASSERT_EQ(msg.size(), kRowHeaderBytes + 8 + 2 * sizeof(float));
  uint64_t word = 0;
  std::memcpy(&word, msg.data() + kRowHeaderBytes, 8);
  EXPECT_EQ(word, 0b01100u);  // positions 2 and 3 of D_0
  DecodedRows got;
  DecodeRows(msg, d.size(0), 0, 1, Where{1, "G"}, got);
  EXPECT_EQ(got.encoding, RowEncoding::kHashBitmap);
  EXPECT_EQ(got.positions, positions);
  EXPECT_EQ(got.values, values);
  EXPECT_EQ(d.IdAt(0, 2), 2);
  // kAuto: a 5-position domain's bitmap costs one 8-byte word; COO32 two
  // positions one word too (a tie goes to COO32), three positions two words
  // (the bitmap). Above 2^32 positions only COO (8 bytes each) competes.
  EXPECT_EQ(ChooseEncoding(5, 3), RowEncoding::kHashBitmap);
  EXPECT_EQ(ChooseEncoding(5, 2), RowEncoding::kCoo32);
  EXPECT_EQ(ChooseEncoding(5, 1), RowEncoding::kCoo32);
  EXPECT_EQ(ChooseEncoding(kMaxCoo32Domain, 1), RowEncoding::kCoo32);
  EXPECT_EQ(ChooseEncoding(kMaxCoo32Domain + 1, 1), RowEncoding::kCoo);
  // 2^30 + 1 rows of 2^36 positions: Elias-Fano's 5 low bits and about 3
  // high bits per row (134M words) beat the bitmap's 2^30 words.
  EXPECT_EQ(ChooseEncoding(int64_t{1} << 36, (int64_t{1} << 30) + 1), RowEncoding::kEliasFano);
  // Half of the domain's positions: the bitmap (1 bit each) beats
  // Elias-Fano (L = 1: 1 + 2 bits each); a sixteenth: Elias-Fano (L = 4:
  // 6 bits each against 16).
  EXPECT_EQ(ChooseEncoding(1 << 20, 1 << 19), RowEncoding::kHashBitmap);
  EXPECT_EQ(ChooseEncoding(1 << 20, 1 << 16), RowEncoding::kEliasFano);
  EXPECT_EQ(ResolveEncoding(kMaxCoo32Domain + 1, 1, EncodingChoice::kCompactCoo), RowEncoding::kCoo);
  EXPECT_EQ(ResolveEncoding(kMaxCoo32Domain, 1, EncodingChoice::kCompactCoo), RowEncoding::kCoo32);
  EXPECT_THROW(ResolveEncoding(kMaxCoo32Domain + 1, 1, EncodingChoice::kCoo32), InvalidArgument);
  // A position outside the domain, or out of order, is refused by the encoder.
  const std::vector<int64_t> outside = {2, 5}, unordered = {3, 2};
  for (EncodingChoice c : {EncodingChoice::kCoo, EncodingChoice::kHashBitmap,
                           EncodingChoice::kCoo32, EncodingChoice::kEliasFano}) {
    EXPECT_THROW(EncodeRows(d.size(0), 1, outside, values, c, msg), InvalidArgument);
    EXPECT_THROW(EncodeRows(d.size(0), 1, unordered, values, c, msg), InvalidArgument);
  }
  EXPECT_THROW(EncodeRows(d.size(0), 2, positions, values, EncodingChoice::kAuto, msg),
               InvalidArgument);
}

// Elias-Fano, by hand: positions {2, 3, 9, 14} of a 16-position domain,
// L = log2(16 / 4) = 2: low parts {2, 3, 1, 2} packed 2 bits each (0b10 |
// 0b11 << 2 | 0b01 << 4 | 0b10 << 6 = 158), high parts {0, 0, 2, 3} as bits
// h + i = {0, 1, 4, 6} (0b1010011 = 83) of 4 + (15 >> 2) + 1 = 8.
TEST(HashBitmap, EliasFanoByHand) {
  const std::vector<int64_t> positions = {2, 3, 9, 14};
  const std::vector<float> values = {1, 2, 3, 4};
  std::vector<std::byte> msg;
  EXPECT_EQ(EliasFanoLowBits(16, 4), 2);
  EXPECT_EQ(EncodeRows(16, 1, positions, values, EncodingChoice::kEliasFano, msg),
            RowEncoding::kEliasFano);
  ASSERT_EQ(msg.size(), kRowHeaderBytes + 2 * 8 + 4 * sizeof(float));
  ASSERT_EQ(msg.size(), EliasFanoMessageBytes(16, 4, 1));
  uint64_t low = 0, high = 0;
  std::memcpy(&low, msg.data() + kRowHeaderBytes, 8);
  std::memcpy(&high, msg.data() + kRowHeaderBytes + 8, 8);
  EXPECT_EQ(low, 158u);
  EXPECT_EQ(high, 83u);
  DecodedRows got;
  DecodeRows(msg, 16, 0, 1, Where{}, got);
  EXPECT_EQ(got.encoding, RowEncoding::kEliasFano);
  EXPECT_EQ(got.positions, positions);
  EXPECT_EQ(got.values, values);
  // Low parts that straddle two words (L = 13: rows 4 and 9 of this list),
  // no low part at all (L = 0: every position of a domain), and none.
  for (const auto& [domain, list] : std::vector<std::pair<int64_t, std::vector<int64_t>>>{
           {int64_t{12} << 13, {0, 1, 8191, 8192, 40000, 40001, 50000, 70000, 90000, 98303}},
           {5, {0, 1, 2, 3, 4}},
           {7, {}},
           {kMaxPermutedRows, {0, kMaxPermutedRows / 3, kMaxPermutedRows - 1}}}) {
    const std::vector<float> v(list.size(), 1.0f);
    EncodeRows(domain, 1, list, v, EncodingChoice::kEliasFano, msg);
    DecodeRows(msg, domain, 0, 1, Where{}, got);
    EXPECT_EQ(got.positions, list) << "domain " << domain;
  }
}

TEST(HashBitmap, RoundTripsBothEncodingsAtManyDensities) {
  const int64_t rows = 20000, width = 3;
  const HashDomains d(RowOwner::Permuted(21, rows, 4));
  std::mt19937_64 rng(5);
  for (double density : {0.0, 0.001, 0.01, 0.05, 0.5, 1.0}) {
    for (int j = 0; j < 4; ++j) {
      std::vector<int64_t> positions;
      std::bernoulli_distribution keep(density);
      for (int64_t p = 0; p < d.size(j); ++p) {
        if (keep(rng)) positions.push_back(p);
      }
      const std::vector<float> values = Values(positions.size(), width, static_cast<float>(j));
      for (EncodingChoice c : {EncodingChoice::kCoo, EncodingChoice::kHashBitmap,
                               EncodingChoice::kCoo32, EncodingChoice::kCompactCoo,
                               EncodingChoice::kEliasFano, EncodingChoice::kAuto}) {
        std::vector<std::byte> msg(7);  // reused buffers are resized, not appended to
        const RowEncoding enc = EncodeRows(d.size(j), width, positions, values, c, msg);
        const int64_t count = static_cast<int64_t>(positions.size());
        // Header, index (COO32: 4 bytes per position, padded to 8), values.
        const size_t values_bytes = static_cast<size_t>(count * width) * sizeof(float);
        const size_t coo = kRowHeaderBytes + static_cast<size_t>(count) * 8 + values_bytes;
        const size_t coo32 =
            kRowHeaderBytes + (static_cast<size_t>(count) * 4 + 7) / 8 * 8 + values_bytes;
        const size_t bitmap =
            kRowHeaderBytes + static_cast<size_t>((d.size(j) + 63) / 64) * 8 + values_bytes;
        // Elias-Fano: L = floor(log2(domain / count)) low bits per row, and
        // count + (domain - 1) / 2^L + 1 high bits, each run in whole words.
        int64_t l = 0;
        while (count > 0 && (d.size(j) / count) >> (l + 1) != 0) ++l;
        const int64_t high_bits = count + (d.size(j) - 1) / (int64_t{1} << l) + 1;
        const size_t ef = kRowHeaderBytes +
                          static_cast<size_t>((count * l + 63) / 64 + (high_bits + 63) / 64) * 8 +
                          values_bytes;
        EXPECT_EQ(CooMessageBytes(count, width), coo);
        EXPECT_EQ(Coo32MessageBytes(count, width), coo32);
        EXPECT_EQ(BitmapMessageBytes(d.size(j), count, width), bitmap);
        EXPECT_EQ(EliasFanoMessageBytes(d.size(j), count, width), ef);
        EXPECT_EQ(msg.size(), enc == RowEncoding::kCoo          ? coo
                              : enc == RowEncoding::kCoo32      ? coo32
                              : enc == RowEncoding::kEliasFano  ? ef
                                                                : bitmap);
        if (c == EncodingChoice::kCompactCoo) {
          EXPECT_EQ(enc, RowEncoding::kCoo32);
        }
        if (c == EncodingChoice::kAuto) {
          EXPECT_EQ(msg.size(), std::min({coo32, bitmap, ef}));
        }
        DecodedRows got;
        DecodeRows(msg, d.size(j), j, width, Where{}, got);
        EXPECT_EQ(got.encoding, enc);
        EXPECT_EQ(got.positions, positions);
        EXPECT_EQ(got.values, values);
        // The in-place view sees the same rows.
        const RowsMessage m = ParseRows(msg, d.size(j), j, width, Where{});
        size_t seen = 0;
        m.ForEach([&](size_t i, int64_t p) {
          ASSERT_EQ(p, positions[i]);
          ASSERT_EQ(std::memcmp(m.row(i), values.data() + i * width, width * sizeof(float)), 0);
          ++seen;
        });
        EXPECT_EQ(seen, positions.size());
      }
    }
  }
}

// float64 values travel as their 8 bytes in every encoding (value_bytes
// 8): the positions and the values come back bit for bit, the sizes count
// 8 bytes a value, and the same bytes read with float32's value size are a
// FormatError (the exact length does not match).
TEST(HashBitmap, Float64ValuesRoundTripInEveryEncoding) {
  const int64_t domain = 1000, width = 3;
  const std::vector<int64_t> positions = {2, 17, 64, 511, 999};
  std::vector<double> values;
  for (size_t i = 0; i < positions.size() * 3; ++i) {
    values.push_back(i % 2 == 0 ? 1e300 / static_cast<double>(i + 1) : 1e-300 * (i + 1.5));
  }
  for (const EncodingChoice e : {EncodingChoice::kCoo, EncodingChoice::kCoo32,
                                 EncodingChoice::kHashBitmap, EncodingChoice::kEliasFano}) {
    std::vector<std::byte> msg;
    const RowEncoding used =
        EncodeRows<double>(domain, width, positions, std::span<const double>(values), e, msg);
    const RowsLayout layout = LayoutRows(domain, 5, width, e, sizeof(double));
    EXPECT_EQ(msg.size(), layout.bytes);
    EXPECT_EQ(layout.bytes - layout.values_offset, values.size() * sizeof(double));
    const RowsMessage m =
        ParseRows(msg, domain, 0, width, Where{}, PositionCheck::kNow, sizeof(double));
    EXPECT_EQ(m.encoding, used);
    ASSERT_EQ(m.count, 5);
    m.ForEach([&](size_t i, int64_t p) {
      EXPECT_EQ(p, positions[i]);
      for (size_t c = 0; c < 3; ++c) EXPECT_EQ(m.row<double>(i)[c], values[i * 3 + c]);
    });
    EXPECT_THROW(ParseRows(msg, domain, 0, width, Where{}), FormatError);
  }
  EXPECT_EQ(CooMessageBytes(5, width, sizeof(double)), kRowHeaderBytes + 5 * 8 + 15 * 8);
  EXPECT_EQ(Coo32MessageBytes(5, width, sizeof(double)), kRowHeaderBytes + 24 + 15 * 8);
  EXPECT_EQ(BitmapMessageBytes(domain, 5, width, sizeof(double)),
            kRowHeaderBytes + 16 * 8 + 15 * 8);
  EXPECT_EQ(EliasFanoMessageBytes(domain, 5, width, sizeof(double)) -
                EliasFanoMessageBytes(domain, 5, width),
            15 * 4u);
}

TEST(HashBitmap, BitmapBytesPerRankAreRowsOverEightWhateverN) {
  const int64_t rows = 1 << 20;
  for (int n : {2, 4, 8, 16, 64}) {
    const HashDomains d(RowOwner::Permuted(3, rows, n));
    size_t index_bytes = 0;
    for (int j = 0; j < n; ++j)
      index_bytes += BitmapMessageBytes(d.size(j), 0, 1) - kRowHeaderBytes;
    EXPECT_GE(index_bytes, static_cast<size_t>(rows / 8));
    EXPECT_LE(index_bytes, static_cast<size_t>(rows / 8 + 8 * n)) << "n " << n;
  }
}

TEST(HashBitmap, SizesThatOverflowAreErrorsNotWraps) {
  EXPECT_THROW(CooMessageBytes(int64_t{1} << 40, int64_t{1} << 40), InvalidArgument);
  EXPECT_THROW(BitmapMessageBytes(int64_t{1} << 62, int64_t{1} << 40, int64_t{1} << 40),
               InvalidArgument);
  EXPECT_THROW(CooMessageBytes(-1, 1), InvalidArgument);
}

class MalformedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int64_t p = 0; p < domains_.size(1); ++p) {
      if (p % 3 == 0) positions_.push_back(p);
    }
    values_ = Values(positions_.size(), 2, 1.0f);
    EncodeRows(domains_.size(1), 2, positions_, values_, EncodingChoice::kHashBitmap, bitmap_);
    EncodeRows(domains_.size(1), 2, positions_, values_, EncodingChoice::kCoo, coo_);
    EncodeRows(domains_.size(1), 2, positions_, values_, EncodingChoice::kCoo32, coo32_);
    EncodeRows(domains_.size(1), 2, positions_, values_, EncodingChoice::kEliasFano, ef_);
  }
  // The error of ParseRows, and the same error where the reader checks the
  // positions (PositionCheck::kByReader, then ForEachChecked).
  void ExpectFormatError(const std::vector<std::byte>& msg, const char* what) {
    DecodedRows got;
    std::string now;
    try {
      DecodeRows(msg, domains_.size(1), 1, 2, Where{2, "emb"}, got);
      ADD_FAILURE() << "no error for " << what;
    } catch (const FormatError& e) {
      now = e.what();
      EXPECT_NE(now.find("rank 2, tensor 'emb'"), std::string::npos) << now;
    }
    try {
      const RowsMessage m =
          ParseRows(msg, domains_.size(1), 1, 2, Where{2, "emb"}, PositionCheck::kByReader);
      size_t rows = 0;
      m.ForEachChecked(domains_.size(1), 1, Where{2, "emb"}, [&](size_t, int64_t) { ++rows; });
      EXPECT_EQ(rows, static_cast<size_t>(m.count));
      ADD_FAILURE() << "no error by the reader for " << what;
    } catch (const FormatError& e) {
      EXPECT_EQ(e.what(), now) << what;
    }
  }
  template <typename T>
  static void Poke(std::vector<std::byte>& msg, size_t offset, T v) {
    std::memcpy(msg.data() + offset, &v, sizeof(v));
  }

  HashDomains domains_{RowOwner::Permuted(9, 1000, 3)};
  std::vector<int64_t> positions_;
  std::vector<float> values_;
  std::vector<std::byte> bitmap_, coo_, coo32_, ef_;
};

TEST_F(MalformedTest, EveryTruncationAndExtensionIsRejected) {
  for (const auto* msg : {&bitmap_, &coo_, &coo32_, &ef_}) {
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
  Poke<uint8_t>(m, 4, 1);
  ExpectFormatError(m, "version 1 (ids, not positions)");
  m = bitmap_;
  Poke<uint8_t>(m, 4, 3);
  ExpectFormatError(m, "version");
  m = bitmap_;
  Poke<uint8_t>(m, 5, 7);
  ExpectFormatError(m, "encoding");
  m = bitmap_;
  Poke<uint16_t>(m, 6, 1);
  ExpectFormatError(m, "reserved");
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
  m = coo32_;
  Poke<int64_t>(m, 24, 5);
  ExpectFormatError(m, "COO32 with a domain size");
  m = ef_;
  Poke<int64_t>(m, 24, domains_.size(1) - 1);
  ExpectFormatError(m, "Elias-Fano with another domain size");
  // COO32 only where the domain fits 32-bit positions.
  DecodedRows got;
  EXPECT_THROW(DecodeRows(coo32_, kMaxCoo32Domain + 1, 1, 2, Where{}, got), FormatError);
  EXPECT_NO_THROW(DecodeRows(coo32_, kMaxCoo32Domain, 1, 2, Where{}, got));
}

// A huge domain and count whose message size overflows size_t: rejected
// before anything is read past the buffer.
TEST(HashBitmapMalformed, OverflowingSizesAreFormatErrors) {
  std::vector<std::byte> m(kRowHeaderBytes + 64, std::byte{0});
  const uint32_t magic = kRowMagic;
  std::memcpy(m.data(), &magic, 4);
  m[4] = std::byte{kRowVersion};
  for (uint8_t enc : {uint8_t{1}, uint8_t{2}, uint8_t{3}, uint8_t{4}}) {
    m[5] = std::byte{enc};
    const int64_t count = int64_t{1} << 61, width = int64_t{1} << 40;
    const int64_t dsize = enc == 2 || enc == 4 ? kMaxPermutedRows : 0;
    std::memcpy(m.data() + 8, &count, 8);
    std::memcpy(m.data() + 16, &width, 8);
    std::memcpy(m.data() + 24, &dsize, 8);
    DecodedRows got;
    EXPECT_THROW(DecodeRows(m, kMaxPermutedRows, 0, width, Where{}, got), FormatError);
  }
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

// The fixture's Elias-Fano message: 111 positions (every third) of a
// 333-position domain, L = 1: 2 low words (47 bits of the second used) and
// 278 high bits in 5 words.
TEST_F(MalformedTest, EliasFanoContent) {
  ASSERT_EQ(domains_.size(1), 333);
  ASSERT_EQ(positions_.size(), 111u);
  ASSERT_EQ(EliasFanoLowBits(333, 111), 1);
  const size_t low = kRowHeaderBytes, high = low + 2 * 8;
  ASSERT_EQ(ef_.size(), high + 5 * 8 + 111 * 2 * sizeof(float));
  auto word = [](const std::vector<std::byte>& m, size_t at) {
    uint64_t w = 0;
    std::memcpy(&w, m.data() + at, 8);
    return w;
  };
  // One high bit cleared: fewer rows than the header says.
  std::vector<std::byte> m = ef_;
  const uint64_t h0 = word(m, high);
  ASSERT_NE(h0, 0u);
  Poke<uint64_t>(m, high, h0 & (h0 - 1));
  ExpectFormatError(m, "high popcount");
  // A high bit moved past the run's 278 bits (popcount kept).
  m = ef_;
  Poke<uint64_t>(m, high, h0 & (h0 - 1));
  Poke<uint64_t>(m, high + 4 * 8, word(m, high + 4 * 8) | uint64_t{1} << 40);
  ExpectFormatError(m, "high tail bit");
  // A low bit past the 111 rows' 111 bits.
  m = ef_;
  Poke<uint64_t>(m, low + 8, word(m, low + 8) | uint64_t{1} << 60);
  ExpectFormatError(m, "low tail bit");
  // Rows 0 and 1 (positions 0 and 3: high parts 0 and 1 at bits 0 and 2,
  // low parts 0 and 1): row 1 made 0 (bit 2 -> bit 1, low bit cleared).
  ASSERT_EQ(positions_[0], 0);
  ASSERT_EQ(positions_[1], 3);
  m = ef_;
  Poke<uint64_t>(m, high, (h0 & ~uint64_t{4}) | 2);
  Poke<uint64_t>(m, low, word(m, low) & ~uint64_t{2});
  ExpectFormatError(m, "repeated position");
  // The last row (330: high 165 at bit 165 + 110 = 275) moved to bit 277:
  // high part 167, position 334, past the domain (bit 276 would give 332).
  ASSERT_EQ(positions_.back(), 330);
  m = ef_;
  const uint64_t h4 = word(m, high + 4 * 8);
  ASSERT_EQ(h4 >> (275 - 256) & 1, 1u);
  Poke<uint64_t>(m, high + 4 * 8, (h4 & ~(uint64_t{1} << 19)) | uint64_t{1} << 21);
  ExpectFormatError(m, "position past the domain");
}

TEST_F(MalformedTest, CooPositions) {
  std::vector<std::byte> m = coo_;
  Poke<int64_t>(m, kRowHeaderBytes + 8, positions_[0]);
  ExpectFormatError(m, "repeated position");
  m = coo_;
  Poke<int64_t>(m, kRowHeaderBytes, positions_[1] + 1);
  ExpectFormatError(m, "out of order");
  m = coo_;
  Poke<int64_t>(m, kRowHeaderBytes + 8 * (positions_.size() - 1), domains_.size(1));
  ExpectFormatError(m, "position past the domain");
  m = coo_;
  Poke<int64_t>(m, kRowHeaderBytes, -3);
  ExpectFormatError(m, "negative position");
}

TEST_F(MalformedTest, Coo32PositionsAndPadding) {
  ASSERT_EQ(positions_.size() % 2, 1u);  // so that there is padding
  std::vector<std::byte> m = coo32_;
  Poke<uint32_t>(m, kRowHeaderBytes + 4, static_cast<uint32_t>(positions_[0]));
  ExpectFormatError(m, "repeated position");
  m = coo32_;
  Poke<uint32_t>(m, kRowHeaderBytes, static_cast<uint32_t>(positions_[1] + 1));
  ExpectFormatError(m, "out of order");
  m = coo32_;
  Poke<uint32_t>(m, kRowHeaderBytes + 4 * (positions_.size() - 1),
                 static_cast<uint32_t>(domains_.size(1)));
  ExpectFormatError(m, "position past the domain");
  m = coo32_;
  Poke<uint32_t>(m, kRowHeaderBytes + 4 * positions_.size(), 1);
  ExpectFormatError(m, "non-zero padding");
  // 4 bytes per position (plus padding) instead of COO's 8.
  EXPECT_EQ(coo_.size() - coo32_.size(), 4 * positions_.size() - 4);
}

TEST_F(MalformedTest, RandomCorruptionNeverCrashes) {
  std::mt19937_64 rng(77);
  int rejected = 0, accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<std::byte> m = trial % 3 == 0 ? coo_ : trial % 3 == 1 ? coo32_ : bitmap_;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      m[rng() % m.size()] ^= static_cast<std::byte>(1u << (rng() % 8));
    }
    if (rng() % 4 == 0) m.resize(rng() % (m.size() + 16));
    DecodedRows got;
    try {
      DecodeRows(m, domains_.size(1), 1, 2, Where{}, got);
      ++accepted;  // e.g. a flipped value bit: still well-formed
      ASSERT_EQ(got.values.size(), got.positions.size() * 2);
      for (size_t i = 0; i < got.positions.size(); ++i) {
        ASSERT_GE(got.positions[i], 0);
        ASSERT_LT(got.positions[i], domains_.size(1));
        if (i) {
          ASSERT_LT(got.positions[i - 1], got.positions[i]);
        }
      }
    } catch (const FormatError&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
  EXPECT_GT(accepted, 0);
}

// Messages back to back (ZEN's grouped pull): each read in turn with
// ParseRowsAt (8-byte aligned, padding zero), narrowed one by one and
// packed, then widened back as a sequence with a trailer after them: the
// same positions, the values rounded to the wire format.
// A narrowed message read as a float32 one (ranks with other wire values,
// which the metadata round now catches first) names both formats, not a
// magic or version that match.
TEST(HashBitmapMalformed, NarrowedMessageReadAsFloat32NamesTheFormat) {
  std::vector<std::byte> m;
  const std::vector<int64_t> positions = {1, 5, 9};
  EncodeRows(100, 2, positions, Values(positions.size(), 2, 0.5f), EncodingChoice::kCoo, m);
  NarrowRowsValues(m, 0, WireValues::kBfloat16);
  try {
    ParseRows(m, 100, 3, 2, Where{1, "emb"});
    ADD_FAILURE() << "a narrowed message parsed as float32";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1, tensor 'emb': row message from server 3: values "
                                         "in wire format 1 (bfloat16), where float32 values "
                                         "(format 0) were expected"),
              std::string::npos)
        << e.what();
  }
}

TEST(RowsSequence, ParseNarrowAndWidenBackToBack) {
  const int64_t domain = 1000, width = 3;
  const std::vector<std::vector<int64_t>> groups = {{1, 5, 900}, {}, {7}, {2, 3, 4, 998, 999}};
  std::vector<std::byte> all;
  std::vector<size_t> starts;
  for (size_t g = 0; g < groups.size(); ++g) {
    starts.push_back(all.size());
    std::vector<std::byte> m;
    const std::vector<float> v = Values(groups[g].size(), width, 0.1f + static_cast<float>(g));
    EncodeRows(domain, width, groups[g], v, EncodingChoice::kAuto, m);
    all.insert(all.end(), m.begin(), m.end());
    all.resize(RowsPadded(all.size()), std::byte{0});
  }
  const size_t end = all.size();
  auto expect_groups = [&](std::span<const std::byte> bytes, WireValues v) {
    size_t at = 0;
    for (size_t g = 0; g < groups.size(); ++g) {
      const RowsMessage m = ParseRowsAt(bytes, at, domain, 0, width, Where{});
      ASSERT_EQ(m.count, static_cast<int64_t>(groups[g].size()));
      std::vector<int64_t> got;
      m.ForEach([&](size_t, int64_t p) { got.push_back(p); });
      EXPECT_EQ(got, groups[g]);
      const std::vector<float> want = Values(groups[g].size(), width, 0.1f + static_cast<float>(g));
      for (size_t i = 0; i < want.size(); ++i) {
        const float x = want[i];
        const float r =
            v == WireValues::kBfloat16 ? Bfloat16BitsToFloat(FloatToBfloat16Bits(x)) : x;
        EXPECT_EQ(reinterpret_cast<const float*>(m.values)[i], r) << "group " << g;
      }
      EXPECT_EQ(at % 8, 0u);
    }
    EXPECT_EQ(at, bytes.size());
  };
  expect_groups(std::span(all).first(end), WireValues::kFloat32);

  // Narrowed in place and packed, then a trailer; widened back.
  std::vector<std::byte> narrow = all;
  size_t out = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    const size_t next = g + 1 < groups.size() ? starts[g + 1] : end;
    std::vector<std::byte> one(narrow.begin() + static_cast<long>(starts[g]),
                               narrow.begin() + static_cast<long>(next));
    const size_t size = NarrowRowsValuesIn(std::span(one).first(one.size()), WireValues::kBfloat16);
    if (!groups[g].empty()) {
      ASSERT_LT(size, next - starts[g]);
    }
    std::copy(one.begin(), one.begin() + static_cast<long>(size),
              narrow.begin() + static_cast<long>(out));
    const size_t padded = RowsPadded(out + size);
    std::fill(narrow.begin() + static_cast<long>(out + size),
              narrow.begin() + static_cast<long>(padded), std::byte{0});
    out = padded;
  }
  narrow.resize(out);
  const std::array<std::byte, 8> trailer = {std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4},
                                            std::byte{5}, std::byte{6}, std::byte{7}, std::byte{8}};
  narrow.insert(narrow.end(), trailer.begin(), trailer.end());
  std::vector<size_t> scratch;
  std::vector<std::byte> wide = narrow;
  WidenRowsSequence(wide, out, domain, width, WireValues::kBfloat16, 0, Where{}, scratch);
  ASSERT_EQ(wide.size(), end + trailer.size());
  EXPECT_TRUE(std::equal(trailer.begin(), trailer.end(), wide.end() - 8));
  expect_groups(std::span(wide).first(end), WireValues::kBfloat16);

  // Malformed sequences: a cut, a wrong format field, garbage after the
  // last message; and ParseRowsAt's padding and bounds.
  std::vector<std::byte> cut = narrow;
  EXPECT_THROW(WidenRowsSequence(cut, out - 8, domain, width, WireValues::kBfloat16, 0, Where{},
                                 scratch),
               FormatError);
  std::vector<std::byte> f16 = narrow;
  EXPECT_THROW(
      WidenRowsSequence(f16, out, domain, width, WireValues::kFloat16, 0, Where{}, scratch),
      FormatError);
  std::vector<std::byte> extra = narrow;
  EXPECT_THROW(WidenRowsSequence(extra, out + 8, domain, width, WireValues::kBfloat16, 0, Where{},
                                 scratch),
               FormatError);
  size_t past = end;  // no room for a header there
  EXPECT_THROW(ParseRowsAt(std::span(all).first(end), past, domain, 0, width, Where{}),
               FormatError);
  {
    // A message whose size is not a multiple of 8 gets a non-zero pad byte.
    std::vector<std::byte> m;
    EncodeRows(domain, width, std::vector<int64_t>{3}, Values(1, width, 1.0f),
               EncodingChoice::kCoo, m);
    const size_t first_end = m.size();
    ASSERT_NE(first_end % 8, 0u);
    m.resize(RowsPadded(first_end), std::byte{0});
    size_t p = 0;
    EXPECT_NO_THROW(ParseRowsAt(m, p, domain, 0, width, Where{}));
    m[first_end] = std::byte{1};
    p = 0;
    EXPECT_THROW(ParseRowsAt(m, p, domain, 0, width, Where{}), FormatError);
  }
}

}  // namespace
}  // namespace zen
