// zen/schemes/zen/partitioner.h — splitting one rank's rows into
// per-server partitions for ZEN's push: the partition container, the
// Partitioner interface, the counting (sort-free, two-pass) partitioner and
// MakePartitioner ("counting" or "hierarchical", the paper's Algorithm 1 in
// hierarchical_hash.h). Which server owns a row is a RowOwner
// (zen/core/row_owner.h).
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
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "zen/core/dtype.h"
#include "zen/core/row_owner.h"

namespace zen {

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
// loops (merge_rows.h's CopyRow, float_scan.h's SSE2 zero scan); the
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

}  // namespace zen
