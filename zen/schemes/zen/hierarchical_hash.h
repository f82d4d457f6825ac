// zen/schemes/zen/hierarchical_hash.h — Algorithm 1 of the ZEN paper (hierarchical
// hashing), on CPU threads: non-zero rows of a gradient go straight into
// per-server partitions without a global sort or a counting pre-pass.
//
// Memory: per server s a parallel region of r1 slots and a serial overflow
// region of r2 slots (r1 = 2 x expected rows per server, r2 = r1 / 10 by
// default, as evaluated in the paper). For a non-zero row id:
//   level 1: s = h0(id) (RowOwner; identical on all ranks);
//   level 2: for t = 1..k (k = 3), slot = h_t(id) mod r1 in s's parallel
//     region; a slot is claimed lock-free: read it, and if empty
//     compare-exchange empty -> id. The compare-exchange is the paper's
//     read-after-write check fused into one atomic step: a plain write
//     followed by a re-read can still be overwritten by a thread that read
//     "empty" before the write, and that would lose a row;
//   after k failures: append to s's serial region with an atomic counter;
//   if that is full too: append to a per-thread spill list (never lost) —
//     the next call sizes r1 from this call's row count, so it grows.
// Then per server: the non-empty slots give the rows, which are sorted by
// domain position (RowOwner::Locate; the same owner and order as the
// counting partitioner's, so both produce identical partitions) and
// their values gathered. Every non-zero row lands exactly once: each row is
// scanned by one thread, and the total is checked against the threads'
// non-zero counts (an internal error if it ever differed).
//
// The level-2 hashes may differ between ranks; only h0 must agree.
//
// Usage:
//   zen::HierarchicalHashPartitioner part(/*threads=*/8);
//   zen::Partitions p;
//   part.PartitionDense(buffer, rows, width, zen::RowOwner::Hash(seed, n), p);
//   const zen::HierarchicalHashStats& st = part.last_stats();  // slots, overflow
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "zen/schemes/zen/partitioner.h"

namespace zen {

struct HierarchicalHashConfig {
  double parallel_factor = 2.0;           // r1 = factor x expected rows per server
  double serial_fraction = 0.1;           // r2 = fraction x r1
  int hashes = 3;                         // k second-level hashes
  int64_t min_slots = 64;                 // floor for r1 (and r2 >= min_slots / 4)
  uint64_t seed = 0x2e4ba5c1d3f7a9b1ULL;  // of the level-2 hashes (rank-local)
  // Rows expected in the next call: < 0 means "the previous call's count,
  // or, on the first dense call, an estimate from 4096 sampled rows".
  int64_t expected_rows = -1;
};

struct HierarchicalHashStats {
  int64_t rows = 0;            // non-zero rows extracted
  int64_t expected_rows = 0;   // what the regions were sized for
  int64_t parallel_slots = 0;  // r1, per server
  int64_t serial_slots = 0;    // r2, per server
  int64_t in_parallel = 0;     // rows placed in a parallel region
  int64_t in_serial = 0;       // rows placed in a serial region
  int64_t spilled = 0;         // rows that found both regions full
  int64_t probes = 0;          // failed slot attempts (collisions)
};

class HierarchicalHashPartitioner final : public Partitioner {
 public:
  explicit HierarchicalHashPartitioner(int threads = 1, HierarchicalHashConfig config = {});
  ~HierarchicalHashPartitioner() override;

  std::string_view name() const override { return "hierarchical"; }
  ZEN_PARTITIONER_OVERRIDES  // every value type (partitioner.h)

  const HierarchicalHashStats& last_stats() const { return stats_; }
  const HierarchicalHashConfig& config() const { return config_; }

 private:
  struct Tables;
  template <typename T>
  void DenseOf(std::span<const T> dense, int64_t rows, int64_t width, const RowOwner& owner,
               PartitionsOf<T>& out);
  template <typename T>
  void SparseOf(std::span<const int64_t> ids, std::span<const T> values, int64_t width,
                const RowOwner& owner, PartitionsOf<T>& out);
  template <typename T, typename Source>
  void Run(const Source& source, int64_t items, int64_t width, const RowOwner& owner,
           int64_t expected, PartitionsOf<T>& out);
  template <typename Source>
  void Insert(const Source& source, int64_t items, const RowOwner& owner, int64_t r1, int64_t r2);
  template <typename Source>
  void Collect(const Source& source, const RowOwner& owner, int64_t r1, int64_t r2,
               int server_threads);

  int threads_;
  HierarchicalHashConfig config_;
  HierarchicalHashStats stats_;
  int64_t previous_rows_ = -1;
  std::unique_ptr<Tables> tables_;
};

}  // namespace zen
