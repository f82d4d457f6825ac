#include "zen/schemes/zen/partitioner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "zen/core/error.h"
#include "zen/schemes/zen/hierarchical_hash.h"
#include "zen/testing/threads.h"

namespace zen {
namespace {

// A dense buffer with about `density` of its rows non-zero (one random
// element per non-zero row set, the rest zero, so "any element" matters).
std::vector<float> RandomDense(int64_t rows, int64_t width, double density, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<float> d(static_cast<size_t>(rows * width), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    if (u(rng) < density) {
      d[static_cast<size_t>(r * width + static_cast<int64_t>(rng() % width))] =
          static_cast<float>(u(rng) + 0.5);
    }
  }
  return d;
}

// Brute-force expectation: for each server, its non-zero rows in id order.
void ExpectPartitionsOfDense(const Partitions& p, std::span<const float> dense, int64_t rows,
                             int64_t width, const RowOwner& owner) {
  ASSERT_EQ(p.servers, owner.servers());
  ASSERT_EQ(p.width, width);
  // Per server: (position, id) of its non-zero rows, in position order
  // (Hash: position = id; Range: id - start; Permuted: pi(id) - start).
  std::vector<std::vector<std::pair<int64_t, int64_t>>> want(static_cast<size_t>(owner.servers()));
  for (int64_t r = 0; r < rows; ++r) {
    bool nz = false;
    for (int64_t k = 0; k < width; ++k) nz |= dense[static_cast<size_t>(r * width + k)] != 0.0f;
    if (!nz) continue;
    const RowPlace at = owner.Locate(r);
    ASSERT_EQ(at.server, owner(r));
    if (owner.has_domains()) {
      ASSERT_GE(at.position, 0);
      ASSERT_LT(at.position, owner.DomainSize(at.server));
      ASSERT_EQ(owner.IdAt(at.server, at.position), r);
    }
    want[static_cast<size_t>(at.server)].emplace_back(at.position, r);
  }
  ASSERT_EQ(p.positions.size(), p.ids.size());
  for (int s = 0; s < owner.servers(); ++s) {
    auto& w = want[static_cast<size_t>(s)];
    std::sort(w.begin(), w.end());
    std::vector<int64_t> want_ids, want_positions;
    for (const auto& [position, id] : w) {
      want_positions.push_back(position);
      want_ids.push_back(id);
    }
    const auto ids = p.ids_of(s);
    const auto positions = p.positions_of(s);
    ASSERT_EQ(std::vector<int64_t>(ids.begin(), ids.end()), want_ids) << "server " << s;
    ASSERT_EQ(std::vector<int64_t>(positions.begin(), positions.end()), want_positions)
        << "server " << s;
    const auto vals = p.values_of(s);
    for (size_t i = 0; i < ids.size(); ++i) {
      for (int64_t k = 0; k < width; ++k) {
        ASSERT_EQ(vals[i * static_cast<size_t>(width) + static_cast<size_t>(k)],
                  dense[static_cast<size_t>(ids[i] * width + k)]);
      }
    }
  }
}

void ExpectSamePartitions(const Partitions& a, const Partitions& b) {
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.positions, b.positions);
  EXPECT_EQ(a.values, b.values);
  EXPECT_EQ(a.offsets, b.offsets);
}

struct DenseCase {
  std::string partitioner;
  int threads;
  int64_t width;
  double density;
};

class DensePartitionTest : public ::testing::TestWithParam<DenseCase> {};

TEST_P(DensePartitionTest, MatchesBruteForce) {
  const DenseCase& c = GetParam();
  const int64_t rows = 70001;  // several chunks of 16384 rows
  const std::vector<float> dense = RandomDense(rows, c.width, c.density, 17);
  auto part = MakePartitioner(c.partitioner, c.threads);
  for (const RowOwner& owner :
       {RowOwner::Hash(5, 7), RowOwner::Range(rows, 4), RowOwner::Hash(9, 1),
        RowOwner::Permuted(5, rows, 7), RowOwner::Permuted(9, rows, 1),
        RowOwner::Permuted(5, rows, 7, 4)}) {
    Partitions p;
    part->PartitionDense(dense, rows, c.width, owner, p);
    ExpectPartitionsOfDense(p, dense, rows, c.width, owner);
    // A second call on the same object (reused tables) gives the same.
    Partitions again;
    part->PartitionDense(dense, rows, c.width, owner, again);
    ExpectSamePartitions(again, p);
  }
}

TEST_P(DensePartitionTest, SparseInputMatchesBruteForce) {
  const DenseCase& c = GetParam();
  const int64_t rows = 50000;
  const std::vector<float> dense = RandomDense(rows, c.width, c.density, 23);
  std::vector<int64_t> ids;
  std::vector<float> values;
  for (int64_t r = 0; r < rows; ++r) {
    bool nz = false;
    for (int64_t k = 0; k < c.width; ++k) nz |= dense[static_cast<size_t>(r * c.width + k)] != 0;
    if (!nz) continue;
    ids.push_back(r);
    values.insert(values.end(), dense.begin() + r * c.width, dense.begin() + (r + 1) * c.width);
  }
  auto part = MakePartitioner(c.partitioner, c.threads);
  for (const RowOwner& owner : {RowOwner::Hash(77, 5), RowOwner::Permuted(77, rows, 5),
                                RowOwner::Permuted(9, rows, 1), RowOwner::Range(rows, 3),
                                RowOwner::Permuted(77, rows, 5, 6)}) {
    Partitions p;
    part->PartitionSparse(ids, values, c.width, owner, p);
    ExpectPartitionsOfDense(p, dense, rows, c.width, owner);
    // A second call on the same object (reused scratch) gives the same.
    Partitions again;
    part->PartitionSparse(ids, values, c.width, owner, again);
    ExpectSamePartitions(again, p);
  }
}

std::vector<DenseCase> DenseCases() {
  std::vector<DenseCase> out;
  for (std::string name : {"counting", "hierarchical"}) {
    for (int threads : {1, 3}) {
      for (int64_t width : {1, 3}) {
        for (double d : {0.0, 0.001, 0.2, 1.0}) out.push_back({name, threads, width, d});
      }
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(All, DensePartitionTest, ::testing::ValuesIn(DenseCases()),
                         [](const ::testing::TestParamInfo<DenseCase>& i) {
                           return i.param.partitioner + "_t" + std::to_string(i.param.threads) +
                                  "_w" + std::to_string(i.param.width) + "_d" +
                                  std::to_string(static_cast<int>(i.param.density * 1000));
                         });

// The other value types (float64, bfloat16, float16): both partitioners,
// dense and sparse input, against a brute force whose zero test reads the
// bit patterns (a value is zero when all its bits but the sign are: +0 and
// -0; a 16-bit denormal or NaN is not), independent of float_scan.h.
template <typename T>
uint64_t BitsOf(T v) {
  if constexpr (sizeof(T) == 8) return std::bit_cast<uint64_t>(v);
  if constexpr (sizeof(T) == 2) return std::bit_cast<uint16_t>(v);
}
template <typename T>
bool IsZeroBits(T v) {
  const uint64_t sign = uint64_t{1} << (8 * sizeof(T) - 1);
  return (BitsOf(v) & ~sign) == 0;
}
template <typename T>
T FromBits(uint64_t bits) {
  if constexpr (sizeof(T) == 8) return std::bit_cast<T>(bits);
  if constexpr (sizeof(T) == 2) return std::bit_cast<T>(static_cast<uint16_t>(bits));
}

// rows x width values of T: about `density` of the rows hold one random
// non-zero pattern (a denormal now and then) among +0 and -0, the others
// are +0 or -0 throughout.
template <typename T>
std::vector<T> RandomDenseOf(int64_t rows, int64_t width, double density, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  const uint64_t sign = uint64_t{1} << (8 * sizeof(T) - 1);
  std::vector<T> d(static_cast<size_t>(rows * width));
  for (size_t i = 0; i < d.size(); ++i) d[i] = FromBits<T>(rng() % 2 == 0 ? 0 : sign);
  for (int64_t r = 0; r < rows; ++r) {
    if (u(rng) >= density) continue;
    uint64_t bits = rng() % 4 == 0 ? 1 : rng();  // 1: the smallest denormal
    if (sizeof(T) == 2) bits &= 0xFFFF;
    if ((bits & ~sign) == 0) bits |= 1;
    d[static_cast<size_t>(r * width + static_cast<int64_t>(rng() % width))] = FromBits<T>(bits);
  }
  return d;
}

// p against the brute force: per server, the rows r of [0, rows) with
// present(r), in position order, with dense's values.
template <typename T, typename Present>
void ExpectPartitionsOf(const PartitionsOf<T>& p, const std::vector<T>& dense, int64_t rows,
                        int64_t width, const RowOwner& owner, const Present& present) {
  ASSERT_EQ(p.servers, owner.servers());
  ASSERT_EQ(p.width, width);
  std::vector<std::vector<std::pair<int64_t, int64_t>>> want(static_cast<size_t>(owner.servers()));
  for (int64_t r = 0; r < rows; ++r) {
    if (!present(r)) continue;
    const RowPlace at = owner.Locate(r);
    want[static_cast<size_t>(at.server)].emplace_back(at.position, r);
  }
  for (int s = 0; s < owner.servers(); ++s) {
    auto& w = want[static_cast<size_t>(s)];
    std::sort(w.begin(), w.end());
    const auto ids = p.ids_of(s);
    const auto positions = p.positions_of(s);
    const auto vals = p.values_of(s);
    ASSERT_EQ(ids.size(), w.size()) << "server " << s;
    ASSERT_EQ(vals.size(), w.size() * static_cast<size_t>(width)) << "server " << s;
    for (size_t i = 0; i < w.size(); ++i) {
      ASSERT_EQ(positions[i], w[i].first) << "server " << s;
      ASSERT_EQ(ids[i], w[i].second) << "server " << s;
      for (int64_t k = 0; k < width; ++k) {
        ASSERT_EQ(BitsOf(vals[i * static_cast<size_t>(width) + static_cast<size_t>(k)]),
                  BitsOf(dense[static_cast<size_t>(w[i].second * width + k)]))
            << "server " << s << " row " << w[i].second;
      }
    }
  }
}

template <typename T>
class OtherValueTypePartitionTest : public ::testing::Test {};
using OtherValueTypes = ::testing::Types<double, Bfloat16, Float16>;
TYPED_TEST_SUITE(OtherValueTypePartitionTest, OtherValueTypes);

TYPED_TEST(OtherValueTypePartitionTest, DenseAndSparseMatchBruteForce) {
  using T = TypeParam;
  const int64_t rows = 40009;  // several chunks of 16384 rows
  for (const std::string name : {"counting", "hierarchical"}) {
    for (int threads : {1, 3}) {
      auto part = MakePartitioner(name, threads);
      for (int64_t width : {1, 3, 8}) {
        const std::vector<T> dense = RandomDenseOf<T>(rows, width, 0.05, 31 + width);
        auto non_zero = [&](int64_t r) {
          bool nz = false;
          for (int64_t k = 0; k < width; ++k) {
            nz |= !IsZeroBits(dense[static_cast<size_t>(r * width + k)]);
          }
          return nz;
        };
        // The sparse input: the non-zero rows and row 7 listed whatever it
        // holds (a listed all-zero row is kept: it is present).
        auto listed = [&](int64_t r) { return r == 7 || non_zero(r); };
        std::vector<int64_t> ids;
        std::vector<T> values;
        for (int64_t r = 0; r < rows; ++r) {
          if (!listed(r)) continue;
          ids.push_back(r);
          values.insert(values.end(), dense.begin() + r * width, dense.begin() + (r + 1) * width);
        }
        for (const RowOwner& owner :
             {RowOwner::Hash(5, 7), RowOwner::Range(rows, 4), RowOwner::Permuted(5, rows, 7),
              RowOwner::Permuted(5, rows, 3, 4)}) {
          SCOPED_TRACE(name + " threads " + std::to_string(threads) + " width " +
                       std::to_string(width));
          PartitionsOf<T> p;
          part->PartitionDense(std::span<const T>(dense), rows, width, owner, p);
          ExpectPartitionsOf(p, dense, rows, width, owner, non_zero);
          PartitionsOf<T> q;
          part->PartitionSparse(ids, std::span<const T>(values), width, owner, q);
          ExpectPartitionsOf(q, dense, rows, width, owner, listed);
        }
      }
    }
  }
}

TEST(MakePartitioner, UnknownNameIsInvalidArgument) {
  EXPECT_THROW(MakePartitioner("sorting", 1), InvalidArgument);
  EXPECT_EQ(MakePartitioner("counting", 1)->name(), "counting");
  EXPECT_EQ(MakePartitioner("hierarchical", 1)->name(), "hierarchical");
}

// The partitioners' parallel paths run on their own pool: after the first
// call started it, later calls start no thread (issue 14: no thread created
// per call).
TEST(WorkerPool, PartitionersCreateNoThreadPerCall) {
  const int64_t rows = 200000, width = 2;  // several chunks of 16384 rows
  std::vector<float> dense(static_cast<size_t>(rows * width), 0.0f);
  for (int64_t r = 0; r < rows; r += 3) dense[static_cast<size_t>(r * width)] = 1.0f;
  const RowOwner owner = RowOwner::Permuted(5, rows, 4);
  for (const char* kind : {"counting", "hierarchical"}) {
    auto part = MakePartitioner(kind, 3);
    Partitions p;
    part->PartitionDense(dense, rows, width, owner, p);
    const int after_first = testing::ProcessThreads();
    for (int i = 0; i < 20; ++i) {
      part->PartitionDense(dense, rows, width, owner, p);
      ASSERT_EQ(testing::ProcessThreads(), after_first) << kind << " call " << i;
    }
    EXPECT_EQ(p.total(), (rows + 2) / 3) << kind;
  }
}

}  // namespace
}  // namespace zen
