// RowOwner against its definitions: Range as even contiguous ranges, Hash as
// the server hash, Permuted as ranges of the row bijection (and of the block
// bijection with blocks), written out here by brute force.
#include "zen/core/row_owner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "zen/core/error.h"

namespace zen {
namespace {

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

}  // namespace
}  // namespace zen
