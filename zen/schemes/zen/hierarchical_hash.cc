#include "zen/schemes/zen/hierarchical_hash.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "zen/core/error.h"
#include "zen/core/float_scan.h"
#include "zen/core/merge_rows.h"
#include "zen/core/radix_sort.h"
#include "zen/core/worker_pool.h"

namespace zen {
namespace {

constexpr int64_t kEmpty = -1;
constexpr int64_t kMinRowsPerChunk = 16384;
constexpr int kMaxHashes = 8;

// Items of a dense buffer: item r is row r; present if non-zero.
template <typename T>
struct DenseSource {
  const T* data;
  int64_t width;
  template <typename Fn>
  void ForEach(int64_t begin, int64_t end, Fn&& fn) const {
    ForEachNonZeroRow(data, width, begin, end, fn);
  }
  int64_t id(int64_t r) const { return r; }
  const T* row(int64_t r) const { return data + r * width; }
};

// Items of a sorted sparse list: item i is ids[i]; always present.
template <typename T>
struct SparseSource {
  const int64_t* ids;
  const T* values;
  int64_t width;
  template <typename Fn>
  void ForEach(int64_t begin, int64_t end, Fn&& fn) const {
    for (int64_t i = begin; i < end; ++i) fn(i);
  }
  int64_t id(int64_t i) const { return ids[i]; }
  const T* row(int64_t i) const { return values + i * width; }
};

struct ThreadTally {
  int64_t present = 0;
  int64_t in_parallel = 0;
  int64_t in_serial = 0;
  int64_t probes = 0;
  std::vector<std::pair<int64_t, int>> spill;  // (item, server)
};

std::unique_ptr<std::atomic<int64_t>[]> EmptySlots(size_t n) {
  auto slots = std::make_unique<std::atomic<int64_t>[]>(n);
  for (size_t i = 0; i < n; ++i) slots[i].store(kEmpty, std::memory_order_relaxed);
  return slots;
}

}  // namespace

// The two regions of all servers, reused between calls. Invariant between
// calls: every slot is empty and every serial counter is zero.
struct HierarchicalHashPartitioner::Tables {
  explicit Tables(int threads) : pool(threads) {}
  WorkerPool pool;  // threads - 1 workers, started by the first parallel call
  int servers = 0;
  int64_t r1 = 0;
  int64_t r2 = 0;
  std::unique_ptr<std::atomic<int64_t>[]> parallel;  // servers x r1
  std::unique_ptr<std::atomic<int64_t>[]> serial;    // servers x r2
  std::unique_ptr<std::atomic<int64_t>[]> serial_used;
  std::vector<std::vector<KeyItem>> chosen;  // per server (position, item), capacity reused
  std::vector<std::vector<KeyItem>> sort_scratch;  // per server
  std::vector<ThreadTally> tally;                  // per chunk

  void Ensure(int n, int64_t want_r1, int64_t want_r2) {
    if (n == servers && want_r1 == r1 && want_r2 == r2) return;
    servers = n;
    r1 = want_r1;
    r2 = want_r2;
    parallel = EmptySlots(static_cast<size_t>(n) * static_cast<size_t>(r1));
    serial = EmptySlots(static_cast<size_t>(n) * static_cast<size_t>(r2));
    serial_used = std::make_unique<std::atomic<int64_t>[]>(static_cast<size_t>(n));
    for (int s = 0; s < n; ++s) serial_used[static_cast<size_t>(s)].store(0);
  }
};

HierarchicalHashPartitioner::HierarchicalHashPartitioner(int threads, HierarchicalHashConfig config)
    : threads_(CheckedThreads(threads, "hierarchical partitioner: threads")),
      config_(config),
      tables_(std::make_unique<Tables>(threads_)) {
  if (config_.hashes < 1 || config_.hashes > kMaxHashes) {
    throw InvalidArgument(Where{}, "hierarchical hash: k = ", config_.hashes,
                          " second-level hashes is outside [1, ", kMaxHashes, "]");
  }
  if (!(config_.parallel_factor > 0) || !(config_.serial_fraction >= 0) || config_.min_slots < 1) {
    throw InvalidArgument(Where{}, "hierarchical hash: parallel_factor ", config_.parallel_factor,
                          ", serial_fraction ", config_.serial_fraction, ", min_slots ",
                          config_.min_slots, " must be > 0, >= 0, >= 1");
  }
}

HierarchicalHashPartitioner::~HierarchicalHashPartitioner() = default;

template <typename T>
void HierarchicalHashPartitioner::DenseOf(std::span<const T> dense, int64_t rows, int64_t width,
                                          const RowOwner& owner, PartitionsOf<T>& out) {
  int64_t expected = config_.expected_rows >= 0 ? config_.expected_rows : previous_rows_;
  if (expected < 0) {
    // First call: estimate the density from evenly spaced rows.
    const int64_t samples = std::min<int64_t>(rows, 4096);
    int64_t hits = 0;
    for (int64_t i = 0; i < samples; ++i) {
      hits += RowIsNonZero(dense.data() + (i * rows / samples) * width, width) ? 1 : 0;
    }
    expected = samples == 0 ? 0 : hits * rows / samples;
  }
  Run(DenseSource<T>{dense.data(), width}, rows, width, owner, expected, out);
}

template <typename T>
void HierarchicalHashPartitioner::SparseOf(std::span<const int64_t> ids, std::span<const T> values,
                                           int64_t width, const RowOwner& owner,
                                           PartitionsOf<T>& out) {
  // The row count is known exactly here.
  const int64_t m = static_cast<int64_t>(ids.size());
  Run(SparseSource<T>{ids.data(), values.data(), width}, m, width, owner,
      config_.expected_rows >= 0 ? config_.expected_rows : m, out);
}

// Level 1 and 2: one pass, every thread on its own contiguous chunk of
// items; each present item claims a slot of its server's parallel region,
// else of its serial region, else goes to its thread's spill list.
template <typename Source>
void HierarchicalHashPartitioner::Insert(const Source& source, int64_t items,
                                         const RowOwner& owner, int64_t r1, int64_t r2) {
  Tables& t = *tables_;
  const int k = config_.hashes;
  UniversalHash level2[kMaxHashes];
  for (int h = 0; h < k; ++h) level2[h] = UniversalHash(DeriveSeed(config_.seed, h + 1), 2);
  std::vector<ThreadTally>& tally = t.tally;  // reused: no allocation per call
  tally.resize(static_cast<size_t>(ChunkCount(threads_, items, kMinRowsPerChunk)));
  for (ThreadTally& th : tally) {
    th.present = th.in_parallel = th.in_serial = th.probes = 0;
    th.spill.clear();
  }
  ParallelChunks(t.pool, threads_, items, kMinRowsPerChunk, [&](int c, int64_t begin, int64_t end) {
    ThreadTally& my = tally[static_cast<size_t>(c)];
    source.ForEach(begin, end, [&](int64_t i) {
      ++my.present;
      const int64_t id = source.id(i);
      const int s = owner(id);
      std::atomic<int64_t>* region = t.parallel.get() + static_cast<size_t>(s) * r1;
      for (int h = 0; h < k; ++h) {
        std::atomic<int64_t>& slot =
            region[level2[h](static_cast<uint64_t>(id), static_cast<uint64_t>(r1))];
        // Read first (cheap when taken), then claim with one atomic step.
        int64_t seen = slot.load(std::memory_order_relaxed);
        if (seen == kEmpty && slot.compare_exchange_strong(seen, i, std::memory_order_relaxed)) {
          ++my.in_parallel;
          return;
        }
        ++my.probes;
      }
      const int64_t p =
          t.serial_used[static_cast<size_t>(s)].fetch_add(1, std::memory_order_relaxed);
      if (p < r2) {
        t.serial[static_cast<size_t>(s) * r2 + p].store(i, std::memory_order_relaxed);
        ++my.in_serial;
      } else {
        my.spill.emplace_back(i, s);
      }
    });
  });
}

// Per server: the non-empty slots, the serial region and the spills, in
// t.chosen[s] sorted into position order; the tables reset for the next call.
template <typename Source>
void HierarchicalHashPartitioner::Collect(const Source& source, const RowOwner& owner, int64_t r1,
                                          int64_t r2, int server_threads) {
  Tables& t = *tables_;
  const int n = owner.servers();
  const std::vector<ThreadTally>& tally = t.tally;
  std::vector<std::vector<KeyItem>>& chosen = t.chosen;
  chosen.resize(static_cast<size_t>(n));
  t.sort_scratch.resize(static_cast<size_t>(n));
  // The position of item v in its server's domain (Range/Hash: id order).
  auto place = [&](int64_t v) -> KeyItem { return {owner.Locate(source.id(v)).position, v}; };
  ParallelChunks(t.pool, server_threads, n, 1, [&](int, int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s) {
      std::vector<KeyItem>& mine = chosen[static_cast<size_t>(s)];
      mine.clear();
      std::atomic<int64_t>* region = t.parallel.get() + static_cast<size_t>(s) * r1;
      for (int64_t j = 0; j < r1; ++j) {
        const int64_t v = region[j].load(std::memory_order_relaxed);
        if (v != kEmpty) {
          mine.push_back(place(v));
          region[j].store(kEmpty, std::memory_order_relaxed);
        }
      }
      const int64_t used = std::min(r2, t.serial_used[static_cast<size_t>(s)].load());
      std::atomic<int64_t>* serial = t.serial.get() + static_cast<size_t>(s) * r2;
      for (int64_t j = 0; j < used; ++j) {
        mine.push_back(place(serial[j].load(std::memory_order_relaxed)));
        serial[j].store(kEmpty, std::memory_order_relaxed);
      }
      t.serial_used[static_cast<size_t>(s)].store(0);
      for (const ThreadTally& th : tally) {
        for (const auto& [item, server] : th.spill) {
          if (server == s) mine.push_back(place(item));
        }
      }
      // Into position order (for Range and Hash owners that is item order:
      // dense items are ids, sparse items index sorted ids).
      SortByKey(mine, t.sort_scratch[static_cast<size_t>(s)],
                owner.has_domains() ? owner.DomainSize(static_cast<int>(s)) : INT64_MAX);
    }
  });
}

template <typename T, typename Source>
void HierarchicalHashPartitioner::Run(const Source& source, int64_t items, int64_t width,
                                      const RowOwner& owner, int64_t expected,
                                      PartitionsOf<T>& out) {
  const int n = owner.servers();
  const size_t un = static_cast<size_t>(n);
  const int64_t per_server = (expected + n - 1) / n;
  const int64_t r1 = std::max<int64_t>(
      config_.min_slots,
      static_cast<int64_t>(std::ceil(config_.parallel_factor * static_cast<double>(per_server))));
  const int64_t r2 =
      std::max<int64_t>(std::max<int64_t>(1, config_.min_slots / 4),
                        static_cast<int64_t>(std::ceil(config_.serial_fraction * r1)));
  Tables& t = *tables_;
  t.Ensure(n, r1, r2);
  Insert(source, items, owner, r1, r2);
  // Per-server work in parallel only when there is enough of it (a small
  // call runs inline: no thread, no allocation).
  const int server_threads = items >= 2 * kMinRowsPerChunk ? threads_ : 1;
  Collect(source, owner, r1, r2, server_threads);
  const std::vector<ThreadTally>& tally = t.tally;
  const std::vector<std::vector<KeyItem>>& chosen = t.chosen;

  HierarchicalHashStats st;
  st.expected_rows = expected;
  st.parallel_slots = r1;
  st.serial_slots = r2;
  for (const ThreadTally& th : tally) {
    st.rows += th.present;
    st.in_parallel += th.in_parallel;
    st.in_serial += th.in_serial;
    st.spilled += static_cast<int64_t>(th.spill.size());
    st.probes += th.probes;
  }

  out.servers = n;
  out.width = width;
  out.offsets.assign(un + 1, 0);
  for (size_t s = 0; s < un; ++s) {
    out.offsets[s + 1] = out.offsets[s] + static_cast<int64_t>(chosen[s].size());
  }
  if (out.offsets[un] != st.rows || st.in_parallel + st.in_serial + st.spilled != st.rows) {
    throw Error("hierarchical hash: internal error: " + std::to_string(st.rows) +
                " non-zero rows but " + std::to_string(out.offsets[un]) + " collected");
  }
  out.ids.resize(static_cast<size_t>(st.rows));
  out.positions.resize(static_cast<size_t>(st.rows));
  out.values.resize(static_cast<size_t>(st.rows) * static_cast<size_t>(width));
  ParallelChunks(t.pool, server_threads, n, 1, [&](int, int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s) {
      int64_t pos = out.offsets[static_cast<size_t>(s)];
      for (const auto& [position, item] : chosen[static_cast<size_t>(s)]) {
        out.ids[static_cast<size_t>(pos)] = source.id(item);
        out.positions[static_cast<size_t>(pos)] = position;
        CopyRow(out.values.data() + static_cast<size_t>(pos) * width, source.row(item), width);
        ++pos;
      }
    }
  });
  stats_ = st;
  previous_rows_ = st.rows;
}

#define ZEN_INSTANTIATE(T, e, code, name)                                                    \
  template void HierarchicalHashPartitioner::DenseOf<T>(std::span<const T>, int64_t, int64_t, \
                                                        const RowOwner&, PartitionsOf<T>&);   \
  template void HierarchicalHashPartitioner::SparseOf<T>(                                    \
      std::span<const int64_t>, std::span<const T>, int64_t, const RowOwner&, PartitionsOf<T>&);
ZEN_FOR_EACH_VALUE_TYPE(ZEN_INSTANTIATE)
#undef ZEN_INSTANTIATE

}  // namespace zen
