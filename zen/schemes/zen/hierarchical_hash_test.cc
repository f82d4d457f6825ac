#include "zen/schemes/zen/hierarchical_hash.h"

#include <gtest/gtest.h>

#include <random>

#include "zen/core/error.h"

namespace zen {
namespace {

std::vector<float> DenseWithRows(int64_t rows, int64_t width, const std::vector<int64_t>& nz) {
  std::vector<float> d(static_cast<size_t>(rows * width), 0.0f);
  for (int64_t r : nz) {
    for (int64_t k = 0; k < width; ++k) {
      d[static_cast<size_t>(r * width + k)] =
          static_cast<float>(r % 97 + 1) + 0.25f * static_cast<float>(k);
    }
  }
  return d;
}

std::vector<int64_t> RandomRows(int64_t rows, double density, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution b(density);
  std::vector<int64_t> out;
  for (int64_t r = 0; r < rows; ++r) {
    if (b(rng)) out.push_back(r);
  }
  return out;
}

// The counting partitioner is the reference (itself checked against brute
// force in partitioner_test.cc): identical offsets, ids and values.
void ExpectSameAsCounting(std::span<const float> dense, int64_t rows, int64_t width,
                          const RowOwner& owner, HierarchicalHashPartitioner& hh) {
  Partitions want, got;
  CountingPartitioner(1).PartitionDense(dense, rows, width, owner, want);
  hh.PartitionDense(dense, rows, width, owner, got);
  EXPECT_EQ(got.offsets, want.offsets);
  EXPECT_EQ(got.ids, want.ids);
  EXPECT_EQ(got.positions, want.positions);
  EXPECT_EQ(got.values, want.values);
  const HierarchicalHashStats& st = hh.last_stats();
  EXPECT_EQ(st.rows, want.total());
  EXPECT_EQ(st.in_parallel + st.in_serial + st.spilled, st.rows);
}

TEST(HierarchicalHash, LosslessUnderHeavyContention) {
  const int64_t rows = 200000, width = 2;
  const std::vector<int64_t> nz = RandomRows(rows, 0.3, 1);
  const std::vector<float> dense = DenseWithRows(rows, width, nz);
  HierarchicalHashPartitioner hh(8);
  for (int n : {1, 3, 8}) {
    ExpectSameAsCounting(dense, rows, width, RowOwner::Hash(4, n), hh);
    ExpectSameAsCounting(dense, rows, width, RowOwner::Permuted(4, rows, n), hh);
  }
}

TEST(HierarchicalHash, DefaultSizingRarelyOverflows) {
  const int64_t rows = 100000;
  const std::vector<int64_t> nz = RandomRows(rows, 0.05, 2);
  const std::vector<float> dense = DenseWithRows(rows, 1, nz);
  HierarchicalHashPartitioner hh(2);
  ExpectSameAsCounting(dense, rows, 1, RowOwner::Hash(1, 4), hh);  // sizes from sampling
  ExpectSameAsCounting(dense, rows, 1, RowOwner::Hash(1, 4), hh);  // from the previous call
  const HierarchicalHashStats& st = hh.last_stats();
  EXPECT_EQ(st.expected_rows, static_cast<int64_t>(nz.size()));
  // r1 = 2 x expected per server; k = 3 at load 1/2 leaves few rows for r2.
  EXPECT_EQ(st.parallel_slots, (2 * ((st.expected_rows + 3) / 4)));
  EXPECT_EQ(st.spilled, 0);
  EXPECT_LT(st.in_serial, st.rows / 20);
  EXPECT_GT(st.in_parallel, st.rows * 9 / 10);
}

TEST(HierarchicalHash, FullRegionsSpillWithoutLosingRows) {
  const int64_t rows = 60000, width = 3;
  const std::vector<int64_t> nz = RandomRows(rows, 0.5, 3);
  const std::vector<float> dense = DenseWithRows(rows, width, nz);
  HierarchicalHashConfig cfg;
  cfg.expected_rows = 10;  // wildly underestimated: r1 = r2 = min_slots
  cfg.min_slots = 4;
  HierarchicalHashPartitioner hh(4, cfg);
  ExpectSameAsCounting(dense, rows, width, RowOwner::Hash(8, 5), hh);
  ExpectSameAsCounting(dense, rows, width, RowOwner::Permuted(8, rows, 5), hh);
  const HierarchicalHashStats& st = hh.last_stats();
  EXPECT_EQ(st.parallel_slots, 4);
  EXPECT_GT(st.in_serial, 0);
  EXPECT_GT(st.spilled, st.rows / 2);
}

TEST(HierarchicalHash, ContiguousRangeSizedFromSamplesThenFromCount) {
  // All non-zeros in one contiguous range: the first call sizes from the
  // sampled density, the second from the first call's exact count.
  const int64_t rows = 400000;
  std::vector<int64_t> nz;
  for (int64_t r = 123456; r < 123456 + 20000; ++r) nz.push_back(r);
  const std::vector<float> dense = DenseWithRows(rows, 1, nz);
  HierarchicalHashPartitioner hh(2);
  ExpectSameAsCounting(dense, rows, 1, RowOwner::Hash(2, 8), hh);
  ExpectSameAsCounting(dense, rows, 1, RowOwner::Hash(2, 8), hh);
  EXPECT_EQ(hh.last_stats().expected_rows, 20000);
  EXPECT_EQ(hh.last_stats().spilled, 0);
}

TEST(HierarchicalHash, RangeOwnerAndSparseInput) {
  const int64_t rows = 30000, width = 4;
  const std::vector<int64_t> nz = RandomRows(rows, 0.1, 4);
  const std::vector<float> dense = DenseWithRows(rows, width, nz);
  HierarchicalHashPartitioner hh(3);
  ExpectSameAsCounting(dense, rows, width, RowOwner::Range(rows, 6), hh);

  std::vector<float> values;
  for (int64_t r : nz)
    values.insert(values.end(), dense.begin() + r * width, dense.begin() + (r + 1) * width);
  Partitions want, got;
  CountingPartitioner(1).PartitionSparse(nz, values, width, RowOwner::Permuted(3, rows, 6), want);
  hh.PartitionSparse(nz, values, width, RowOwner::Permuted(3, rows, 6), got);
  EXPECT_EQ(got.offsets, want.offsets);
  EXPECT_EQ(got.ids, want.ids);
  EXPECT_EQ(got.positions, want.positions);
  EXPECT_EQ(got.values, want.values);
}

TEST(HierarchicalHash, EmptyAndFull) {
  const int64_t rows = 5000;
  HierarchicalHashPartitioner hh(2);
  const std::vector<float> zero(static_cast<size_t>(rows), 0.0f);
  ExpectSameAsCounting(zero, rows, 1, RowOwner::Hash(1, 3), hh);
  EXPECT_EQ(hh.last_stats().rows, 0);
  const std::vector<float> ones(static_cast<size_t>(rows), 1.0f);
  ExpectSameAsCounting(ones, rows, 1, RowOwner::Hash(1, 3), hh);
  EXPECT_EQ(hh.last_stats().rows, rows);
}

TEST(HierarchicalHash, RejectsBadConfig) {
  HierarchicalHashConfig cfg;
  cfg.hashes = 0;
  EXPECT_THROW(HierarchicalHashPartitioner(1, cfg), InvalidArgument);
  cfg = {};
  cfg.parallel_factor = 0;
  EXPECT_THROW(HierarchicalHashPartitioner(1, cfg), InvalidArgument);
}

}  // namespace
}  // namespace zen
