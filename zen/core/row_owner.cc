// zen/core/row_owner.cc — see row_owner.h.
#include "zen/core/row_owner.h"

#include <algorithm>

#include "zen/core/error.h"

namespace zen {

RowOwner RowOwner::Hash(uint64_t seed, int servers) {
  RowOwner o;
  o.kind_ = Kind::kHash;
  o.servers_ = servers;
  o.hash_ = ServerHash(seed, servers);
  return o;
}

RowOwner RowOwner::Permuted(uint64_t seed, int64_t rows, int servers, int block_bits) {
  if (rows < 1 || rows > kMaxPermutedRows || servers < 1) {
    throw InvalidArgument(Where{}, "RowOwner::Permuted: rows ", rows, " must be in [1, 2^62] and servers ",
                          servers, " >= 1");
  }
  if (block_bits < 0 || block_bits > 32 || (rows >> block_bits) < 1) {
    throw InvalidArgument(Where{}, "RowOwner::Permuted: block_bits ", block_bits,
                          " must be in [0, 32] with 2^block_bits <= rows ", rows);
  }
  RowOwner o;
  o.kind_ = Kind::kPermuted;
  o.servers_ = servers;
  o.rows_ = rows;
  o.block_bits_ = block_bits;
  o.units_ = rows >> block_bits;
  o.block_mask_ = (int64_t{1} << block_bits) - 1;
  o.perm_ = RowPermutation(seed, o.units_);
  int64_t product = 0;
  o.narrow_ = !__builtin_mul_overflow(o.units_, int64_t{servers}, &product);
  o.by_units_ = Divider(static_cast<uint64_t>(o.units_));
  o.by_servers_ = Divider(static_cast<uint64_t>(servers));
  return o;
}

void RowOwner::IdBlocksOfKeyBlocksInPlace(std::span<uint64_t> words, int shift) const {
  MapBlocksInPlace(words, shift, /*inverse=*/true);
}

void RowOwner::KeyBlocksOfIdBlocksInPlace(std::span<uint64_t> words, int shift) const {
  MapBlocksInPlace(words, shift, /*inverse=*/false);
}

void RowOwner::MapBlocksInPlace(std::span<uint64_t> words, int shift, bool inverse) const {
  // The blocks below units_ in batches (the partial block's entries, the
  // last server's, are left as they are).
  constexpr size_t kBatch = 512;
  uint64_t blocks[kBatch];
  size_t at[kBatch];
  const uint64_t low = shift == 0 ? 0 : (uint64_t{1} << shift) - 1;
  const uint64_t units = static_cast<uint64_t>(units_);
  size_t i = 0;
  while (i < words.size()) {
    size_t count = 0;
    for (; i < words.size() && count < kBatch; ++i) {
      const uint64_t block = words[i] >> shift;
      if (block >= units) continue;
      at[count] = i;
      blocks[count++] = block;
    }
    (inverse ? perm_.InverseInPlace(std::span(blocks, count), 0)
             : perm_.ForwardInPlace(std::span(blocks, count), 0));
    for (size_t k = 0; k < count; ++k) {
      words[at[k]] = blocks[k] << shift | (words[at[k]] & low);
    }
  }
}

void RowOwner::BlocksInPlace(std::span<uint64_t> words, int shift, bool inverse) const {
  // The words' blocks (those below units_) in batches, one entry per run of
  // words of one block (a sorted list of ids, or a message's positions, has
  // several rows per block), permuted by the batched network, then put back
  // with each word's offset in its block and its low bits.
  constexpr size_t kBatch = 512;
  uint64_t blocks[kBatch];
  const uint64_t low = shift == 0 ? 0 : (uint64_t{1} << shift) - 1;
  const uint64_t units = static_cast<uint64_t>(units_);
  const uint64_t mask = static_cast<uint64_t>(block_mask_);
  size_t i = 0;
  while (i < words.size()) {
    // Runs from word i on: blocks[r] is run r's block; each run ends where
    // the next begins (found again below by comparing blocks).
    size_t runs = 0;
    size_t end = i;
    uint64_t last = ~uint64_t{0};
    for (; end < words.size(); ++end) {
      const uint64_t block = (words[end] >> shift) >> block_bits_;
      if (block == last || block >= units) continue;
      if (runs == kBatch) break;
      blocks[runs++] = last = block;
    }
    (inverse ? perm_.InverseInPlace(std::span(blocks, runs), 0)
             : perm_.ForwardInPlace(std::span(blocks, runs), 0));
    size_t r = 0;
    last = ~uint64_t{0};
    uint64_t mapped = 0;
    for (; i < end; ++i) {
      const uint64_t key = words[i] >> shift;
      const uint64_t block = key >> block_bits_;
      if (block >= units) continue;  // the partial block: its own keys
      if (block != last) {
        last = block;
        mapped = blocks[r++] << block_bits_;
      }
      words[i] = ((mapped | (key & mask)) << shift) | (words[i] & low);
    }
  }
}

RowOwner RowOwner::Range(int64_t rows, int servers) {
  if (rows < 1 || servers < 1) {
    throw InvalidArgument(Where{}, "RowOwner::Range: rows ", rows, " and servers ", servers,
                          " must both be >= 1");
  }
  RowOwner o;
  o.kind_ = Kind::kRange;
  o.servers_ = servers;
  o.rows_ = rows;
  o.units_ = rows;
  int64_t product = 0;
  o.narrow_ = !__builtin_mul_overflow(rows, int64_t{servers}, &product);
  o.by_units_ = Divider(static_cast<uint64_t>(rows));
  o.by_servers_ = Divider(static_cast<uint64_t>(servers));
  return o;
}

}  // namespace zen
