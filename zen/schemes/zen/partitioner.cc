// zen/schemes/zen/partitioner.cc — see partitioner.h.
#include "zen/schemes/zen/partitioner.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "zen/core/error.h"
#include "zen/core/float_scan.h"
#include "zen/core/merge_rows.h"
#include "zen/core/radix_sort.h"
#include "zen/core/worker_pool.h"
#include "zen/schemes/zen/hierarchical_hash.h"

namespace zen {
// Per-thread state of the counting partitioner (outside the anonymous
// namespace: its member templates' lambdas capture it).
namespace counting_detail {
struct ChunkRows {
  std::vector<int64_t> items;      // dense: row ids; sparse: positions in ids
  std::vector<int32_t> owners;     // server of each item
  std::vector<int64_t> positions;  // domain position of each item
  std::vector<int64_t> counts;     // per server
};
}  // namespace counting_detail
using counting_detail::ChunkRows;

namespace {

// Rows of dense work per thread below which spawning does not pay.
constexpr int64_t kMinRowsPerChunk = 16384;
// Sparse rows (or gathered rows) per thread below which spawning a thread
// costs more than it saves (a thread start is ~50 us): typical calls run
// inline, with no thread per call.
constexpr int64_t kMinSparseRowsPerChunk = 1 << 18;

// `out` shaped for m rows of `width` over `servers` (capacity kept; the
// offsets zero).
template <typename T>
void ShapePartitions(PartitionsOf<T>& out, int servers, int64_t width, size_t m) {
  out.servers = servers;
  out.width = width;
  out.offsets.assign(static_cast<size_t>(servers) + 1, 0);
  out.ids.resize(m);
  out.positions.resize(m);
  out.values.resize(m * static_cast<size_t>(width));
}


// Shared second half of both counting paths: prefix sums, the scatter of
// (position, item) pairs, the per-server sort (Permuted owners only), and
// the write of ids, positions and values. id_of(item) gives the row id,
// row_of(item) the pointer to its values.
template <typename T, typename IdOf, typename RowOf>
void Scatter(std::vector<ChunkRows>& chunks, const RowOwner& owner, int64_t width, WorkerPool& pool,
             int threads,
             std::vector<std::vector<int64_t>>& cursor, std::vector<KeyItem>& order,
             std::vector<KeyItem>& sort_scratch, const IdOf& id_of, const RowOf& row_of,
             PartitionsOf<T>& out) {
  const int servers = owner.servers();
  const size_t n = static_cast<size_t>(servers);
  out.servers = servers;
  out.width = width;
  out.offsets.assign(n + 1, 0);
  // cursor[c][s]: where chunk c writes its first row for server s.
  cursor.resize(chunks.size());
  int64_t pos = 0;
  for (size_t s = 0; s < n; ++s) {
    out.offsets[s] = pos;
    for (size_t c = 0; c < chunks.size(); ++c) {
      cursor[c].resize(n);
      cursor[c][s] = pos;
      pos += chunks[c].counts[s];
    }
  }
  out.offsets[n] = pos;
  order.resize(static_cast<size_t>(pos));
  ParallelChunks(
      pool, threads, static_cast<int64_t>(chunks.size()), 1, [&](int, int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c) {
          ChunkRows& ch = chunks[static_cast<size_t>(c)];
          std::vector<int64_t>& cur = cursor[static_cast<size_t>(c)];
          for (size_t i = 0; i < ch.items.size(); ++i) {
            order[static_cast<size_t>(cur[static_cast<size_t>(ch.owners[i])]++)] = {
                ch.positions[i], ch.items[i]};
          }
        }
      });
  if (owner.kind() == RowOwner::Kind::kPermuted) {
    // (sequential: the sort scratch is shared; the sort is O(rows))
    for (int s = 0; s < servers; ++s) {
      SortByKey(std::span<KeyItem>(order).subspan(static_cast<size_t>(out.offsets[static_cast<size_t>(s)]),
                                                  static_cast<size_t>(out.count(s))),
                sort_scratch, owner.DomainSize(s));
    }
  }
  out.ids.resize(static_cast<size_t>(pos));
  out.positions.resize(static_cast<size_t>(pos));
  out.values.resize(static_cast<size_t>(pos) * static_cast<size_t>(width));
  ParallelChunks(pool, threads, pos, kMinSparseRowsPerChunk, [&](int, int64_t begin, int64_t end) {
    // The items are in position order, i.e. at random places of the input:
    // a later item's row is read ahead (a gather bound by memory latency
    // otherwise).
    constexpr int64_t kAhead = 16;
    const KeyItem* items = order.data();
    int64_t* ids = out.ids.data();
    int64_t* positions = out.positions.data();
    T* values = out.values.data();
    for (int64_t p = begin; p < end; ++p) {
      if (p + kAhead < end) __builtin_prefetch(row_of(items[p + kAhead].item));
      const KeyItem x = items[p];
      ids[p] = id_of(x.item);
      positions[p] = x.key;
      CopyRow(values + p * width, row_of(x.item), width);
    }
  });
}

}  // namespace

struct CountingPartitioner::Scratch {
  explicit Scratch(int threads) : pool(threads) {}
  WorkerPool pool;  // threads - 1 workers, started by the first parallel call
  std::vector<ChunkRows> chunks;
  std::vector<std::vector<int64_t>> cursor;
  std::vector<KeyItem> order;
  std::vector<KeyItem> sort_scratch;
  std::vector<uint64_t> words, word_scratch;  // the permuted sparse path
  std::vector<size_t> run_starts;             // its runs of a block (with blocks)

  // chunks.size() == n_chunks, each emptied (capacity kept) with zero counts.
  std::vector<ChunkRows>& Reset(int n_chunks, int servers) {
    chunks.resize(static_cast<size_t>(n_chunks));
    for (ChunkRows& c : chunks) {
      c.items.clear();
      c.owners.clear();
      c.positions.clear();
      c.counts.assign(static_cast<size_t>(servers), 0);
    }
    return chunks;
  }
};

CountingPartitioner::CountingPartitioner(int threads)
    : threads_(CheckedThreads(threads, "counting partitioner: threads")),
      scratch_(std::make_unique<Scratch>(threads_)) {}

CountingPartitioner::~CountingPartitioner() = default;

template <typename T>
void CountingPartitioner::DenseOf(std::span<const T> dense, int64_t rows, int64_t width,
                                  const RowOwner& owner, PartitionsOf<T>& out) {
  std::vector<ChunkRows>& chunks =
      scratch_->Reset(ChunkCount(threads_, rows, kMinRowsPerChunk), owner.servers());
  ParallelChunks(scratch_->pool, threads_, rows, kMinRowsPerChunk,
                 [&](int c, int64_t begin, int64_t end) {
    ChunkRows& ch = chunks[static_cast<size_t>(c)];
    ForEachNonZeroRow(dense.data(), width, begin, end, [&](int64_t r) {
      const RowPlace at = owner.Locate(r);
      ch.items.push_back(r);
      ch.owners.push_back(at.server);
      ch.positions.push_back(at.position);
      ++ch.counts[static_cast<size_t>(at.server)];
    });
  });
  Scatter(
      chunks, owner, width, scratch_->pool, threads_, scratch_->cursor, scratch_->order,
      scratch_->sort_scratch,
      [](int64_t r) { return r; },
      [&](int64_t r) { return dense.data() + r * width; }, out);
}

template <typename T>
void CountingPartitioner::SparseOf(std::span<const int64_t> ids, std::span<const T> values,
                                   int64_t width, const RowOwner& owner, PartitionsOf<T>& out) {
  const int64_t m = static_cast<int64_t>(ids.size());
  if (owner.kind() == RowOwner::Kind::kPermuted && owner.rows() <= (int64_t{1} << 32) &&
      m <= (int64_t{1} << 32)) {
    PartitionSparsePermuted(ids, values, width, owner, out);
    return;
  }
  std::vector<ChunkRows>& chunks =
      scratch_->Reset(ChunkCount(threads_, m, kMinSparseRowsPerChunk), owner.servers());
  ParallelChunks(scratch_->pool, threads_, m, kMinSparseRowsPerChunk,
                 [&](int c, int64_t begin, int64_t end) {
    ChunkRows& ch = chunks[static_cast<size_t>(c)];
    const size_t count = static_cast<size_t>(end - begin);
    ch.items.reserve(count);
    ch.owners.reserve(count);
    // Keys first, batched (the permutation's multiply chains of several rows
    // overlap), then each key's server and position.
    ch.positions.assign(ids.begin() + begin, ids.begin() + end);
    owner.KeysInPlace(ch.positions);
    for (size_t k = 0; k < count; ++k) {
      const RowPlace at = owner.PlaceOfKey(ch.positions[k]);
      ch.items.push_back(begin + static_cast<int64_t>(k));
      ch.owners.push_back(at.server);
      ch.positions[k] = at.position;
      ++ch.counts[static_cast<size_t>(at.server)];
    }
  });
  Scatter(
      chunks, owner, width, scratch_->pool, threads_, scratch_->cursor, scratch_->order,
      scratch_->sort_scratch,
      [&](int64_t i) { return ids[static_cast<size_t>(i)]; },
      [&](int64_t i) { return values.data() + i * width; }, out);
}

// Permuted owners (ZEN's): server s owns the keys pi(id) in its range
// [Start(s), Start(s + 1)) and a row's position is its key minus Start(s),
// so one radix sort of (key, item) words by key orders the rows by server
// and by position at once; each server's rows are then a run of the sorted
// words (found by the servers' starts). Keys and items below 2^32 share one
// 8-byte word: one sort instead of the generic path's per-row server
// lookup, scatter by server and per-server sorts.
template <typename T>
void CountingPartitioner::PartitionSparsePermuted(std::span<const int64_t> ids,
                                                  std::span<const T> values, int64_t width,
                                                  const RowOwner& owner, PartitionsOf<T>& out) {
  const size_t m = ids.size();
  const int servers = owner.servers();
  if (owner.block_bits() > 0) {
    PartitionSparseBlocks(ids, values, width, owner, out);
    return;
  }
  std::vector<uint64_t>& words = scratch_->words;
  words.resize(m);
  for (size_t i = 0; i < m; ++i) words[i] = static_cast<uint64_t>(ids[i]) << 32;
  owner.KeysOfIdsInPlace(words, 32);
  for (size_t i = 0; i < m; ++i) words[i] |= i;
  // Keys are distinct (so are the ids): sorted by key, the words are in
  // server and position order.
  SortWordsByBits(words, scratch_->word_scratch, 32, KeyBits(owner.rows()));
  ShapePartitions(out, servers, width, m);
  int64_t* out_ids = out.ids.data();
  int64_t* positions = out.positions.data();
  T* out_values = out.values.data();
  const size_t w = static_cast<size_t>(width);
  size_t p = 0;
  for (int s = 0; s < servers; ++s) {
    out.offsets[static_cast<size_t>(s)] = static_cast<int64_t>(p);
    const uint64_t start = static_cast<uint64_t>(owner.Start(s));
    const uint64_t end = static_cast<uint64_t>(owner.Start(s + 1));
    // The items are at random places of the input: a later item's id and
    // row are read ahead (a gather bound by memory latency otherwise).
    constexpr size_t kAhead = 16;
    for (; p < m && (words[p] >> 32) < end; ++p) {
      if (p + kAhead < m) {
        const size_t next = static_cast<size_t>(words[p + kAhead] & 0xFFFFFFFFu);
        __builtin_prefetch(&ids[next]);
        __builtin_prefetch(values.data() + next * w);
      }
      const size_t item = static_cast<size_t>(words[p] & 0xFFFFFFFFu);
      out_ids[p] = ids[item];
      positions[p] = static_cast<int64_t>((words[p] >> 32) - start);
      CopyRow(out_values + p * w, values.data() + item * w, width);
    }
  }
  out.offsets[static_cast<size_t>(servers)] = static_cast<int64_t>(p);
}

// Permuted owners with blocks: the sorted ids form runs of one block each,
// and a block's keys ascend with its ids, so sorting the runs (one word
// each: the block above the run's ordinal, mapped to its block of keys)
// orders the rows by server and position; each run's rows are then copied
// in input order. A server's range is whole blocks, so a run never spans
// two servers.
template <typename T>
void CountingPartitioner::PartitionSparseBlocks(std::span<const int64_t> ids,
                                                std::span<const T> values, int64_t width,
                                                const RowOwner& owner, PartitionsOf<T>& out) {
  const size_t m = ids.size();
  const int servers = owner.servers();
  const int b = owner.block_bits();
  std::vector<uint64_t>& runs = scratch_->words;
  std::vector<size_t>& starts = scratch_->run_starts;
  runs.clear();
  starts.clear();
  uint64_t last = ~uint64_t{0};
  for (size_t i = 0; i < m; ++i) {
    const uint64_t block = static_cast<uint64_t>(ids[i]) >> b;
    if (block == last) continue;
    last = block;
    runs.push_back(block << 32 | starts.size());
    starts.push_back(i);
  }
  starts.push_back(m);
  owner.KeyBlocksOfIdBlocksInPlace(runs, 32);
  SortWordsByBits(runs, scratch_->word_scratch, 32, KeyBits((owner.rows() >> b) + 1));
  ShapePartitions(out, servers, width, m);
  int64_t* out_ids = out.ids.data();
  int64_t* positions = out.positions.data();
  T* out_values = out.values.data();
  const size_t w = static_cast<size_t>(width);
  const int64_t mask = (int64_t{1} << b) - 1;
  int s = 0;
  int64_t start = owner.Start(0), end = owner.Start(1);
  size_t p = 0;
  for (const uint64_t run : runs) {
    const int64_t first = static_cast<int64_t>(run >> 32) << b;  // the block's first key
    while (first >= end) {  // the next server's range (it holds the block)
      ++s;
      out.offsets[static_cast<size_t>(s)] = static_cast<int64_t>(p);
      start = end;
      end = owner.Start(s + 1);
    }
    const size_t k = static_cast<uint32_t>(run);
    for (size_t i = starts[k]; i < starts[k + 1]; ++i, ++p) {
      out_ids[p] = ids[i];
      positions[p] = (first | (ids[i] & mask)) - start;
      CopyRow(out_values + p * w, values.data() + i * w, width);
    }
  }
  while (s < servers) out.offsets[static_cast<size_t>(++s)] = static_cast<int64_t>(p);
}

#define ZEN_INSTANTIATE(T, e, code, name)                                                      \
  template void CountingPartitioner::DenseOf<T>(std::span<const T>, int64_t, int64_t,          \
                                                const RowOwner&, PartitionsOf<T>&);            \
  template void CountingPartitioner::SparseOf<T>(std::span<const int64_t>, std::span<const T>, \
                                                 int64_t, const RowOwner&, PartitionsOf<T>&);
ZEN_FOR_EACH_VALUE_TYPE(ZEN_INSTANTIATE)
#undef ZEN_INSTANTIATE

std::unique_ptr<Partitioner> MakePartitioner(std::string_view kind, int threads) {
  if (kind == "counting") return std::make_unique<CountingPartitioner>(threads);
  if (kind == "hierarchical") return std::make_unique<HierarchicalHashPartitioner>(threads);
  throw InvalidArgument(Where{}, "unknown partitioner '", std::string(kind),
                        "' (known: counting, hierarchical)");
}

}  // namespace zen
