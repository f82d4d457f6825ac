// zen/core/hash_bitmap.h — ZEN's hash-bitmap row index (paper section 3.3)
// and the wire format of the rows ZEN sends.
//
// HashDomains: for a RowOwner over [0, rows), server j's domain is
// D_j = sorted {id : owner(id) = j}. The domains partition [0, rows); they
// depend only on (rows, owner), so every rank computes the same ones once
// and caches them (8 bytes per row in total).
//
// A message carries the rows of one server's partition (all in D_j), in
// one of two encodings, chosen per message by size and tagged in a header:
//   COO          ids (int64 each) then values;
//   hash bitmap  one bit per position of D_j (bit p set <=> row D_j[p] is
//                present; 64-bit words, little-endian bit order, the
//                unused tail bits zero) then the values in position order.
// The bitmap costs ceil(|D_j| / 64) x 8 bytes whatever the count, so one
// rank receiving every server's bitmap receives about rows / 8 bytes of
// index in total, independent of n. COO costs 8 bytes per row. kAuto picks
// the smaller (the bitmap wins above ~1/64 density within the domain).
//
// Layout (host byte order; all ranks of a job share one architecture):
//   uint32 magic 'ZENR' | uint8 version 1 | uint8 encoding | uint16 0
//   int64 count | int64 width | int64 domain size (bitmap) or 0 (COO)
//   index (count x int64, or words x uint64) | values (count x width float)
// Decoding validates everything (magic, version, encoding, exact length,
// width, domain size, popcount == count, zero tail bits, ids strictly
// ascending and inside D_j) and throws FormatError naming the rank, tensor
// and the bad field: received bytes never crash the decoder.
//
// Usage:
//   zen::HashDomains domains(rows, zen::RowOwner::Hash(seed, n));
//   std::vector<std::byte> msg;
//   zen::EncodeRows(domains, j, width, ids, values, zen::EncodingChoice::kAuto, msg);
//   zen::DecodedRows got;
//   zen::DecodeRows(msg, domains, j, width, zen::Where{rank, "emb"}, got);
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "zen/core/error.h"
#include "zen/core/partition.h"

namespace zen {

class HashDomains {
 public:
  // Computes D_0..D_{n-1} of [0, rows) under owner (n = owner.servers()),
  // using up to `threads` threads. rows in [1, 2^61 - 1).
  HashDomains(int64_t rows, const RowOwner& owner, int threads = 1);
  // Explicit domains (tests, worked examples): they must partition
  // [0, rows), each sorted; InvalidArgument otherwise.
  static HashDomains FromLists(int64_t rows, const std::vector<std::vector<int64_t>>& domains);

  int64_t rows() const { return rows_; }
  int servers() const { return static_cast<int>(offsets_.size()) - 1; }
  std::span<const int64_t> domain(int server) const;
  int64_t size(int server) const;

 private:
  HashDomains() = default;
  int64_t rows_ = 0;
  std::vector<int64_t> offsets_;  // servers + 1
  std::vector<int64_t> ids_;      // all domains, concatenated
};

enum class RowEncoding : uint8_t { kCoo = 1, kHashBitmap = 2 };
enum class EncodingChoice : uint8_t { kAuto, kCoo, kHashBitmap };

inline constexpr size_t kRowHeaderBytes = 32;
inline constexpr uint32_t kRowMagic = 0x524E455A;  // "ZENR" in memory order
inline constexpr uint8_t kRowVersion = 1;

// Message sizes, header included.
size_t CooMessageBytes(int64_t count, int64_t width);
size_t BitmapMessageBytes(int64_t domain_size, int64_t count, int64_t width);
// What kAuto picks for `count` rows of a domain of domain_size.
RowEncoding ChooseEncoding(int64_t domain_size, int64_t count);

// Encodes rows `ids` (strictly ascending, all in D_server) with their
// values (ids.size() x width) into out (replaced). Returns the encoding
// used. InvalidArgument if an id is not in D_server.
RowEncoding EncodeRows(const HashDomains& domains, int server, int64_t width,
                       std::span<const int64_t> ids, std::span<const float> values,
                       EncodingChoice choice, std::vector<std::byte>& out);

struct DecodedRows {
  RowEncoding encoding = RowEncoding::kCoo;
  std::vector<int64_t> ids;   // ascending, in D_server
  std::vector<float> values;  // ids.size() x width
};

// Decodes a message from the owner of D_server (see the format above).
// FormatError, prefixed by `where`, for anything malformed.
void DecodeRows(std::span<const std::byte> message, const HashDomains& domains, int server,
                int64_t width, const Where& where, DecodedRows& out);

}  // namespace zen
