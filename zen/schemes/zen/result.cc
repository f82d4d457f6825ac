// zen/schemes/zen/result.cc — the union assembled from the pulled
// messages: Sync's sorted result, SyncInto's dense output, SyncDense's
// buffer. Each entry turns the dtype into its value type T once and
// assembles rows of T (the element path is float32's).
#include "zen/schemes/zen/zen.h"

#include <cstring>
#include <optional>
#include <vector>

#include "zen/core/error.h"
#include "zen/schemes/zen/internal.h"

namespace zen {

using zen_internal::Clock;
using zen_internal::Since;
using zen_internal::CallScope;

template <typename T, typename Fn>
size_t ZenScheme::ForEachPulledRow(const HashDomains& domains, int server, const Where& where,
                                   Fn&& fn, bool own_sole_rows) {
  const size_t j = static_cast<size_t>(server);
  const uint64_t start = static_cast<uint64_t>(domains.start(server));
  const RowOwner& owner = domains.owner();
  // The rows' ids are computed in batches (the permutation's batched
  // inverse): one scalar inverse per row, with its cycle walks, costs more
  // than copying a narrow row.
  constexpr size_t kBatch = 512;
  uint64_t ids[kBatch];
  const T* rows[kBatch];
  size_t n = 0;  // rows in the batch
  auto flush = [&] {
    owner.IdsOfKeysInPlace(std::span(ids, n), 0);
    for (size_t k = 0; k < n; ++k) fn(static_cast<int64_t>(ids[k]), rows[k]);
    n = 0;
  };
  // A grouped pull's rows come from several messages (each checked
  // strictly ascending) and this rank's partition: each position is marked,
  // and one seen before is an error. A plain message needs no marks.
  const bool grouped = ws_.pulled_own_sole[j] != 0 || !ws_.pulled_groups[j].empty();
  std::vector<uint64_t>& seen = ws_.seen_positions;
  if (grouped) seen.assign(static_cast<size_t>(domains.size(server) + 63) / 64, 0);
  auto mark = [&](int64_t p) {
    uint64_t& word = seen[static_cast<uint64_t>(p) >> 6];
    const uint64_t bit = uint64_t{1} << (p & 63);
    if ((word & bit) != 0) {
      throw FormatError(where, "zen: row ", domains.IdAt(server, p),
                        " is twice in the grouped pull of server ", server,
                        " (a malformed pull: a shared row also sent as a sole row, a sole row "
                        "twice, or a row this rank sent among another rank's sole rows)");
    }
    word |= bit;
  };
  auto add = [&](const RowsMessage& m, size_t i, int64_t p) {
    if (grouped) mark(p);
    ids[n] = start + static_cast<uint64_t>(p);
    rows[n++] = m.row<T>(i);
    if (n == kBatch) flush();
  };
  const RowsMessage& shared = ws_.pulled[j];
  size_t sole = 0;  // this rank's sole rows
  if (ws_.pulled_own_sole[j] != 0) {
    // This rank's sole rows, left out of the pull: the positions it pushed
    // here that are not shared (both ascending), its own ids and values.
    const PartitionsOf<T>& mine = ws_.mine.Of<T>();
    const std::span<const int64_t> pushed = mine.positions_of(server);
    const int64_t* own_ids = mine.ids.data() + mine.offsets[j];
    const T* own = mine.values_of(server).data();
    const size_t w = static_cast<size_t>(shared.width);
    auto own_row = [&](size_t o) {
      mark(pushed[o]);
      ++sole;
      if (own_sole_rows) fn(own_ids[o], own + o * w);
    };
    size_t o = 0;
    shared.ForEach([&](size_t i, int64_t p) {
      for (; o < pushed.size() && pushed[o] < p; ++o) own_row(o);
      if (o < pushed.size() && pushed[o] == p) ++o;
      add(shared, i, p);
    });
    for (; o < pushed.size(); ++o) own_row(o);
  } else {
    shared.ForEach([&](size_t i, int64_t p) { add(shared, i, p); });
  }
  for (const RowsMessage& g : ws_.pulled_groups[j]) {
    g.ForEach([&](size_t i, int64_t p) { add(g, i, p); });
  }
  if (n > 0) flush();
  return sole;
}

std::span<uint64_t> ZenScheme::ElementWords(const HashDomains& domains, int server,
                                            const Where& where, size_t at) {
  const RowsMessage& m = ws_.pulled[static_cast<size_t>(server)];
  const size_t count = static_cast<size_t>(m.count);
  // Grown only, never shrunk: a steady state neither allocates nor zeroes.
  if (ws_.result_words.size() < at + count) ws_.result_words.resize(at + count);
  uint64_t* out = ws_.result_words.data() + at;
  // The positions are checked on the way (ParseRows left them to this
  // reader); a bad one raises before the words are used.
  const uint64_t start = static_cast<uint64_t>(domains.start(server));
  const float* v = m.row(0);
  // Keys first (the lambda holds copies: its stores cannot alias them; a
  // branch-light pass over the index), then the ids.
  m.ForEachChecked(domains.size(server), server, where, [out, v, start](size_t i, int64_t p) {
    uint32_t bits;
    std::memcpy(&bits, v + i, sizeof(bits));
    out[i] = (start + static_cast<uint64_t>(p)) << 32 | bits;
  });
  const std::span<uint64_t> words(out, count);
  const RowOwner& owner = domains.owner();
  if (const int b = owner.block_bits(); b > 0) {
    // The keys' runs, in a pass over the words in cache (the positions
    // ascend, so a block's keys are one run), then each run's block of ids
    // (batched); the words keep their keys.
    const size_t first_run = ws_.runs.size();
    const int shift = 32 + b;
    uint64_t last = ~uint64_t{0};
    for (size_t i = 0; i < count; ++i) {
      const uint64_t block = out[i] >> shift;
      if (block == last) continue;
      last = block;
      ws_.runs.push_back(block << 32 | ws_.run_starts.size());
      ws_.run_starts.push_back(at + i);
    }
    owner.IdBlocksOfKeyBlocksInPlace(std::span(ws_.runs).subspan(first_run), 32);
    return words;
  }
  // The inverse permutation, batched (RowPermutation::InverseInPlace).
  owner.IdsOfKeysInPlace(words, 32);
  return words;
}

namespace {

// The rows of the result in id order: id_at(i) / row_at(i) name the i-th
// row of the sorted order; each row is copied once.
template <typename T, typename IdAt, typename RowAt>
void GatherRows(size_t total, int64_t width, IdAt id_at, RowAt row_at, std::vector<int64_t>& ids,
                std::vector<T>& values) {
  const size_t w = static_cast<size_t>(width);
  ids.reserve(total);
  if (w <= 16) {
    // Narrow rows: a zeroing pass over the values is cheaper than an
    // append (a memcpy call) per row; the rows are read in id order, i.e.
    // at random in the receive buffers, so each is prefetched a few rows
    // ahead (wide rows too, below: their first bytes).
    values.resize(total * w);
    T* dst = values.data();
    constexpr size_t kAhead = 16;
    for (size_t i = 0; i < total; ++i, dst += w) {
      if (i + kAhead < total) __builtin_prefetch(row_at(i + kAhead));
      ids.push_back(id_at(i));
      CopyRow(dst, row_at(i), width);
    }
    return;
  }
  // Appended into storage reserved without a zeroing pass.
  values.reserve(total * w);  // <= rows x width: checked when the call was validated
  // The row kAhead rows ahead (rows lie at random places): a row of up to
  // four cache lines (64 floats) is prefetched whole (docs/performance.md
  // measures what it saves the decode phase), a wider one by its first
  // line (the hardware's stream prefetch takes the rest).
  constexpr size_t kAhead = 4;
  const size_t row_bytes = w * sizeof(T) <= 256 ? w * sizeof(T) : 1;
  for (size_t i = 0; i < total; ++i) {
    if (i + kAhead < total) {
      const char* ahead = reinterpret_cast<const char*>(row_at(i + kAhead));
      for (size_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(ahead + b);
    }
    ids.push_back(id_at(i));
    const T* row = row_at(i);
    values.insert(values.end(), row, row + w);
  }
}

}  // namespace

SparseTensor ZenScheme::DoSync(Communicator& comm, const SparseTensor& local,
                              const SyncOptions& options) {
  const CallScope scope(call_, options, call_dtype_, local.dtype());
  return WithValueType(local.dtype(),
                                        [&]<typename T>() { return SyncOf<T>(comm, local); });
}

template <typename T>
SparseTensor ZenScheme::SyncOf(Communicator& comm, const SparseTensor& local) {
  // The servers' partitions are disjoint: each pulled message's rows are
  // collected as it arrives (for element-sparse tensors, width 1, one word
  // per row: the id above the value's bits; for wider rows the row's id and
  // where it lies), then the union is ordered by id (radix sort) and ids and
  // values are written once.
  const bool element = ElementPath(local);
  const Where where{comm.rank(), local.name()};
  // Wider rows below 2^32: one word per row too, the id above the row's
  // index (half the bytes of a KeyItem to sort).
  const bool packed = !element && local.rows() <= (int64_t{1} << 32);
  // (The element path writes each message's words at the start of
  // ws_.result_words, never zeroed: see ElementWords.)
  if (!element) ws_.result_words.clear();
  ws_.order.clear();
  ws_.rows.clear();
  // Element path: each message's words go to the result's sort as soon as
  // they are made.
  if (element) ws_.result_sort.Reset(32, KeyBits(local.rows()), static_cast<size_t>(comm.size()));
  // Element path with blocks (RowOwner::Permuted's block_bits > 0): each
  // message's words are kept where they are made, as runs of one block
  // each (a block's ids ascend within the message that holds it, and no
  // other message holds any of them); the runs are sorted by block after
  // the last message.
  int block_bits = 0;
  size_t filled = 0;
  ws_.runs.clear();
  ws_.run_starts.clear();
  const std::optional<HashDomains> exchanged =
      SparseExchange<T>(comm, local, {}, [&](const HashDomains& domains, int j) {
    if (element) {
      block_bits = domains.owner().block_bits();
      if (block_bits > 0) {
        filled += ElementWords(domains, j, where, filled).size();
        return;
      }
      // The sort buckets the words by their ids' high bits while they are
      // in cache, and while later messages still travel.
      ws_.result_sort.Add(ElementWords(domains, j, where));
      return;
    }
    ForEachPulledRow<T>(domains, j, where, [&](int64_t id, const T* row) {
      if (packed) {
        ws_.result_words.push_back(static_cast<uint64_t>(id) << 32 | ws_.rows.size());
      } else {
        ws_.order.push_back({id, static_cast<int64_t>(ws_.rows.size())});
      }
      ws_.rows.push_back(reinterpret_cast<const std::byte*>(row));
    });
  });
  if (!exchanged) return local;
  auto t0 = Clock::now();
  std::vector<int64_t> ids;
  std::vector<T> values;
  if constexpr (std::is_same_v<T, float>) {  // ElementPath: float32 only
    if (element && block_bits > 0) {
      ElementResultFromRuns(filled, block_bits, local.rows(), ids, values);
    } else if (element) {
      ElementResult(ids, values);
    }
  }
  if (!element) RowsResult<T>(packed, local.rows(), local.width(), ids, values);
  stats_.decode_seconds += Since(t0);
  stats_.result_rows = static_cast<int64_t>(ids.size());
  // Sorted, and unique by construction: the servers' domains are disjoint,
  // each message's positions were checked strictly ascending (by ParseRows
  // or as they were read), and a grouped pull's messages disjoint
  // (ForEachPulledRow).
  return SparseTensor::FromSortedUnchecked<T>(local.rows(), local.width(), std::move(ids),
                                              std::move(values), local.name());
}

void ZenScheme::ElementResultFromRuns(size_t filled, int block_bits, int64_t rows,
                                      std::vector<int64_t>& ids, std::vector<float>& values) {
  // The runs in block order (one word each: the block of ids above the
  // run's ordinal), then each run's words (keys) into the result in turn,
  // the id its block's base and the key's offset: ids and values written
  // once, in order.
  ws_.run_starts.push_back(filled);
  SortWordsByBits(ws_.runs, ws_.word_scratch, 32, KeyBits((rows >> block_bits) + 1));
  ids.resize(filled);
  values.resize(filled);
  int64_t* id = ids.data();
  float* value = values.data();
  const uint64_t* words = ws_.result_words.data();
  const size_t* starts = ws_.run_starts.data();
  const size_t runs = ws_.runs.size();
  const uint64_t mask = (uint64_t{1} << block_bits) - 1;
  constexpr size_t kAhead = 8;  // the runs lie at random in result_words
  for (size_t r = 0; r < runs; ++r) {
    if (r + kAhead < runs) {
      __builtin_prefetch(words + starts[static_cast<uint32_t>(ws_.runs[r + kAhead])]);
    }
    const size_t k = static_cast<uint32_t>(ws_.runs[r]);
    const uint64_t base = ws_.runs[r] >> 32 << block_bits;
    for (size_t i = starts[k]; i < starts[k + 1]; ++i) {
      const uint64_t x = words[i];
      *id++ = static_cast<int64_t>(base | ((x >> 32) & mask));
      const uint32_t bits = static_cast<uint32_t>(x);
      std::memcpy(value++, &bits, sizeof(bits));
    }
  }
}

void ZenScheme::ElementResult(std::vector<int64_t>& ids, std::vector<float>& values) {
  // Sorting the words orders the values too; the sort hands each word to
  // its place in the result as it ranks each bucket (no unpacking pass).
  ids.resize(ws_.result_sort.size());
  values.resize(ws_.result_sort.size());
  int64_t* id = ids.data();
  float* value = values.data();
  ws_.result_sort.Sort(ws_.word_scratch, [&](size_t i, uint64_t x) {
    id[i] = static_cast<int64_t>(x >> 32);
    const uint32_t bits = static_cast<uint32_t>(x);
    std::memcpy(value + i, &bits, sizeof(bits));
  });
}

template <typename T>
void ZenScheme::RowsResult(bool packed, int64_t rows, int64_t width, std::vector<int64_t>& ids,
                           std::vector<T>& values) {
  // The row's index is the payload: each row is copied once, in id order.
  if (packed) {
    SortWordsByBits(ws_.result_words, ws_.word_scratch, 32, KeyBits(rows));
    const uint64_t* words = ws_.result_words.data();
    GatherRows(
        ws_.result_words.size(), width,
        [&](size_t i) { return static_cast<int64_t>(words[i] >> 32); },
        [&](size_t i) {
          return reinterpret_cast<const T*>(ws_.rows[static_cast<uint32_t>(words[i])]);
        },
        ids, values);
    return;
  }
  SortByKey(ws_.order, ws_.sort_scratch, rows);
  const KeyItem* order = ws_.order.data();
  GatherRows(
      ws_.order.size(), width, [&](size_t i) { return order[i].key; },
      [&](size_t i) {
        return reinterpret_cast<const T*>(ws_.rows[static_cast<size_t>(order[i].item)]);
      },
      ids, values);
}

void ZenScheme::DoSyncInto(Communicator& comm, const SparseTensor& local, DenseValues out_values,
                           double divisor_value, const SyncOptions& options) {
  const CallScope scope(call_, options, call_dtype_, local.dtype());
  WithValueType(local.dtype(), [&]<typename T>() {
    SyncIntoOf<T>(comm, local, out_values.as<T>(), divisor_value);
  });
}

template <typename T>
void ZenScheme::SyncIntoOf(Communicator& comm, const SparseTensor& local, std::span<T> out,
                           double divisor_value) {
  // Each value sum / divisor in AccumOf<T> (float32: in float).
  using A = AccumOf<T>;
  const A divisor = static_cast<A>(divisor_value);
  // The output is zeroed while the partition is done and before the
  // exchange, where it overlaps the wait for the slowest peer; each pulled
  // message is written into it as soon as it arrives (the servers'
  // partitions are disjoint, so the order does not matter).
  const bool scaled = divisor != A{1};
  const bool element = ElementPath(local);
  const Where where{comm.rank(), local.name()};
  const size_t w = static_cast<size_t>(local.width());
  const std::optional<HashDomains> exchanged = SparseExchange<T>(
      comm, local, std::as_writable_bytes(out), [&](const HashDomains& domains, int j) {
    if constexpr (std::is_same_v<T, float>) {  // ElementPath: float32 only
      if (element) {
        ElementInto(domains, j, where, out, divisor);
        return;
      }
    }
    ForEachPulledRow<T>(domains, j, where, [&](int64_t id, const T* row) {
      T* dst = out.data() + static_cast<size_t>(id) * w;
      if (scaled) {
        for (size_t k = 0; k < w; ++k) dst[k] = Narrow<T>(Widen(row[k]) / divisor);
      } else {
        CopyRow(dst, row, local.width());
      }
      ++stats_.result_rows;
    });
  });
  if (!exchanged) WriteInto(local, DenseValues::Of(out), divisor_value);
}

void ZenScheme::ElementInto(const HashDomains& domains, int j, const Where& where,
                            std::span<float> out, float divisor) {
  const bool scaled = divisor != 1.0f;
  if (domains.owner().block_bits() > 0) {
    // Each run's block of ids, then its values written in order (a run's
    // targets are adjacent).
    const int b = domains.owner().block_bits();
    const uint64_t mask = (uint64_t{1} << b) - 1;
    ws_.runs.clear();
    ws_.run_starts.clear();
    const std::span<const uint64_t> words = ElementWords(domains, j, where);
    ws_.run_starts.push_back(words.size());
    for (size_t r = 0; r < ws_.runs.size(); ++r) {
      float* dst = out.data() + (ws_.runs[r] >> 32 << b);
      for (size_t i = ws_.run_starts[r]; i < ws_.run_starts[r + 1]; ++i) {
        const uint64_t x = words[i];
        const uint32_t bits = static_cast<uint32_t>(x);
        float v;
        std::memcpy(&v, &bits, sizeof(v));
        dst[(x >> 32) & mask] = scaled ? v / divisor : v;
      }
    }
  } else {
    float* dst = out.data();
    for (const uint64_t x : ElementWords(domains, j, where)) {
      const uint32_t bits = static_cast<uint32_t>(x);
      float v;
      std::memcpy(&v, &bits, sizeof(v));
      dst[x >> 32] = scaled ? v / divisor : v;
    }
  }
  stats_.result_rows += ws_.pulled[static_cast<size_t>(j)].count;
}

void ZenScheme::DoSyncDense(Communicator& comm, DenseValues buffer_values, int64_t rows,
                            int64_t width, std::string_view tensor,
                            const SyncOptions& options) {
  const CallScope scope(call_, options, call_dtype_, buffer_values.dtype);
  WithValueType(buffer_values.dtype, [&]<typename T>() {
    SyncDenseOf<T>(comm, buffer_values.as<T>(), rows, width, tensor);
  });
}

template <typename T>
void ZenScheme::SyncDenseOf(Communicator& comm, std::span<T> buffer, int64_t rows, int64_t width,
                            std::string_view tensor) {
  stats_ = ZenStats{};
  stats_.world = comm.size();
  stats_.rows = rows;
  stats_.width = width;
  stats_.dense_path = true;
  const Where where{comm.rank(), tensor};
  PartitionsOf<T>& mine = ws_.mine.Of<T>();
  if (comm.size() == 1) {
    auto t0 = Clock::now();
    dense_partitioner_->PartitionDense(std::span<const T>(buffer), rows, width,
                                       RowOwner::Range(rows, 1), mine);
    stats_.partition_seconds = Since(t0);
    stats_.local_rows = stats_.result_rows = mine.total();
    return;  // the buffer already holds the sum
  }
  const HashDomains domains = Prepare(comm, rows, width, where);
  auto t0 = Clock::now();
  dense_partitioner_->PartitionDense(std::span<const T>(buffer), rows, width, domains.owner(),
                                     mine);
  stats_.partition_seconds = Since(t0);
  stats_.local_rows = mine.total();

  // Every locally non-zero row is in the union, so writing the union's rows
  // overwrites all of them; rows outside the union are zero already. Each
  // pulled message is written as it arrives: the pushes were encoded and
  // this server's part aggregated before the pull round, so nothing reads
  // the buffer's old rows any more.
  // (A grouped pull's rows that only this rank contributed are its own,
  // in the buffer already: not rewritten.)
  Exchange<T>(comm, domains, width, where, [&](const HashDomains&, int j) {
    stats_.result_rows += static_cast<int64_t>(ForEachPulledRow<T>(
        domains, j, where,
        [&](int64_t id, const T* row) {
          CopyRow(buffer.data() + static_cast<size_t>(id) * static_cast<size_t>(width), row,
                  width);
          ++stats_.result_rows;
        },
        // (rewritten with half-width values: rounded as the others get them)
        /*own_sole_rows=*/call_.values != WireValues::kFloat32));
  });
}

// Explicit instantiations: DoSync, DoSyncInto and DoSyncDense reach these
// only through WithValueType's generic lambda, which clang 14 does not
// instantiate them from (undefined references at link time).
#define ZEN_INSTANTIATE(T, ...)                                                               \
  template SparseTensor ZenScheme::SyncOf<T>(Communicator&, const SparseTensor&);             \
  template void ZenScheme::SyncIntoOf<T>(Communicator&, const SparseTensor&, std::span<T>,    \
                                         double);                                             \
  template void ZenScheme::SyncDenseOf<T>(Communicator&, std::span<T>, int64_t, int64_t,      \
                                          std::string_view);
ZEN_FOR_EACH_VALUE_TYPE(ZEN_INSTANTIATE)
#undef ZEN_INSTANTIATE

}  // namespace zen
