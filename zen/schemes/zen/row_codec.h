// zen/schemes/zen/row_codec.h — ZEN's hash-bitmap row index (paper section 3.3)
// and the wire format of the rows ZEN sends.
//
// HashDomains: for an owner with arithmetic domains (RowOwner::Permuted,
// ZEN's; or RowOwner::Range), server j's domain D_j is the set of ids whose
// key (pi(id) for Permuted, id for Range) lies in [start_j, start_{j+1}),
// start_j = ceil(j rows / n); the position of id in D_j is key - start_j,
// and IdAt inverts it. Nothing is materialized: O(1) memory and time per
// row, whatever `rows` (2^40 rows cost nothing).
//
// A message carries rows of one server's partition by their positions in
// D_j (strictly ascending), in one of four encodings, chosen per message by
// size and tagged in a header:
//   COO          positions (int64 each) then values;
//   COO32        positions (uint32 each, for a domain of at most 2^32
//                positions), zero-padded to a multiple of 8 bytes, then
//                values: 4 bytes per row less than COO, a third of an
//                element-sparse (width 1) row;
//   hash bitmap  one bit per position of D_j (bit p set <=> the row at
//                position p is present; 64-bit words, little-endian bit
//                order, the unused tail bits zero) then the values in
//                position order;
//   Elias-Fano   each position split into its low L = floor(log2(|D_j| /
//                count)) bits, packed (count x L bits, 64-bit words,
//                little-endian bit order), and its high part h = p >> L,
//                stored as bit h + i of a second run of words (the i-th
//                row's; count + ((|D_j| - 1) >> L) + 1 bits); unused bits
//                zero; then the values.
// The bitmap costs ceil(|D_j| / 64) x 8 bytes whatever the count, so one
// rank receiving every server's bitmap receives about rows / 8 bytes of
// index in total, independent of n. COO costs 8 bytes per row, COO32 4,
// Elias-Fano at most L + 3 bits per row (0.75 byte at 1/16 density within
// the domain, where the bitmap needs 2 and COO32 4): the sparse rounds of
// element-sparse (width 1) tensors, where the index is half the message.
// kAuto picks the smallest (ties: COO32 or COO, then the bitmap).
//
// Layout (host byte order; all ranks of a job share one architecture):
//   uint32 magic 'ZENR' | uint8 version 2 | uint8 encoding | uint16 0
//   int64 count | int64 width | int64 domain size (bitmap) or 0 (COO, COO32)
//   index (count x int64, count x uint32 + padding, words x uint64, or
//          Elias-Fano's low words then high words) |
//   values (count x width values of the tensor's dtype, 8-byte aligned:
//          4 bytes each for float32, 8 for float64; value_bytes below)
// (Version 1 carried ids in id order; version 2 carries positions.)
// Parsing validates everything (magic, version, encoding, exact length with
// overflow-checked arithmetic, width, domain size, popcount == count, zero
// tail bits and padding, positions strictly ascending and inside D_j;
// Elias-Fano messages are decoded once for it, or the reader checks the
// positions as it decodes them: PositionCheck) and throws
// FormatError naming the rank, tensor and the bad field: received bytes
// never crash the decoder. ParseRows returns a view into the message (no
// copy): a receiver reduces straight out of its receive buffer.
// The values move as bytes: every size below takes `value_bytes`, the
// bytes of one value (DTypeSize of the tensor's dtype; float32's 4 by
// default). The header does not carry the dtype: the ranks agreed on it
// before any message moved (the metadata exchange), and the exact length
// check rejects a message of another value size.
//
// Usage:
//   zen::HashDomains domains(zen::RowOwner::Permuted(seed, rows, n));
//   std::vector<std::byte> msg;
//   zen::EncodeRows(domains.size(j), width, positions, values, zen::EncodingChoice::kAuto, msg);
//   zen::RowsMessage m = zen::ParseRows(msg, domains.size(j), j, width, zen::Where{rank, "emb"});
//   m.ForEach([&](size_t i, int64_t p) { use(domains.IdAt(j, p), m.row(i)); });
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "zen/core/error.h"
#include "zen/core/row_owner.h"
#include "zen/core/wire_values.h"

namespace zen {

class HashDomains {
 public:
  // owner.has_domains() (Range or Permuted); InvalidArgument otherwise.
  explicit HashDomains(const RowOwner& owner);

  int64_t rows() const { return owner_.rows(); }
  int servers() const { return owner_.servers(); }
  int64_t size(int server) const { return owner_.DomainSize(server); }
  int64_t start(int server) const { return owner_.Start(server); }
  // The largest |D_j|.
  int64_t max_size() const { return owner_.MaxDomainSize(); }
  RowPlace Locate(int64_t id) const { return owner_.Locate(id); }
  int64_t IdAt(int server, int64_t position) const { return owner_.IdAt(server, position); }
  const RowOwner& owner() const { return owner_; }

 private:
  RowOwner owner_;
};

enum class RowEncoding : uint8_t { kCoo = 1, kHashBitmap = 2, kCoo32 = 3, kEliasFano = 4 };
// kCoo32 needs a domain of at most kMaxCoo32Domain positions
// (InvalidArgument otherwise); kCompactCoo is kCoo32 where the domain
// allows it, else kCoo.
enum class EncodingChoice : uint8_t { kAuto, kCoo, kHashBitmap, kCoo32, kCompactCoo, kEliasFano };
inline constexpr int64_t kMaxCoo32Domain = int64_t{1} << 32;

inline constexpr size_t kRowHeaderBytes = 32;
inline constexpr uint32_t kRowMagic = 0x524E455A;  // "ZENR" in memory order
inline constexpr uint8_t kRowVersion = 2;

// Message sizes, header included; InvalidArgument on overflow.
size_t CooMessageBytes(int64_t count, int64_t width, size_t value_bytes = sizeof(float));
size_t Coo32MessageBytes(int64_t count, int64_t width, size_t value_bytes = sizeof(float));
size_t BitmapMessageBytes(int64_t domain_size, int64_t count, int64_t width,
                          size_t value_bytes = sizeof(float));
size_t EliasFanoMessageBytes(int64_t domain_size, int64_t count, int64_t width,
                             size_t value_bytes = sizeof(float));
// Elias-Fano's low bits per row for count rows of a domain of domain_size.
int EliasFanoLowBits(int64_t domain_size, int64_t count);
// What kAuto picks for `count` rows of a domain of domain_size.
RowEncoding ChooseEncoding(int64_t domain_size, int64_t count);
// What `choice` means for a domain of domain_size (kAuto: ChooseEncoding).
RowEncoding ResolveEncoding(int64_t domain_size, int64_t count, EncodingChoice choice);

// Encodes rows at `positions` (strictly ascending, in [0, domain_size)) with
// their values (positions.size() x width values of value_bytes each, as
// bytes) into `out` at byte offset `at` (out grows to at + message size;
// its capacity is reused, so a persistent buffer makes this
// allocation-free). Returns the encoding used. InvalidArgument for a bad
// position or a value count that does not match.
RowEncoding EncodeRowsAt(int64_t domain_size, int64_t width, std::span<const int64_t> positions,
                         std::span<const std::byte> values, size_t value_bytes,
                         EncodingChoice choice, std::vector<std::byte>& out, size_t at);
// The same for values of type T (float, double), out resized to the message.
template <typename T>
RowEncoding EncodeRows(int64_t domain_size, int64_t width, std::span<const int64_t> positions,
                       std::span<const T> values, EncodingChoice choice,
                       std::vector<std::byte>& out) {
  return EncodeRowsAt(domain_size, width, positions, std::as_bytes(values), sizeof(T), choice,
                      out, 0);
}
inline RowEncoding EncodeRows(int64_t domain_size, int64_t width,
                              std::span<const int64_t> positions, std::span<const float> values,
                              EncodingChoice choice, std::vector<std::byte>& out) {
  return EncodeRows<float>(domain_size, width, positions, values, choice, out);
}

// Building a message in place (the sender writes the values straight into
// the message, e.g. ZEN's server sums into its pull message):
struct RowsLayout {
  RowEncoding encoding = RowEncoding::kCoo;
  size_t bytes = 0;          // the whole message
  size_t values_offset = 0;  // where the count x width values start (8-aligned)
};
RowsLayout LayoutRows(int64_t domain_size, int64_t count, int64_t width, EncodingChoice choice,
                      size_t value_bytes = sizeof(float));
// Writes the header and the index of `positions` (layout from LayoutRows
// with positions.size() rows; msg.size() == layout.bytes). InvalidArgument
// for a bad position.
void WriteRowsIndex(int64_t domain_size, int64_t width, std::span<const int64_t> positions,
                    const RowsLayout& layout, std::span<std::byte> msg);

// A validated message, viewed in place (it points into the parsed bytes).
struct RowsMessage {
  RowEncoding encoding = RowEncoding::kCoo;
  int64_t count = 0;
  int64_t width = 0;
  // count int64 (COO), count uint32 (COO32), words uint64 (bitmap) or
  // Elias-Fano's low words (then its `words` high words at `high`)
  const std::byte* index = nullptr;
  size_t words = 0;                   // bitmap words, or Elias-Fano's high words
  const std::byte* high = nullptr;    // Elias-Fano: the high words
  int low_bits = 0;                   // Elias-Fano: L
  const std::byte* values = nullptr;  // count x width values

  // fn(i, position) for every row i in ascending position order.
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    if (encoding == RowEncoding::kCoo) {
      for (size_t i = 0; i < static_cast<size_t>(count); ++i) {
        int64_t p;
        std::memcpy(&p, index + i * sizeof(int64_t), sizeof(p));
        fn(i, p);
      }
      return;
    }
    if (encoding == RowEncoding::kCoo32) {
      for (size_t i = 0; i < static_cast<size_t>(count); ++i) {
        uint32_t p;
        std::memcpy(&p, index + i * sizeof(uint32_t), sizeof(p));
        fn(i, static_cast<int64_t>(p));
      }
      return;
    }
    if (encoding == RowEncoding::kEliasFano) {
      ForEachEliasFano(fn);
      return;
    }
    size_t i = 0;
    for (size_t wi = 0; wi < words; ++wi) {
      uint64_t w;
      std::memcpy(&w, index + wi * sizeof(uint64_t), sizeof(w));
      for (; w != 0; w &= w - 1) {
        fn(i++, static_cast<int64_t>(wi * 64 + static_cast<size_t>(std::countr_zero(w))));
      }
    }
  }
  // ForEach for a message parsed with PositionCheck::kByReader: the same
  // calls, fn(i, position) for every row, while each position is checked
  // against its predecessor and the domain on the way (no pass of its own);
  // once all are done, FormatError as ParseRows' for a position out of
  // order, repeated or outside [0, domain_size). fn sees the bad positions
  // before the error: it must only write what the reader discards on an
  // error (a scratch buffer), nothing the caller keeps.
  template <typename Fn>
  void ForEachChecked(int64_t domain_size, int server, const Where& where, Fn&& fn) const {
    int64_t prev = -1;
    bool bad = false;
    ForEach([&](size_t i, int64_t p) {
      bad |= (p <= prev) | (p >= domain_size);
      prev = p;
      fn(i, p);
    });
    if (bad) ThrowBadPosition(domain_size, server, where);
  }
  // Row i's width values as T, the message's value type (they start 8-byte
  // aligned in the message).
  template <typename T = float>
  const T* row(size_t i) const {
    return reinterpret_cast<const T*>(values) + i * static_cast<size_t>(width);
  }

  // Elias-Fano: the i-th set bit of the high words, at bit b, is row i's
  // high part b - i; its low part is bits [i L, (i + 1) L) of the low words,
  // read with one unaligned 8-byte load at byte i L / 8 (L <= 56; the high
  // words, at least one when count > 0, follow the low ones, so the load
  // stays inside the message), or from two words for a wider L. ParseRows
  // checked there are exactly count high bits and none past the run. Not
  // inlined into ForEach: inlined, its loop grew every caller of ForEach
  // and slowed the other encodings' paths (the shipped trace on the
  // testbed, bitmap pulls: 13.5-13.9 ms against 14.4-15.0 inlined).
  template <typename Fn>
  [[gnu::noinline]] void ForEachEliasFano(Fn&& fn) const {
    const unsigned l = static_cast<unsigned>(low_bits);
    const uint64_t mask = l == 0 ? 0 : ~uint64_t{0} >> (64 - l);
    size_t i = 0, bit = 0;  // row, and its low part's first bit
    for (size_t wi = 0; wi < words; ++wi) {
      uint64_t w;
      std::memcpy(&w, high + wi * sizeof(uint64_t), sizeof(w));
      for (; w != 0; w &= w - 1, ++i, bit += l) {
        const uint64_t h = wi * 64 + static_cast<uint64_t>(std::countr_zero(w)) - i;
        uint64_t lo = 0;
        if (l <= 56) {
          uint64_t a;
          std::memcpy(&a, index + bit / 8, sizeof(a));
          lo = (a >> (bit % 8)) & mask;
        } else {
          const size_t at = bit / 64, shift = bit % 64;
          uint64_t a;
          std::memcpy(&a, index + at * sizeof(uint64_t), sizeof(a));
          lo = a >> shift;
          if (shift + l > 64) {
            uint64_t b;
            std::memcpy(&b, index + (at + 1) * sizeof(uint64_t), sizeof(b));
            lo |= b << (64 - shift);
          }
          lo &= mask;
        }
        fn(i, static_cast<int64_t>(h << l | lo));
      }
    }
  }

 private:
  // ParseRows' FormatError for the first bad position (a second decoding
  // pass, on the error path only).
  [[noreturn]] void ThrowBadPosition(int64_t domain_size, int server, const Where& where) const;
};

// Whether ParseRows decodes the positions of a COO, COO32 or Elias-Fano
// message to check them (a bitmap's need no decoding).
enum class PositionCheck {
  kNow,       // strictly ascending inside the domain, checked by ParseRows
  kByReader,  // everything else checked; the reader, which decodes the
              // positions anyway, reads them with ForEachChecked
};

// Validates a message from the owner of a domain of domain_size (see the
// format above). FormatError, prefixed by `where` and naming `server`, for
// anything malformed.
RowsMessage ParseRows(std::span<const std::byte> message, int64_t domain_size, int server,
                      int64_t width, const Where& where,
                      PositionCheck positions = PositionCheck::kNow,
                      size_t value_bytes = sizeof(float));

// Messages back to back, each starting 8-byte aligned (ZEN's grouped
// pull, zen/schemes/zen.h): RowsPadded(size) is where the next one starts.
inline size_t RowsPadded(size_t bytes) { return (bytes + 7) & ~size_t{7}; }
// The message starting at byte `at` of `bytes`, parsed as ParseRows
// does, and `at` moved past it and its padding (zero bytes up to the next
// multiple of 8, inside `bytes`; none after the last message of `bytes`). FormatError, prefixed by `where` and
// naming `server`, for a header that does not fit, a message or padding
// running past the end, padding that is not zero, or anything ParseRows
// refuses.
RowsMessage ParseRowsAt(std::span<const std::byte> bytes, size_t& at, int64_t domain_size,
                        int server, int64_t width, const Where& where,
                        PositionCheck positions = PositionCheck::kNow,
                        size_t value_bytes = sizeof(float));

// Values on the wire at half width (opt-in, e.g. torch's bf16 compression
// composed with ZEN's sparsity): a message is encoded with float32 values as
// usual, then narrowed in place (its values become 16-bit, the message
// shrinks by 2 x count x width bytes, the header's format field says so);
// the receiver widens it back to float32 before ParseRows. Sums stay
// float32; only what crosses the wire is rounded (bfloat16: round to
// nearest even; float16: IEEE conversion, overflow to infinity). WireValues:
// zen/core/wire_values.h.
// The message of `msg` starting at byte `at` (to msg's end), encoded by
// EncodeRows/LayoutRows: its values narrowed; msg is resized. No-op for
// kFloat32.
void NarrowRowsValues(std::vector<std::byte>& msg, size_t at, WireValues v);
// The message occupying exactly `msg`, narrowed in place; returns its new
// size (msg.size() for kFloat32).
size_t NarrowRowsValuesIn(std::span<std::byte> msg, WireValues v);
// Narrowed messages back to back in bytes[0, end) (each starting 8-byte
// aligned, RowsPadded, the last unpadded or padded; ZEN's grouped pull),
// widened back in place: bytes
// grows, each message moves to its widened place (still back to back and
// aligned, the padding zeroed) and whatever followed `end` follows
// them. FormatError, prefixed by `where` and naming `server`, for a header
// that is not a narrowed message of `width` over `domain_size`, or sizes
// that do not add up to `end`. `scratch` is reused (no allocation once it
// has grown). No-op for kFloat32.
void WidenRowsSequence(std::vector<std::byte>& bytes, size_t end, int64_t domain_size,
                       int64_t width, WireValues v, int server, const Where& where,
                       std::vector<size_t>& scratch);
// A narrowed message (the whole of msg) widened back in place. FormatError,
// prefixed by `where` and naming `server`, when the header or the size does
// not match a narrowed message of `width` over `domain_size`. No-op for
// kFloat32.
void WidenRowsValues(std::vector<std::byte>& msg, int64_t domain_size, int64_t width,
                     WireValues v, int server, const Where& where);

}  // namespace zen
