#include "zen/schemes/zen/row_codec.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "zen/core/checked.h"
#include "zen/core/half.h"

namespace zen {
namespace {

// Bits set in `words` 64-bit words at `bytes` (any alignment); `last` gets
// the last word. With the popcnt instruction where the CPU has it (chosen at
// run time; the portable std::popcount is a library call on baseline x86-64).
// Not under ThreadSanitizer: a target_clones resolver runs while the dynamic
// loader relocates, before TSan's runtime starts, and its instrumented code
// crashes the process.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__)
__attribute__((target_clones("popcnt", "default")))
#endif
size_t CountBits(const std::byte* bytes, size_t words, uint64_t& last) {
  size_t pop = 0;
  uint64_t w = 0;
  for (size_t i = 0; i < words; ++i) {
    std::memcpy(&w, bytes + i * sizeof(uint64_t), sizeof(w));
    pop += static_cast<size_t>(std::popcount(w));
  }
  last = w;
  return pop;
}

struct Header {
  uint32_t magic = kRowMagic;
  uint8_t version = kRowVersion;
  uint8_t encoding = 0;
  uint16_t reserved = 0;
  int64_t count = 0;
  int64_t width = 0;
  int64_t domain_size = 0;
};
static_assert(sizeof(Header) == kRowHeaderBytes);

size_t BitmapWords(int64_t domain_size) {
  return static_cast<size_t>(domain_size / 64 + (domain_size % 64 != 0 ? 1 : 0));
}

// header + index_bytes + count x width values of value_bytes each, or false
// on overflow.
bool TryMessageBytes(size_t index_bytes, int64_t count, int64_t width, size_t value_bytes,
                     size_t& out) {
  size_t values = 0, total = 0;
  if (count < 0 || width < 0) return false;
  if (!TryMul(static_cast<size_t>(count), static_cast<size_t>(width), values) ||
      !TryMul(values, value_bytes, values) ||
      !TryAdd(kRowHeaderBytes, index_bytes, total) || !TryAdd(total, values, total)) {
    return false;
  }
  out = total;
  return true;
}

bool TryCooBytes(int64_t count, int64_t width, size_t value_bytes, size_t& out) {
  size_t index = 0;
  return count >= 0 && TryMul(static_cast<size_t>(count), sizeof(int64_t), index) &&
         TryMessageBytes(index, count, width, value_bytes, out);
}

// COO32's index: count uint32, zero-padded to a multiple of 8 bytes (the
// values stay 8-byte aligned).
bool TryCoo32Index(int64_t count, size_t& out) {
  size_t index = 0;
  if (count < 0 || !TryMul(static_cast<size_t>(count), sizeof(uint32_t), index) ||
      !TryAdd(index, size_t{7}, index)) {
    return false;
  }
  out = index / 8 * 8;
  return true;
}

bool TryCoo32Bytes(int64_t count, int64_t width, size_t value_bytes, size_t& out) {
  size_t index = 0;
  return TryCoo32Index(count, index) && TryMessageBytes(index, count, width, value_bytes, out);
}

bool TryBitmapBytes(int64_t domain_size, int64_t count, int64_t width, size_t value_bytes,
                    size_t& out) {
  return domain_size >= 0 && TryMessageBytes(BitmapWords(domain_size) * sizeof(uint64_t), count,
                                             width, value_bytes, out);
}

int EfLowBits(int64_t domain_size, int64_t count) {
  if (count <= 0 || domain_size < count) return 0;
  return static_cast<int>(std::bit_width(static_cast<uint64_t>(domain_size / count))) - 1;
}

// Elias-Fano's runs for count rows of a domain of domain_size: L low bits
// per row (count x L bits), count + ((domain_size - 1) >> L) + 1 high bits,
// each run in whole 64-bit words.
struct EfSizes {
  int l = 0;
  size_t low_bits = 0, high_bits = 0;
  size_t low_words = 0, high_words = 0;
};

// The sizes, or false (count outside [0, domain_size], or an overflow).
bool TryEfSizes(int64_t domain_size, int64_t count, EfSizes& out) {
  if (count < 0 || domain_size < count) return false;
  EfSizes e;
  e.l = EfLowBits(domain_size, count);
  if (!TryMul(static_cast<size_t>(count), static_cast<size_t>(e.l), e.low_bits)) return false;
  if (domain_size > 0 &&
      !TryAdd(static_cast<size_t>(count), ((static_cast<size_t>(domain_size) - 1) >> e.l) + 1,
              e.high_bits)) {
    return false;
  }
  e.low_words = e.low_bits / 64 + (e.low_bits % 64 != 0 ? 1 : 0);
  e.high_words = e.high_bits / 64 + (e.high_bits % 64 != 0 ? 1 : 0);
  out = e;
  return true;
}

bool TryEfIndex(int64_t domain_size, int64_t count, size_t& out) {
  EfSizes e;
  size_t words = 0;
  return TryEfSizes(domain_size, count, e) && TryAdd(e.low_words, e.high_words, words) &&
         TryMul(words, sizeof(uint64_t), out);
}

// Whether the last word of a run of `bits` bits has a bit set past them.
bool BitsPastEnd(uint64_t last_word, size_t bits) {
  return bits % 64 != 0 && (last_word >> (bits % 64)) != 0;
}

bool TryEfBytes(int64_t domain_size, int64_t count, int64_t width, size_t value_bytes,
                size_t& out) {
  size_t index = 0;
  return TryEfIndex(domain_size, count, index) &&
         TryMessageBytes(index, count, width, value_bytes, out);
}

}  // namespace

HashDomains::HashDomains(const RowOwner& owner) : owner_(owner) {
  if (!owner.has_domains()) {
    throw InvalidArgument(Where{}, "hash domains: the owner has no arithmetic domain positions "
                                   "(use RowOwner::Permuted or RowOwner::Range)");
  }
}

namespace {

// A COO or COO32 message's size; InvalidArgument on overflow.
size_t CheckedCooBytes(bool (*bytes)(int64_t, int64_t, size_t, size_t&), int64_t count,
                       int64_t width, size_t value_bytes) {
  size_t out = 0;
  if (!bytes(count, width, value_bytes, out)) {
    throw InvalidArgument(Where{}, "row message: ", count, " rows of width ", width,
                          " overflow the message size");
  }
  return out;
}

}  // namespace

size_t CooMessageBytes(int64_t count, int64_t width, size_t value_bytes) {
  return CheckedCooBytes(TryCooBytes, count, width, value_bytes);
}

size_t Coo32MessageBytes(int64_t count, int64_t width, size_t value_bytes) {
  return CheckedCooBytes(TryCoo32Bytes, count, width, value_bytes);
}

int EliasFanoLowBits(int64_t domain_size, int64_t count) {
  return EfLowBits(domain_size, count);
}

size_t EliasFanoMessageBytes(int64_t domain_size, int64_t count, int64_t width,
                             size_t value_bytes) {
  size_t out = 0;
  if (!TryEfBytes(domain_size, count, width, value_bytes, out)) {
    throw InvalidArgument(Where{}, "row message: Elias-Fano of ", count, " rows over ",
                          domain_size, " positions with width ", width,
                          " is not a message (count above the domain, or an overflowing size)");
  }
  return out;
}

size_t BitmapMessageBytes(int64_t domain_size, int64_t count, int64_t width,
                          size_t value_bytes) {
  size_t out = 0;
  if (!TryBitmapBytes(domain_size, count, width, value_bytes, out)) {
    throw InvalidArgument(Where{}, "row message: a bitmap of ", domain_size, " positions and ",
                          count, " rows of width ", width, " overflow the message size");
  }
  return out;
}

RowEncoding ChooseEncoding(int64_t domain_size, int64_t count) {
  // Index bytes: bitmap words x 8 against count x 8 (COO) or count x 4
  // rounded up to 8 (COO32); ties go to COO, which needs no domain.
  // Elias-Fano where it is smaller still.
  const size_t bitmap = BitmapWords(domain_size);  // in 8-byte words
  RowEncoding best = RowEncoding::kCoo;
  size_t words = static_cast<size_t>(count);
  if (domain_size <= kMaxCoo32Domain) {
    best = RowEncoding::kCoo32;
    words = (static_cast<size_t>(count) + 1) / 2;
  }
  if (bitmap < words) {
    best = RowEncoding::kHashBitmap;
    words = bitmap;
  }
  EfSizes ef;
  if (TryEfSizes(domain_size, count, ef) && ef.low_words + ef.high_words < words) {
    best = RowEncoding::kEliasFano;
  }
  return best;
}

RowEncoding ResolveEncoding(int64_t domain_size, int64_t count, EncodingChoice choice) {
  switch (choice) {
    case EncodingChoice::kCoo: return RowEncoding::kCoo;
    case EncodingChoice::kHashBitmap: return RowEncoding::kHashBitmap;
    case EncodingChoice::kCoo32:
      if (domain_size > kMaxCoo32Domain) {
        throw InvalidArgument(Where{}, "row message: COO32 over a domain of ", domain_size,
                              " positions (at most 2^32)");
      }
      return RowEncoding::kCoo32;
    case EncodingChoice::kCompactCoo:
      return domain_size <= kMaxCoo32Domain ? RowEncoding::kCoo32 : RowEncoding::kCoo;
    case EncodingChoice::kEliasFano: return RowEncoding::kEliasFano;
    default: return ChooseEncoding(domain_size, count);
  }
}

RowsLayout LayoutRows(int64_t domain_size, int64_t count, int64_t width, EncodingChoice choice,
                      size_t value_bytes) {
  if (width < 1 || count < 0 || domain_size < 0) {
    throw InvalidArgument(Where{}, "row message: ", count, " rows of width ", width,
                          " over a domain of ", domain_size);
  }
  RowsLayout l;
  l.encoding = ResolveEncoding(domain_size, count, choice);
  if (l.encoding == RowEncoding::kCoo) {
    l.bytes = CooMessageBytes(count, width, value_bytes);
    l.values_offset = kRowHeaderBytes + static_cast<size_t>(count) * sizeof(int64_t);
  } else if (l.encoding == RowEncoding::kCoo32) {
    l.bytes = Coo32MessageBytes(count, width, value_bytes);
    size_t index = 0;
    TryCoo32Index(count, index);  // cannot fail: the message size did not
    l.values_offset = kRowHeaderBytes + index;
  } else if (l.encoding == RowEncoding::kEliasFano) {
    l.bytes = EliasFanoMessageBytes(domain_size, count, width, value_bytes);
    size_t index = 0;
    TryEfIndex(domain_size, count, index);  // cannot fail: the message size did not
    l.values_offset = kRowHeaderBytes + index;
  } else {
    l.bytes = BitmapMessageBytes(domain_size, count, width, value_bytes);
    l.values_offset = kRowHeaderBytes + BitmapWords(domain_size) * sizeof(uint64_t);
  }
  return l;
}

namespace {

// The Elias-Fano index of `positions` (sizes `ef`) at `index`; check(i, p)
// validates each position.
template <typename Check>
void WriteEliasFanoIndex(std::span<const int64_t> positions, const EfSizes& ef, std::byte* index,
                         Check&& check) {
  const size_t low_words = ef.low_words, high_words = ef.high_words;
  const unsigned l = static_cast<unsigned>(ef.l);
  const uint64_t mask = l == 0 ? 0 : ~uint64_t{0} >> (64 - l);
  std::byte* high = index + low_words * sizeof(uint64_t);
  // Both runs are written word by word from registers: the low bits
  // append at i L, the high bits ascend (h + i grows with i).
  size_t lw = 0, fill = 0;  // low: the word being filled, its used bits
  uint64_t low_word = 0;
  size_t hw = 0;
  uint64_t high_word = 0;
  auto store = [](std::byte* at, size_t word, uint64_t value) {
    std::memcpy(at + word * sizeof(uint64_t), &value, sizeof(value));
  };
  for (size_t i = 0; i < positions.size(); ++i) {
    const int64_t p = positions[i];
    check(i, p);
    if (l != 0) {
      const uint64_t lo = static_cast<uint64_t>(p) & mask;
      low_word |= lo << fill;
      fill += l;
      if (fill >= 64) {
        store(index, lw++, low_word);
        fill -= 64;
        low_word = fill == 0 ? 0 : lo >> (l - fill);
      }
    }
    const size_t bit = static_cast<size_t>(static_cast<uint64_t>(p) >> l) + i;
    for (; hw < bit / 64; ++hw) {
      store(high, hw, high_word);
      high_word = 0;
    }
    high_word |= uint64_t{1} << (bit % 64);
  }
  if (fill != 0) store(index, lw++, low_word);
  for (; lw < low_words; ++lw) store(index, lw, 0);
  for (; hw < high_words; ++hw) {
    store(high, hw, high_word);
    high_word = 0;
  }
}

// The hash bitmap of `positions` over `domain_size` at `index`; check(i, p)
// validates each position.
template <typename Check>
void WriteBitmapIndex(std::span<const int64_t> positions, int64_t domain_size, std::byte* index,
                      Check&& check) {
  const size_t words = BitmapWords(domain_size);
  // Positions ascend: build each word in a register, store it once.
  size_t wi = 0;
  uint64_t word = 0;
  auto flush_to = [&](size_t upto) {
    for (; wi < upto; ++wi) {
      std::memcpy(index + wi * sizeof(uint64_t), &word, sizeof(word));
      word = 0;
    }
  };
  for (size_t i = 0; i < positions.size(); ++i) {
    const int64_t p = positions[i];
    check(i, p);
    flush_to(static_cast<size_t>(p >> 6));
    word |= uint64_t{1} << (p & 63);
  }
  flush_to(words);
}

}  // namespace

void WriteRowsIndex(int64_t domain_size, int64_t width, std::span<const int64_t> positions,
                    const RowsLayout& layout, std::span<std::byte> msg) {
  const int64_t count = static_cast<int64_t>(positions.size());
  if (msg.size() != layout.bytes) {
    throw InvalidArgument(Where{}, "write rows: a message of ", msg.size(), " bytes, the layout has ",
                          layout.bytes);
  }
  Header h;
  h.encoding = static_cast<uint8_t>(layout.encoding);
  h.count = count;
  h.width = width;
  std::byte* index = msg.data() + kRowHeaderBytes;
  int64_t prev = -1;
  auto check = [&](size_t i, int64_t p) {
    if (p <= prev || p >= domain_size) {
      throw InvalidArgument(Where{}, "encode rows: position ", p, " at row ", i,
                            " is outside [0, ", domain_size, ") or not ascending");
    }
    prev = p;
  };
  if (layout.encoding == RowEncoding::kCoo) {
    for (size_t i = 0; i < positions.size(); ++i) check(i, positions[i]);
    if (!positions.empty()) std::memcpy(index, positions.data(), positions.size() * sizeof(int64_t));
  } else if (layout.encoding == RowEncoding::kCoo32) {
    if (domain_size > kMaxCoo32Domain) {
      throw InvalidArgument(Where{}, "encode rows: COO32 over a domain of ", domain_size,
                            " positions (at most 2^32)");
    }
    for (size_t i = 0; i < positions.size(); ++i) {
      check(i, positions[i]);
      const uint32_t p = static_cast<uint32_t>(positions[i]);
      std::memcpy(index + i * sizeof(uint32_t), &p, sizeof(p));
    }
    const size_t used = positions.size() * sizeof(uint32_t);
    std::memset(index + used, 0, layout.values_offset - kRowHeaderBytes - used);
  } else if (layout.encoding == RowEncoding::kEliasFano) {
    h.domain_size = domain_size;
    EfSizes ef;
    if (!TryEfSizes(domain_size, count, ef) ||
        layout.values_offset !=
            kRowHeaderBytes + (ef.low_words + ef.high_words) * sizeof(uint64_t)) {
      throw InvalidArgument(Where{}, "encode rows: the layout is not Elias-Fano's for ", count,
                            " rows over ", domain_size, " positions");
    }
    WriteEliasFanoIndex(positions, ef, index, check);
  } else {
    h.domain_size = domain_size;
    WriteBitmapIndex(positions, domain_size, index, check);
  }
  std::memcpy(msg.data(), &h, sizeof(h));
}

RowEncoding EncodeRowsAt(int64_t domain_size, int64_t width, std::span<const int64_t> positions,
                         std::span<const std::byte> values, size_t value_bytes,
                         EncodingChoice choice, std::vector<std::byte>& out, size_t at) {
  const int64_t count = static_cast<int64_t>(positions.size());
  if (width < 1 || value_bytes == 0 ||
      values.size() != positions.size() * static_cast<size_t>(width) * value_bytes) {
    throw InvalidArgument(Where{}, "encode rows: ", values.size(), " value bytes for ", count,
                          " rows of width ", width, " with ", value_bytes, "-byte values");
  }
  const RowsLayout l = LayoutRows(domain_size, count, width, choice, value_bytes);
  size_t end = 0;
  if (!TryAdd(at, l.bytes, end)) throw InvalidArgument(Where{}, "encode rows: offset overflow");
  out.resize(end);
  const std::span<std::byte> msg(out.data() + at, l.bytes);
  WriteRowsIndex(domain_size, width, positions, l, msg);
  if (!values.empty()) {
    std::memcpy(msg.data() + l.values_offset, values.data(), values.size());
  }
  return l.encoding;
}

namespace {

// Where the values of a message with this header start.
bool ValuesOffset(const Header& h, int64_t domain_size, size_t& out) {
  if (h.encoding == static_cast<uint8_t>(RowEncoding::kCoo)) {
    size_t index = 0;
    if (h.count < 0 || !TryMul(static_cast<size_t>(h.count), sizeof(int64_t), index)) return false;
    return TryAdd(kRowHeaderBytes, index, out);
  }
  if (h.encoding == static_cast<uint8_t>(RowEncoding::kCoo32)) {
    size_t index = 0;
    return TryCoo32Index(h.count, index) && TryAdd(kRowHeaderBytes, index, out);
  }
  if (h.encoding == static_cast<uint8_t>(RowEncoding::kHashBitmap) && domain_size >= 0) {
    out = kRowHeaderBytes + BitmapWords(domain_size) * sizeof(uint64_t);
    return true;
  }
  if (h.encoding == static_cast<uint8_t>(RowEncoding::kEliasFano)) {
    size_t index = 0;
    return TryEfIndex(domain_size, h.count, index) && TryAdd(kRowHeaderBytes, index, out);
  }
  return false;
}

}  // namespace

size_t NarrowRowsValuesIn(std::span<std::byte> msg, WireValues v) {
  if (v == WireValues::kFloat32) return msg.size();
  Header h;
  std::memcpy(&h, msg.data(), sizeof(h));
  size_t offset = 0;
  if (!ValuesOffset(h, h.domain_size, offset)) {
    throw InvalidArgument(Where{}, "narrow rows: not an encoded rows message");
  }
  const size_t n = static_cast<size_t>(h.count) * static_cast<size_t>(h.width);
  std::byte* values = msg.data() + offset;
  // Forward in place: the 16-bit value i lands at or before float i.
  for (size_t i = 0; i < n; ++i) {
    float f;
    std::memcpy(&f, values + i * sizeof(float), sizeof(f));
    const uint16_t u = v == WireValues::kBfloat16 ? FloatToBfloat16Bits(f) : FloatToHalfBits(f);
    std::memcpy(values + i * sizeof(uint16_t), &u, sizeof(u));
  }
  h.reserved = static_cast<uint16_t>(v);
  std::memcpy(msg.data(), &h, sizeof(h));
  return offset + n * sizeof(uint16_t);
}

void NarrowRowsValues(std::vector<std::byte>& msg, size_t at, WireValues v) {
  if (v == WireValues::kFloat32) return;
  msg.resize(at + NarrowRowsValuesIn(std::span(msg).subspan(at), v));
}

namespace {

// Whether h heads a narrowed message of `width` over `domain_size` with
// values `v` (what WidenRowsValues and WidenRowsSequence accept); sets its
// values' offset, their count n, and its narrowed and widened sizes.
bool NarrowSizes(const Header& h, int64_t domain_size, int64_t width, WireValues v,
                 size_t& offset, size_t& n, size_t& narrow, size_t& wide) {
  return h.magic == kRowMagic && h.version == kRowVersion &&
         h.reserved == static_cast<uint16_t>(v) && h.width == width && h.count >= 0 &&
         h.count <= domain_size && ValuesOffset(h, domain_size, offset) &&
         TryMul(static_cast<size_t>(h.count), static_cast<size_t>(width), n) &&
         TryMul(n, sizeof(uint16_t), narrow) && TryAdd(offset, narrow, narrow) &&
         TryAdd(narrow, n * sizeof(uint16_t), wide);
}

// The n 16-bit values of the narrowed message at `message` (its values at
// byte `offset`), widened to float32 in place, backward (float i lands at
// or after the 16-bit value i; the message has room for them), and its
// header's format field cleared.
void WidenInPlace(std::byte* message, size_t offset, size_t n, WireValues v) {
  std::byte* values = message + offset;
  for (size_t i = n; i-- > 0;) {
    uint16_t u;
    std::memcpy(&u, values + i * sizeof(uint16_t), sizeof(u));
    const float f = v == WireValues::kBfloat16 ? Bfloat16BitsToFloat(u) : HalfBitsToFloat(u);
    std::memcpy(values + i * sizeof(float), &f, sizeof(f));
  }
  Header h;
  std::memcpy(&h, message, sizeof(h));
  h.reserved = 0;
  std::memcpy(message, &h, sizeof(h));
}

}  // namespace

void WidenRowsSequence(std::vector<std::byte>& bytes, size_t end, int64_t domain_size,
                       int64_t width, WireValues v, int server, const Where& where,
                       std::vector<size_t>& scratch) {
  if (v == WireValues::kFloat32) return;
  // Forward: each message's start, narrow size and wide size (scratch, 3 per
  // message), validated as WidenRowsValues validates a message.
  scratch.clear();
  size_t at = 0;
  while (at < end) {
    Header h;
    size_t offset = 0, n = 0, narrow = 0, wide = 0;
    if (end - at < kRowHeaderBytes) {
      throw FormatError(where, "row message from server ", server, " at byte ", at,
                        ": no room for its ", kRowHeaderBytes, "-byte header");
    }
    std::memcpy(&h, bytes.data() + at, sizeof(h));
    if (!NarrowSizes(h, domain_size, width, v, offset, n, narrow, wide) || narrow > end - at) {
      throw FormatError(where, "row message from server ", server, " at byte ", at,
                        ": not a message of width ", width, " with ", WireValuesName(v),
                        " values that fits (format field ", h.reserved, ")");
    }
    scratch.insert(scratch.end(), {at, narrow, wide});
    at = at + narrow == end ? end : RowsPadded(at + narrow);  // the last needs no padding
  }
  if (at != end) {
    throw FormatError(where, "row message from server ", server,
                      ": its last message's padding runs past the messages' end");
  }
  // Where each widened message starts (after the triples), and their end.
  const size_t count = scratch.size() / 3;
  size_t wide_end = 0;
  for (size_t k = 0; k < count; ++k) {
    scratch.push_back(wide_end);
    if (!TryAdd(wide_end, scratch[3 * k + 2], wide_end) || wide_end > SIZE_MAX - 8) {
      throw FormatError(where, "row message from server ", server, ": widened sizes overflow");
    }
    wide_end = RowsPadded(wide_end);
  }
  // The bytes after the messages first, then each message from the last
  // (never moved left: a widened message is larger), widened in place
  // backward (float i lands at or after the 16-bit value i), padding zeroed.
  const size_t tail = bytes.size() - end;
  bytes.resize(wide_end + tail);
  std::memmove(bytes.data() + wide_end, bytes.data() + end, tail);
  for (size_t k = count; k-- > 0;) {
    const size_t from = scratch[3 * k], narrow = scratch[3 * k + 1], wide = scratch[3 * k + 2];
    const size_t to = scratch[3 * count + k];
    const size_t next = k + 1 < count ? scratch[3 * count + k + 1] : wide_end;
    std::memmove(bytes.data() + to, bytes.data() + from, narrow);
    Header h;
    std::memcpy(&h, bytes.data() + to, sizeof(h));
    size_t offset = 0;
    ValuesOffset(h, domain_size, offset);  // checked above
    WidenInPlace(bytes.data() + to, offset, (wide - offset) / sizeof(float), v);
    std::fill(bytes.begin() + static_cast<std::ptrdiff_t>(to + wide),
              bytes.begin() + static_cast<std::ptrdiff_t>(next), std::byte{0});
  }
}

void WidenRowsValues(std::vector<std::byte>& msg, int64_t domain_size, int64_t width,
                     WireValues v, int server, const Where& where) {
  if (v == WireValues::kFloat32) return;
  Header h;
  size_t offset = 0, n = 0, narrow = 0, wide = 0;
  if (msg.size() < kRowHeaderBytes) {
    throw FormatError(where, "row message from server ", server, " has ", msg.size(),
                      " bytes, less than its ", kRowHeaderBytes, "-byte header");
  }
  std::memcpy(&h, msg.data(), sizeof(h));
  if (!NarrowSizes(h, domain_size, width, v, offset, n, narrow, wide) || narrow != msg.size()) {
    throw FormatError(where, "row message from server ", server, ": not a message of width ",
                      width, " with ", WireValuesName(v), " values (", msg.size(),
                      " bytes, format field ", h.reserved, ")");
  }
  msg.resize(wide);
  WidenInPlace(msg.data(), offset, n, v);
}

namespace {

// Every position of a parsed message strictly ascending inside [0, domain_size).
void CheckPositions(const RowsMessage& m, int64_t domain_size, int server, const Where& where) {
  int64_t prev = -1;
  m.ForEach([&](size_t i, int64_t p) {
    if (p <= prev || p >= domain_size) {
      throw FormatError(where, "row message from server ", server, ": position ", p, " at row ",
                        i, " is outside the server's domain [0, ", domain_size,
                        "), out of order or repeated");
    }
    prev = p;
  });
}

}  // namespace

void RowsMessage::ThrowBadPosition(int64_t domain_size, int server, const Where& where) const {
  CheckPositions(*this, domain_size, server, where);
  throw FormatError(where, "row message from server ", server,
                    ": a position failed its check, then passed it");  // unreachable
}

namespace {

// A message's header, checked against the reader's width and domain (not
// its encoding's fields: ViewIndex).
Header ReadHeader(std::span<const std::byte> message, int64_t domain_size, int server,
                  int64_t width, const Where& where) {
  if (message.size() < kRowHeaderBytes) {
    throw FormatError(where, "row message from server ", server, " has ", message.size(),
                      " bytes, less than its ", kRowHeaderBytes, "-byte header");
  }
  Header h;
  std::memcpy(&h, message.data(), sizeof(h));
  if (h.magic != kRowMagic || h.version != kRowVersion) {
    throw FormatError(where, "row message from server ", server, ": bad magic 0x", std::hex,
                      h.magic, std::dec, " / version ", int{h.version}, " (want 0x", std::hex,
                      kRowMagic, std::dec, " / ", int{kRowVersion}, ")");
  }
  if (h.reserved != 0) {
    throw FormatError(where, "row message from server ", server, ": values in wire format ",
                      h.reserved, " (",
                      h.reserved <= 2 ? WireValuesName(static_cast<WireValues>(h.reserved))
                                      : "unknown",
                      "), where float32 values (format 0) were expected");
  }
  if (h.width != width) {
    throw FormatError(where, "row message from server ", server, ": width ", h.width, ", expected ",
                      width);
  }
  if (h.count < 0 || h.count > domain_size) {
    throw FormatError(where, "row message from server ", server, ": count ", h.count,
                      " is outside [0, ", domain_size, "] (the server's domain size)");
  }
  return h;
}

// The message viewed per its encoding (index, values, Elias-Fano's runs in
// `ef`); `expect` the size it must have, false when that overflows.
bool ViewIndex(std::span<const std::byte> message, const Header& h, int64_t domain_size,
               int server, int64_t width, size_t value_bytes, const Where& where, RowsMessage& m,
               EfSizes& ef, size_t& expect) {
  m.count = h.count;
  m.width = width;
  m.index = message.data() + kRowHeaderBytes;
  bool fits = false;
  if (h.encoding == static_cast<uint8_t>(RowEncoding::kCoo)) {
    if (h.domain_size != 0) {
      throw FormatError(where, "row message from server ", server, ": COO with domain size ",
                        h.domain_size);
    }
    m.encoding = RowEncoding::kCoo;
    fits = TryCooBytes(h.count, width, value_bytes, expect);
    m.values = m.index + static_cast<size_t>(h.count) * sizeof(int64_t);
  } else if (h.encoding == static_cast<uint8_t>(RowEncoding::kCoo32)) {
    if (h.domain_size != 0) {
      throw FormatError(where, "row message from server ", server, ": COO32 with domain size ",
                        h.domain_size);
    }
    if (domain_size > kMaxCoo32Domain) {
      throw FormatError(where, "row message from server ", server, ": COO32 for a domain of ",
                        domain_size, " positions, more than its 2^32");
    }
    m.encoding = RowEncoding::kCoo32;
    fits = TryCoo32Bytes(h.count, width, value_bytes, expect);
    size_t index = 0;
    if (fits) TryCoo32Index(h.count, index);
    m.values = m.index + index;
  } else if (h.encoding == static_cast<uint8_t>(RowEncoding::kHashBitmap)) {
    if (h.domain_size != domain_size) {
      throw FormatError(where, "row message from server ", server, ": bitmap over ", h.domain_size,
                        " positions, but the server's domain has ", domain_size);
    }
    m.encoding = RowEncoding::kHashBitmap;
    m.words = BitmapWords(domain_size);
    fits = TryBitmapBytes(domain_size, h.count, width, value_bytes, expect);
    m.values = m.index + m.words * sizeof(uint64_t);
  } else if (h.encoding == static_cast<uint8_t>(RowEncoding::kEliasFano)) {
    if (h.domain_size != domain_size) {
      throw FormatError(where, "row message from server ", server, ": Elias-Fano over ",
                        h.domain_size, " positions, but the server's domain has ", domain_size);
    }
    m.encoding = RowEncoding::kEliasFano;
    fits = TryEfSizes(domain_size, h.count, ef) &&
           TryEfBytes(domain_size, h.count, width, value_bytes, expect);
    m.words = ef.high_words;
    m.low_bits = ef.l;
    m.high = m.index + ef.low_words * sizeof(uint64_t);
    m.values = m.high + m.words * sizeof(uint64_t);
  } else {
    throw FormatError(where, "row message from server ", server, ": unknown encoding ",
                      int{h.encoding});
  }
  return fits;
}

// The index's padding and bit runs checked, then its positions where
// `check_positions` (last: the first error is the same whether ParseRows or
// the reader checks them).
void CheckIndex(const RowsMessage& m, const Header& h, const EfSizes& ef, int64_t domain_size,
                int server, const Where& where, bool check_positions) {
  if (m.encoding == RowEncoding::kCoo || m.encoding == RowEncoding::kCoo32) {
    if (m.encoding == RowEncoding::kCoo32) {
      const std::byte* pad = m.index + static_cast<size_t>(h.count) * sizeof(uint32_t);
      if (std::any_of(pad, m.values, [](std::byte b) { return b != std::byte{0}; })) {
        throw FormatError(where, "row message from server ", server,
                          ": COO32 padding after the positions is not zero");
      }
    }
    if (check_positions) CheckPositions(m, domain_size, server, where);
  } else if (m.encoding == RowEncoding::kEliasFano) {
    // Exactly count high bits, none past the high run's bits, the unused
    // low bits zero, and the decoded positions strictly ascending inside
    // the domain (one decoding pass).
    uint64_t last = 0;
    const size_t pop = CountBits(m.high, m.words, last);
    if (pop != static_cast<size_t>(h.count)) {
      throw FormatError(where, "row message from server ", server, ": Elias-Fano high bits: ",
                        pop, " set but the header says ", h.count, " rows");
    }
    uint64_t low_last = 0;
    if (ef.low_words > 0) std::memcpy(&low_last, m.high - sizeof(uint64_t), sizeof(low_last));
    if (BitsPastEnd(last, ef.high_bits) || BitsPastEnd(low_last, ef.low_bits)) {
      throw FormatError(where, "row message from server ", server,
                        ": Elias-Fano has bits set past its ", h.count, " rows");
    }
    if (check_positions) CheckPositions(m, domain_size, server, where);
  } else {
    uint64_t last = 0;
    const size_t pop = CountBits(m.index, m.words, last);
    if (pop != static_cast<size_t>(h.count)) {
      throw FormatError(where, "row message from server ", server, ": bitmap has ", pop,
                        " bits set but the header says ", h.count, " rows");
    }
    if (BitsPastEnd(last, static_cast<size_t>(domain_size))) {
      throw FormatError(where, "row message from server ", server,
                        ": bitmap has bits set past the domain's ", domain_size, " positions");
    }
  }
}

}  // namespace

RowsMessage ParseRows(std::span<const std::byte> message, int64_t domain_size, int server,
                      int64_t width, const Where& where, PositionCheck positions,
                      size_t value_bytes) {
  const Header h = ReadHeader(message, domain_size, server, width, where);
  RowsMessage m;
  EfSizes ef;  // Elias-Fano's runs
  size_t expect = 0;
  const bool fits =
      ViewIndex(message, h, domain_size, server, width, value_bytes, where, m, ef, expect);
  if (!fits || message.size() != expect) {
    throw FormatError(where, "row message from server ", server, ": ", message.size(),
                      " bytes, expected ", fits ? std::to_string(expect) : std::string("an overflowing size"),
                      " for ", h.count, " rows of width ", width);
  }
  CheckIndex(m, h, ef, domain_size, server, where, positions == PositionCheck::kNow);
  return m;
}

RowsMessage ParseRowsAt(std::span<const std::byte> bytes, size_t& at, int64_t domain_size,
                        int server, int64_t width, const Where& where, PositionCheck positions,
                        size_t value_bytes) {
  if (at > bytes.size() || bytes.size() - at < kRowHeaderBytes) {
    throw FormatError(where, "row message from server ", server, " at byte ", at, " of ",
                      bytes.size(), ": no room for its ", kRowHeaderBytes, "-byte header");
  }
  Header h;
  std::memcpy(&h, bytes.data() + at, sizeof(h));
  // The length its header announces (ParseRows checks the header itself).
  size_t offset = 0, values = 0, size = 0;
  if (h.width != width || h.count < 0 || !ValuesOffset(h, domain_size, offset) ||
      !TryMul(static_cast<size_t>(h.count), static_cast<size_t>(width), values) ||
      !TryMul(values, value_bytes, values) || !TryAdd(offset, values, size) ||
      size > bytes.size() - at) {
    throw FormatError(where, "row message from server ", server, " at byte ", at, " of ",
                      bytes.size(), ": its header (encoding ", int{h.encoding}, ", ", h.count,
                      " rows of width ", h.width, ") does not announce a message that fits");
  }
  const RowsMessage m =
      ParseRows(bytes.subspan(at, size), domain_size, server, width, where, positions, value_bytes);
  // The last message of `bytes` needs no padding.
  const size_t end = at + size == bytes.size() ? bytes.size() : RowsPadded(at + size);
  if (end > bytes.size() ||
      std::any_of(bytes.begin() + static_cast<std::ptrdiff_t>(at + size),
                  bytes.begin() + static_cast<std::ptrdiff_t>(end),
                  [](std::byte b) { return b != std::byte{0}; })) {
    throw FormatError(where, "row message from server ", server, " at byte ", at,
                      ": the padding after it is missing or not zero");
  }
  at = end;
  return m;
}

}  // namespace zen
