// zen/core/partition.h — splitting one rank's rows into per-server
// partitions: which server owns a row (RowOwner), the partition container,
// the Partitioner interface, and the counting (sort-free, two-pass)
// partitioner.
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
// A Partitioner reads either a dense [rows x width] buffer (rows that are
// all zero are skipped; width 1 means zero elements are skipped) or a sorted
// row-sparse list, of values of any value type T (zen/core/dtype.h: one
// overload per type, each a template instantiated at compile time), and
// produces PartitionsOf<T> (Partitions: float32's): one flat id array, the matching
// domain positions, and one flat value array grouped by server (offsets[s]
// .. offsets[s+1]), positions ascending within each server (for Range and
// Hash that is id order; for Permuted it is pi order). The interface takes spans and fills flat arrays so a
// CUDA implementation can sit behind it unchanged.
//
// Usage:
//   zen::RowOwner owner = zen::RowOwner::Hash(seed, n);
//   zen::CountingPartitioner part(/*threads=*/4);
//   zen::Partitions p;                             // float32 rows
//   part.PartitionDense(buffer, rows, width, owner, p);
//   for (int s = 0; s < n; ++s) Send(s, p.ids_of(s), p.values_of(s));
//   zen::PartitionsOf<zen::Bfloat16> h;            // the same for bfloat16
//   part.PartitionSparse(ids, bf16_values, width, owner, h);
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <algorithm>
#include <vector>

#include "zen/core/divider.h"
#include "zen/core/dtype.h"
#include "zen/core/float_scan.h"
#include "zen/core/hash.h"
#include "zen/core/row_permutation.h"
#include "zen/core/worker_pool.h"

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

// Per-server row partitions of one rank's data, values of type T (any value
// type of ZEN_FOR_EACH_VALUE_TYPE, zen/core/dtype.h).
template <typename T>
struct PartitionsOf {
  int servers = 0;
  int64_t width = 0;
  std::vector<int64_t> offsets;    // servers + 1 entries
  std::vector<int64_t> ids;        // grouped by server
  std::vector<int64_t> positions;  // RowOwner::Locate(ids[i]).position, ascending per server
  std::vector<T> values;           // ids.size() * width

  int64_t count(int s) const {
    return offsets[static_cast<size_t>(s) + 1] - offsets[static_cast<size_t>(s)];
  }
  int64_t total() const { return static_cast<int64_t>(ids.size()); }
  std::span<const int64_t> ids_of(int s) const {
    return std::span<const int64_t>(ids).subspan(First(s), static_cast<size_t>(count(s)));
  }
  std::span<const int64_t> positions_of(int s) const {
    return std::span<const int64_t>(positions).subspan(First(s), static_cast<size_t>(count(s)));
  }
  std::span<const T> values_of(int s) const {
    const size_t w = static_cast<size_t>(width);
    return std::span<const T>(values).subspan(First(s) * w, static_cast<size_t>(count(s)) * w);
  }

 private:
  size_t First(int s) const { return static_cast<size_t>(offsets[static_cast<size_t>(s)]); }
};
using Partitions = PartitionsOf<float>;

// A partitioner's two entries for values of type T, declared once per value
// type: PartitionDense takes the non-zero rows of dense (size rows * width;
// a row is zero when every value's widened value is 0, -0 included:
// float_scan.h's RowIsNonZero); PartitionSparse takes rows given as sorted
// unique ids with ids.size() * width values, every listed row kept (even an
// all-zero one: it is present). An implementation defines them once as
// member templates DenseOf<T> and SparseOf<T> and declares
// ZEN_PARTITIONER_OVERRIDES, which forwards each value type's pair there.
#define ZEN_PARTITIONER_ENTRIES(T, e, code, name)                                             \
  virtual void PartitionDense(std::span<const T> dense, int64_t rows, int64_t width,          \
                              const RowOwner& owner, PartitionsOf<T>& out) = 0;               \
  virtual void PartitionSparse(std::span<const int64_t> ids, std::span<const T> values,       \
                               int64_t width, const RowOwner& owner, PartitionsOf<T>& out) = 0;
#define ZEN_PARTITIONER_OVERRIDE(T, e, code, name)                                            \
  void PartitionDense(std::span<const T> dense, int64_t rows, int64_t width,                  \
                      const RowOwner& owner, PartitionsOf<T>& out) override {                 \
    DenseOf<T>(dense, rows, width, owner, out);                                               \
  }                                                                                           \
  void PartitionSparse(std::span<const int64_t> ids, std::span<const T> values, int64_t width, \
                       const RowOwner& owner, PartitionsOf<T>& out) override {                \
    SparseOf<T>(ids, values, width, owner, out);                                              \
  }
#define ZEN_PARTITIONER_OVERRIDES ZEN_FOR_EACH_VALUE_TYPE(ZEN_PARTITIONER_OVERRIDE)

class Partitioner {
 public:
  virtual ~Partitioner() = default;
  virtual std::string_view name() const = 0;
  ZEN_FOR_EACH_VALUE_TYPE(ZEN_PARTITIONER_ENTRIES)
};

// Two passes: each thread scans a contiguous chunk, counts rows per server
// and keeps the non-zero row list with each row's place; a prefix sum over
// (server, thread) gives every thread its write cursor per server; the
// threads then scatter (position, row) pairs. Chunks are in id order, so for
// Range and Hash owners the output is already in position order; for
// Permuted owners each server's pairs are sorted by position (radix sort)
// before ids, positions and values are written. One template per value
// type, chosen at compile time: float32's instantiation runs float32's
// loops (CopyRow's inline pieces, float_scan.h's SSE2 zero scan); the
// others copy rows by memcpy and test them a row at a time.
class CountingPartitioner final : public Partitioner {
 public:
  explicit CountingPartitioner(int threads = 1);
  ~CountingPartitioner() override;
  std::string_view name() const override { return "counting"; }
  ZEN_PARTITIONER_OVERRIDES

 private:
  template <typename T>
  void DenseOf(std::span<const T> dense, int64_t rows, int64_t width, const RowOwner& owner,
               PartitionsOf<T>& out);
  template <typename T>
  void SparseOf(std::span<const int64_t> ids, std::span<const T> values, int64_t width,
                const RowOwner& owner, PartitionsOf<T>& out);
  // PartitionSparsePermuted for owners with blocks (one sort of the runs).
  template <typename T>
  void PartitionSparseBlocks(std::span<const int64_t> ids, std::span<const T> values,
                             int64_t width, const RowOwner& owner, PartitionsOf<T>& out);
  // PartitionSparse for Permuted owners of at most 2^32 rows.
  template <typename T>
  void PartitionSparsePermuted(std::span<const int64_t> ids, std::span<const T> values,
                               int64_t width, const RowOwner& owner, PartitionsOf<T>& out);
  struct Scratch;
  int threads_;
  std::unique_ptr<Scratch> scratch_;  // per-thread lists, reused between calls
};

// "counting" or "hierarchical"; InvalidArgument for another name.
std::unique_ptr<Partitioner> MakePartitioner(std::string_view kind, int threads);

// Copies one row of width floats. Rows of up to 16 floats are copied
// inline in 16-byte pieces (the last one overlapping), not by a call to
// memcpy: a call per row of a narrow tensor (width 4: 16 bytes) costs more
// than the copy.
inline void CopyRow(float* dst, const float* src, int64_t width) {
  const size_t w = static_cast<size_t>(width);
  if (w >= 4 && w <= 16) {
    for (size_t k = 0; k + 4 < w; k += 4) std::memcpy(dst + k, src + k, 4 * sizeof(float));
    std::memcpy(dst + w - 4, src + w - 4, 4 * sizeof(float));
  } else if (w < 4) {  // width >= 1
    dst[0] = src[0];
    if (w > 1) dst[1] = src[1];
    if (w > 2) dst[2] = src[2];
  } else {
    std::memcpy(dst, src, w * sizeof(float));
  }
}
// One row of another value type (float64, the 16-bit types): a memcpy of
// its bytes.
template <typename T>
inline void CopyRow(T* dst, const T* src, int64_t width) {
  std::memcpy(dst, src, static_cast<size_t>(width) * sizeof(T));
}

// 0 -> std::thread::hardware_concurrency() (at least 1); otherwise threads.
int EffectiveThreads(int threads);

// The most threads one object (a scheme, a partitioner, a top-k selector)
// may run: each is a kernel thread with its own stack, and a count far above
// the machine's cores is a mistake that would otherwise end in a bare
// "Resource temporarily unavailable" from the first parallel call.
inline constexpr int kMaxThreads = 1024;

// A `threads` option checked and resolved: 0 -> EffectiveThreads(0), else
// it must be in [1, kMaxThreads]; InvalidArgument naming `what` (the option,
// e.g. "zen: threads") and the value otherwise.
int CheckedThreads(int threads, std::string_view what);

// The number of chunks ParallelChunks would use.
int ChunkCount(int threads, int64_t items, int64_t min_chunk);

// Splits [0, items) into at most min(threads, pool.size()) contiguous
// chunks of at least min_chunk items (one chunk if items is small) and runs
// fn(chunk, begin, end) for each on the pool's persistent workers and the
// calling thread (no thread is created per call). Returns the number of
// chunks. fn must not throw. One chunk runs inline on the caller: no
// hand-over and no allocation (the steady state of small calls).
template <typename Fn>
int ParallelChunks(WorkerPool& pool, int threads, int64_t items, int64_t min_chunk, const Fn& fn) {
  const int chunks = ChunkCount(std::min(std::max(threads, 1), pool.size()), items, min_chunk);
  if (chunks == 1) {
    fn(0, int64_t{0}, items);
    return 1;
  }
  auto bounds = [&](int c) { return items * c / chunks; };
  pool.Run(chunks, [&](int c) { fn(c, bounds(c), bounds(c + 1)); });
  return chunks;
}
}  // namespace zen
