// zen/core/radix_sort.h — sorting (key, item) pairs by key, for the
// per-server position order of ZEN's partitions and its id-order output.
//
// Keys are non-negative and below a known bound, so an LSD radix sort with
// 11-bit digits sorts n pairs in ceil(bits(bound) / 11) passes of O(n)
// (2 passes for keys below 2^22); short lists (and keys so wide that a
// comparison sort is cheaper) fall back to std::sort. Stable in both cases
// for distinct keys (the only case ZEN has). `scratch` is resized to n and
// reused by the caller across calls, so steady-state calls do not allocate.
//
// Usage:
//   std::vector<zen::KeyItem> pairs = ..., scratch;
//   zen::SortByKey(pairs, scratch, /*key_bound=*/rows);
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

namespace zen {

// The bits a key below `bound` needs (at least 1): the `bits` argument of
// the sorts below for keys in [0, bound).
inline int KeyBits(int64_t bound) {
  return std::max(1, static_cast<int>(std::bit_width(
                         static_cast<uint64_t>(std::max<int64_t>(bound, 1) - 1))));
}

struct KeyItem {
  int64_t key;
  int64_t item;
};

inline void SortByKey(std::span<KeyItem> a, std::vector<KeyItem>& scratch, int64_t key_bound) {
  constexpr int kDigit = 11;
  constexpr size_t kBuckets = size_t{1} << kDigit;
  const size_t n = a.size();
  const int bits = KeyBits(key_bound);
  const int passes = (bits + kDigit - 1) / kDigit;
  // A comparison sort costs about n log2 n; radix about passes x (n + buckets).
  if (n < 1024 || std::log2(static_cast<double>(n)) <
                      passes * (3.0 + static_cast<double>(kBuckets) / static_cast<double>(n))) {
    if (!std::is_sorted(a.begin(), a.end(),
                        [](const KeyItem& x, const KeyItem& y) { return x.key < y.key; })) {
      std::sort(a.begin(), a.end(), [](const KeyItem& x, const KeyItem& y) { return x.key < y.key; });
    }
    return;
  }
  if (scratch.size() < n) scratch.resize(n);
  std::span<KeyItem> src = a, dst(scratch.data(), n);
  std::array<size_t, kBuckets> count;
  for (int p = 0; p < passes; ++p) {
    const int shift = p * kDigit;
    count.fill(0);
    for (const KeyItem& x : src) ++count[static_cast<size_t>(x.key >> shift) & (kBuckets - 1)];
    size_t sum = 0;
    for (size_t& c : count) {
      const size_t k = c;
      c = sum;
      sum += k;
    }
    for (const KeyItem& x : src) dst[count[static_cast<size_t>(x.key >> shift) & (kBuckets - 1)]++] = x;
    std::swap(src, dst);
  }
  if (src.data() != a.data()) std::copy(src.begin(), src.end(), a.begin());
}

// A stable sort of a by (word & mask) that allocates nothing once scratch
// holds a.size() words: insertion sorts of runs of 32, then bottom-up
// merges between a and scratch (ties taken from the left run). For the
// short lists where a radix sort's histograms cost more than the sort;
// std::stable_sort would allocate a buffer on every call.
inline void StableSortWordsByMask(std::span<uint64_t> a, std::vector<uint64_t>& scratch,
                                  uint64_t mask) {
  const size_t n = a.size();
  constexpr size_t kRun = 32;
  for (size_t lo = 0; lo < n; lo += kRun) {
    const size_t hi = std::min(n, lo + kRun);
    for (size_t i = lo + 1; i < hi; ++i) {
      const uint64_t x = a[i];
      size_t j = i;
      for (; j > lo && (a[j - 1] & mask) > (x & mask); --j) a[j] = a[j - 1];
      a[j] = x;
    }
  }
  if (n <= kRun) return;
  if (scratch.size() < n) scratch.resize(n);
  std::span<uint64_t> src = a, dst(scratch.data(), n);
  for (size_t run = kRun; run < n; run *= 2) {
    for (size_t lo = 0; lo < n; lo += 2 * run) {
      const size_t mid = std::min(n, lo + run), hi = std::min(n, lo + 2 * run);
      size_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) dst[k++] = (src[j] & mask) < (src[i] & mask) ? src[j++] : src[i++];
      while (i < mid) dst[k++] = src[i++];
      while (j < hi) dst[k++] = src[j++];
    }
    std::swap(src, dst);
  }
  if (src.data() != a.data()) std::copy(src.begin(), src.end(), a.begin());
}

// Sorts 64-bit words by their bits [shift, shift + bits) (the rest rides
// along: e.g. an id in the high 32 bits and a float's bits in the low 32,
// half the bytes of a KeyItem). Bits above shift + bits must be zero (they
// may fall into the last digit). shift + bits <= 64. The same LSD radix sort, with every digit's
// histogram counted in one read pass; short lists by StableSortWordsByMask.
// Stable; allocates nothing once scratch holds a.size() words.
inline void SortWordsByBits(std::span<uint64_t> a, std::vector<uint64_t>& scratch, int shift,
                            int bits) {
  constexpr int kDigit = 11;
  constexpr size_t kBuckets = size_t{1} << kDigit;
  constexpr int kMaxPasses = 6;
  const size_t n = a.size();
  bits = std::max(bits, 1);
  const int passes = std::min(kMaxPasses, (bits + kDigit - 1) / kDigit);
  if (n < 1024 || std::log2(static_cast<double>(n)) <
                      passes * (3.0 + static_cast<double>(kBuckets) / static_cast<double>(n))) {
    const uint64_t mask = bits >= 64 ? ~uint64_t{0} : ((uint64_t{1} << bits) - 1) << shift;
    StableSortWordsByMask(a, scratch, mask);
    return;
  }
  if (scratch.size() < n) scratch.resize(n);
  std::array<std::array<size_t, kBuckets>, kMaxPasses> count;  // only `passes` of them zeroed
  for (int p = 0; p < passes; ++p) count[static_cast<size_t>(p)].fill(0);
  for (const uint64_t x : a) {
    for (int p = 0; p < passes; ++p) {
      ++count[static_cast<size_t>(p)][static_cast<size_t>(x >> (shift + p * kDigit)) & (kBuckets - 1)];
    }
  }
  std::span<uint64_t> src = a, dst(scratch.data(), n);
  for (int p = 0; p < passes; ++p) {
    auto& c = count[static_cast<size_t>(p)];
    if (c[static_cast<size_t>(src[0] >> (shift + p * kDigit)) & (kBuckets - 1)] == n) continue;
    size_t sum = 0;
    for (size_t& b : c) {
      const size_t k = b;
      b = sum;
      sum += k;
    }
    const int s = shift + p * kDigit;
    for (const uint64_t x : src) dst[c[static_cast<size_t>(x >> s) & (kBuckets - 1)]++] = x;
    std::swap(src, dst);
  }
  if (src.data() != a.data()) std::copy(src.begin(), src.end(), a.begin());
}

}  // namespace zen
