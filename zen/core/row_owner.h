// zen/core/row_owner.h — which server owns a row, and where in that
// server's domain it sits: the ownership every scheme and tool that splits
// rows over servers shares (ZEN's push and pull, its row codec, the trace
// analyzer, zen.torch's permutation table).
//
// RowOwner is a small value type that maps a row id to a server:
//   - Permuted(seed, rows, n): ZEN's ownership: a keyed bijection pi of
//     [0, rows) (RowPermutation), server j owns the ids whose pi(id) falls in
//     [ceil(j rows / n), ceil((j+1) rows / n)); balanced whatever the skew,
//     and the position of id in its server's domain is pi(id) - start_j,
//     computed arithmetically (no per-row table), with an inverse (IdAt);
//     Permuted(seed, rows, n, b) permutes blocks of 2^b consecutive ids
//     instead: key(id) = pi(id >> b) << b | (id mod 2^b) for the rows >> b
//     whole blocks (the last partial block's ids are their own keys), and the
//     servers' ranges are whole blocks (the last also holds that tail). An
//     id's neighbours in its block stay its neighbours in the domain, so a
//     receiver gets each block's rows as one sorted run (ZEN's element-sparse
//     path puts its result in id order by sorting blocks, not rows); the
//     price is balance by blocks rather than by rows (zen chooses b for
//     width 1 only: ZenScheme::ElementBlockBits);
//   - Hash(seed, n): the paper's h0 (ServerHash, 4-independent), balanced
//     too but without arithmetic domain positions (the trace analyzer's
//     reference; position = id);
//   - Range(rows, n): even contiguous ranges, server j owns
//     [ceil(j rows / n), ceil((j+1) rows / n)) — Sparse PS / OmniReduce
//     style, kept for comparisons: skewed data overloads the low servers.
// It is trivially copyable, so a GPU kernel can take it by value.
//
// Usage:
//   const zen::RowOwner owner = zen::RowOwner::Permuted(seed, rows, servers);
//   const int s = owner(id);                       // the server of row id
//   const zen::RowPlace p = owner.Locate(id);      // its server and position
//   const int64_t back = owner.IdAt(p.server, p.position);  // == id
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

#include "zen/core/divider.h"
#include "zen/core/hash.h"
#include "zen/core/row_permutation.h"

namespace zen {

// Where a row lives: its server and its position in that server's domain.
struct RowPlace {
  int server = 0;
  int64_t position = 0;
};

class RowOwner {
 public:
  enum class Kind : uint8_t { kHash, kRange, kPermuted };

  RowOwner() = default;
  static RowOwner Hash(uint64_t seed, int servers);
  // rows >= 1, servers >= 1.
  static RowOwner Range(int64_t rows, int servers);
  // rows in [1, kMaxPermutedRows], servers >= 1, block_bits in [0, 32] with
  // rows >= 2^block_bits; InvalidArgument otherwise.
  static RowOwner Permuted(uint64_t seed, int64_t rows, int servers, int block_bits = 0);

  int operator()(int64_t id) const {
    if (kind_ == Kind::kHash) return hash_(id);
    return ServerOfKey(Key(id));
  }
  // Server and domain position of id (Hash: position = id).
  RowPlace Locate(int64_t id) const { return PlaceOfKey(Key(id)); }
  // The server and position of the row whose key (pi(id) for Permuted, the
  // id itself otherwise) is `key`.
  RowPlace PlaceOfKey(int64_t key) const {
    if (kind_ == Kind::kHash) return {hash_(key), key};
    const int s = ServerOfKey(key);
    return {s, key - Start(s)};
  }
  // Every id in `ids` replaced by its key, in place (the batched form of
  // Locate's first step, for hot loops); ids in [0, rows) for Permuted.
  void KeysInPlace(std::span<int64_t> ids) const {
    if (kind_ != Kind::kPermuted) return;
    // int64_t and uint64_t may alias; the ids are non-negative.
    KeysOfIdsInPlace(std::span(reinterpret_cast<uint64_t*>(ids.data()), ids.size()), 0);
  }
  // Range and Permuted: the first key of server s's range, ceil(s rows / n)
  // (with blocks: ceil(s blocks / n) blocks); Start(servers) == rows.
  int64_t Start(int s) const {
    if (s == servers_) return rows_;
    int64_t unit;
    if (narrow_) {  // s x units fits in 63 bits: a 64-bit division (by a multiply)
      unit = static_cast<int64_t>(by_servers_.Div(static_cast<uint64_t>(s) *
                                                      static_cast<uint64_t>(units_) +
                                                  static_cast<uint64_t>(servers_) - 1));
    } else {
      const auto n = static_cast<unsigned __int128>(servers_);
      unit = static_cast<int64_t>(
          (static_cast<unsigned __int128>(s) * static_cast<uint64_t>(units_) + n - 1) / n);
    }
    return unit << block_bits_;
  }
  // Range and Permuted: |D_s|.
  int64_t DomainSize(int s) const { return Start(s + 1) - Start(s); }
  // Range and Permuted: the largest |D_s| (the first server's, or with
  // blocks the last's, which also holds the partial block).
  int64_t MaxDomainSize() const {
    return servers_ == 1 ? DomainSize(0) : std::max(DomainSize(0), DomainSize(servers_ - 1));
  }
  // Range and Permuted: the id at `position` of D_s (position < DomainSize(s)).
  int64_t IdAt(int s, int64_t position) const { return IdOfKey(Start(s) + position); }
  // Range and Permuted: the id whose key (pi(id), or id) is `key` in [0, rows).
  int64_t IdOfKey(int64_t key) const {
    if (kind_ != Kind::kPermuted) return key;
    if (block_bits_ == 0) return perm_.Inverse(key);
    const int64_t block = key >> block_bits_;
    return block < units_ ? perm_.Inverse(block) << block_bits_ | (key & block_mask_) : key;
  }
  // Every id held in bits [shift, 64) of a word replaced by its key, in
  // place (RowPermutation::ForwardInPlace; unchanged for other owners). With
  // blocks, pi runs once per run of words of one block.
  void KeysOfIdsInPlace(std::span<uint64_t> words, int shift) const {
    if (kind_ != Kind::kPermuted) return;
    if (block_bits_ == 0) {
      perm_.ForwardInPlace(words, shift);
    } else {
      BlocksInPlace(words, shift, /*inverse=*/false);
    }
  }
  // IdOfKey of the key held in bits [shift, 64) of every word, in place (the
  // bits below ride along); the batched form of IdOfKey for hot loops.
  void IdsOfKeysInPlace(std::span<uint64_t> words, int shift) const {
    if (kind_ != Kind::kPermuted) return;
    if (block_bits_ == 0) {
      perm_.InverseInPlace(words, shift);
    } else {
      BlocksInPlace(words, shift, /*inverse=*/true);
    }
  }
  // Permuted: log2 of the ids per permuted block (0: every id permuted).
  int block_bits() const { return block_bits_; }
  // Permuted with blocks: the block of keys held in bits [shift, 64) of
  // every word (key >> block_bits) replaced by its block of ids, in place;
  // the partial block's (rows >> block_bits) stays. One entry per run of a
  // block: a receiver maps runs, not rows (id = block << block_bits | key's
  // low bits).
  void IdBlocksOfKeyBlocksInPlace(std::span<uint64_t> words, int shift) const;
  // The other way: blocks of ids to their blocks of keys.
  void KeyBlocksOfIdBlocksInPlace(std::span<uint64_t> words, int shift) const;
  // True where domains have arithmetic positions (Range, Permuted).
  bool has_domains() const { return kind_ != Kind::kHash; }

  Kind kind() const { return kind_; }
  int servers() const { return servers_; }
  uint64_t seed() const { return kind_ == Kind::kPermuted ? perm_.seed() : hash_.seed(); }
  int64_t rows() const { return rows_; }  // Range and Permuted (0 for Hash)

  friend bool operator==(const RowOwner&, const RowOwner&) = default;

 private:
  int64_t Key(int64_t id) const {
    if (kind_ != Kind::kPermuted) return id;
    if (block_bits_ == 0) return perm_(id);
    const int64_t block = id >> block_bits_;
    return block < units_ ? perm_(block) << block_bits_ | (id & block_mask_) : id;
  }
  int ServerOfKey(int64_t key) const {
    // The partial block's keys (block == units_) belong to the last server.
    const int64_t unit = std::min(key >> block_bits_, units_ - 1);
    if (narrow_) {
      return static_cast<int>(
          by_units_.Div(static_cast<uint64_t>(unit) * static_cast<uint64_t>(servers_)));
    }
    return static_cast<int>((static_cast<unsigned __int128>(unit) * static_cast<uint64_t>(servers_)) /
                            static_cast<uint64_t>(units_));
  }
  // KeysOfIdsInPlace / IdsOfKeysInPlace with blocks.
  void BlocksInPlace(std::span<uint64_t> words, int shift, bool inverse) const;
  // IdBlocksOfKeyBlocksInPlace / KeyBlocksOfIdBlocksInPlace.
  void MapBlocksInPlace(std::span<uint64_t> words, int shift, bool inverse) const;

  Kind kind_ = Kind::kHash;
  int servers_ = 1;
  int64_t rows_ = 0;
  int block_bits_ = 0;   // Permuted: ids per permuted block, log2
  int64_t units_ = 0;    // Range and Permuted: whole blocks, rows >> block_bits_
  int64_t block_mask_ = 0;
  bool narrow_ = false;  // units x servers < 2^63: 64-bit arithmetic suffices
  Divider by_units_;     // Range and Permuted: x / units without a divide
  Divider by_servers_;   // x / servers
  ServerHash hash_;
  RowPermutation perm_;
};

}  // namespace zen
