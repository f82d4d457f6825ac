#include "zen/core/partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "zen/core/error.h"
#include "zen/core/hierarchical_hash.h"

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

TEST(RowOwner, RangeIsContiguousAndEven) {
  for (int64_t rows : {1, 7, 100, 1001}) {
    for (int n : {1, 2, 3, 8}) {
      const RowOwner o = RowOwner::Range(rows, n);
      std::vector<int64_t> size(static_cast<size_t>(n), 0);
      int prev = 0;
      for (int64_t id = 0; id < rows; ++id) {
        const int s = o(id);
        ASSERT_GE(s, prev);
        ASSERT_LT(s, n);
        prev = s;
        ++size[static_cast<size_t>(s)];
      }
      const auto [lo, hi] = std::minmax_element(size.begin(), size.end());
      EXPECT_LE(*hi - *lo, 1) << rows << " rows, n " << n;
    }
  }
  EXPECT_THROW(RowOwner::Range(0, 2), InvalidArgument);
}

TEST(RowOwner, HashOwnerIsTheServerHash) {
  const RowOwner o = RowOwner::Hash(123, 6);
  const ServerHash h(123, 6);
  for (int64_t id = 0; id < 1000; ++id) EXPECT_EQ(o(id), h(id));
  EXPECT_EQ(o, RowOwner::Hash(123, 6));
  EXPECT_FALSE(o == RowOwner::Hash(124, 6));
}

TEST(RowOwner, PermutedIsRangesOfTheBijection) {
  for (int64_t rows : {int64_t{1}, int64_t{5}, int64_t{64}, int64_t{1000}, int64_t{4099}}) {
    for (int n : {1, 3, 8}) {
      const RowOwner o = RowOwner::Permuted(31, rows, n);
      const RowPermutation pi(31, rows);
      std::vector<int64_t> size(static_cast<size_t>(n), 0);
      for (int64_t id = 0; id < rows; ++id) {
        // Brute force: the server whose even range [ceil(j rows/n), ...) holds pi(id).
        int want = 0;
        while (want + 1 < n && pi(id) * n >= (want + 1) * rows) ++want;
        ASSERT_EQ(o(id), want) << rows << " rows, n " << n << ", id " << id;
        const RowPlace at = o.Locate(id);
        ASSERT_EQ(at.server, want);
        ASSERT_EQ(at.position, pi(id) - (want * rows + n - 1) / n);
        ASSERT_EQ(o.IdAt(want, at.position), id);
        ++size[static_cast<size_t>(want)];
      }
      for (int j = 0; j < n; ++j) EXPECT_EQ(size[static_cast<size_t>(j)], o.DomainSize(j));
      const auto [lo, hi] = std::minmax_element(size.begin(), size.end());
      EXPECT_LE(*hi - *lo, 1);
    }
  }
  EXPECT_THROW(RowOwner::Permuted(1, 0, 2), InvalidArgument);
  EXPECT_THROW(RowOwner::Permuted(1, kMaxPermutedRows + 1, 2), InvalidArgument);
  EXPECT_THROW(RowOwner::Permuted(1, 10, 0), InvalidArgument);
}

// Permuted with blocks, against a brute force of its definition: blocks of
// 2^b ids permuted whole (pi over rows >> b blocks), the partial block's ids
// their own keys, the servers' ranges whole blocks (the last also the
// tail); the batched key maps equal the scalar ones and keep the low bits.
TEST(RowOwner, PermutedBlocksAreRangesOfTheBlockBijection) {
  for (int64_t rows : {int64_t{8}, int64_t{64}, int64_t{1000}, int64_t{4099}, int64_t{70001}}) {
    for (int b : {1, 3, 5}) {
      if ((rows >> b) < 1) continue;
      for (int n : {1, 3, 8}) {
        const RowOwner o = RowOwner::Permuted(31, rows, n, b);
        const int64_t units = rows >> b;
        const RowPermutation pi(31, units);
        const int64_t mask = (int64_t{1} << b) - 1;
        auto start = [&](int j) { return j == n ? rows : ((j * units + n - 1) / n) << b; };
        std::vector<int64_t> size(static_cast<size_t>(n), 0);
        std::vector<int64_t> ids, keys;
        for (int64_t id = 0; id < rows; ++id) {
          const int64_t key = (id >> b) < units ? pi(id >> b) << b | (id & mask) : id;
          int want = 0;
          while (want + 1 < n && key >= start(want + 1)) ++want;
          ASSERT_EQ(o(id), want) << rows << " rows, b " << b << ", n " << n << ", id " << id;
          const RowPlace at = o.Locate(id);
          ASSERT_EQ(at.server, want);
          ASSERT_EQ(at.position, key - start(want));
          ASSERT_EQ(o.IdAt(want, at.position), id);
          ASSERT_EQ(o.IdOfKey(key), id);
          ++size[static_cast<size_t>(want)];
          ids.push_back(id);
          keys.push_back(key);
        }
        for (int j = 0; j < n; ++j) {
          EXPECT_EQ(size[static_cast<size_t>(j)], o.DomainSize(j));
          EXPECT_EQ(o.Start(j), start(j));
        }
        EXPECT_EQ(o.MaxDomainSize(), *std::max_element(size.begin(), size.end()));
        // Batched, in id order (runs of a block) and shuffled (runs of one),
        // with and without payload bits below the key.
        std::vector<size_t> order(ids.size());
        std::iota(order.begin(), order.end(), size_t{0});
        std::mt19937_64 rng(static_cast<uint64_t>(rows * 16 + b));
        for (int shuffled = 0; shuffled < 2; ++shuffled) {
          if (shuffled) std::shuffle(order.begin(), order.end(), rng);
          for (int shift : {0, 32}) {
            std::vector<uint64_t> words;
            for (size_t i : order) {
              words.push_back(static_cast<uint64_t>(ids[i]) << shift | (shift ? i : 0));
            }
            o.KeysOfIdsInPlace(words, shift);
            for (size_t k = 0; k < order.size(); ++k) {
              ASSERT_EQ(words[k], static_cast<uint64_t>(keys[order[k]]) << shift |
                                      (shift ? order[k] : 0));
            }
            o.IdsOfKeysInPlace(words, shift);
            for (size_t k = 0; k < order.size(); ++k) {
              ASSERT_EQ(words[k], static_cast<uint64_t>(ids[order[k]]) << shift |
                                      (shift ? order[k] : 0));
            }
          }
        }
        std::vector<int64_t> in_place = ids;
        o.KeysInPlace(in_place);
        ASSERT_EQ(in_place, keys);
        // Blocks of keys to blocks of ids (one entry per block, in key
        // order, a payload below): the partial block stays.
        std::vector<uint64_t> blocks;
        for (int64_t key = 0; key < rows; key += int64_t{1} << b) {
          blocks.push_back(static_cast<uint64_t>(key >> b) << 32 | (blocks.size() & 0xFF));
        }
        const std::vector<uint64_t> key_blocks = blocks;
        o.IdBlocksOfKeyBlocksInPlace(blocks, 32);
        for (size_t k = 0; k < blocks.size(); ++k) {
          const int64_t key = static_cast<int64_t>(k) << b;
          ASSERT_EQ(blocks[k], static_cast<uint64_t>(o.IdOfKey(key) >> b) << 32 | (k & 0xFF));
        }
        o.KeyBlocksOfIdBlocksInPlace(blocks, 32);
        ASSERT_EQ(blocks, key_blocks);
      }
    }
  }
  // One block over two servers: the second owns nothing.
  EXPECT_EQ(RowOwner::Permuted(3, 16, 2, 4).DomainSize(1), 0);
  EXPECT_THROW(RowOwner::Permuted(1, 15, 2, 4), InvalidArgument);  // no whole block
  EXPECT_THROW(RowOwner::Permuted(1, 1000, 2, -1), InvalidArgument);
  EXPECT_THROW(RowOwner::Permuted(1, int64_t{1} << 40, 2, 33), InvalidArgument);
}

TEST(RowIsNonZero, ZeroSignAndNaN) {
  const float neg_zero[2] = {-0.0f, 0.0f};
  const float nan[2] = {0.0f, std::numeric_limits<float>::quiet_NaN()};
  const float tiny[1] = {1e-40f};
  EXPECT_FALSE(RowIsNonZero(neg_zero, 2));
  EXPECT_TRUE(RowIsNonZero(nan, 2));
  EXPECT_TRUE(RowIsNonZero(tiny, 1));
}

TEST(ParallelChunks, CoversEveryItemOnce) {
  for (int threads : {1, 2, 5}) {
    WorkerPool pool(threads);
    for (int64_t items : {0, 1, 10, 1000, 12345}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(items));
      const int chunks = ParallelChunks(pool, threads, items, 100, [&](int, int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
      });
      EXPECT_EQ(chunks, ChunkCount(threads, items, 100));
      EXPECT_LE(chunks, threads);
      for (int64_t i = 0; i < items; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)], 1);
    }
  }
}

TEST(MakePartitioner, UnknownNameIsInvalidArgument) {
  EXPECT_THROW(MakePartitioner("sorting", 1), InvalidArgument);
  EXPECT_EQ(MakePartitioner("counting", 1)->name(), "counting");
  EXPECT_EQ(MakePartitioner("hierarchical", 1)->name(), "hierarchical");
}

// CopyRow copies exactly width floats for every width (its pieces for
// narrow rows overlap inside the row, never past it).
TEST(CopyRow, EveryWidthCopiesTheRowAndNothingElse) {
  for (int64_t width = 1; width <= 40; ++width) {
    std::vector<float> src(static_cast<size_t>(width) + 8), dst(static_cast<size_t>(width) + 8, -1);
    for (size_t k = 0; k < src.size(); ++k) src[k] = static_cast<float>(k + 1);
    CopyRow(dst.data() + 4, src.data() + 4, width);
    for (size_t k = 0; k < dst.size(); ++k) {
      const bool inside = k >= 4 && k < 4 + static_cast<size_t>(width);
      EXPECT_EQ(dst[k], inside ? src[k] : -1.0f) << "width " << width << ", float " << k;
    }
  }
}

}  // namespace
}  // namespace zen
