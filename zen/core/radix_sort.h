// zen/core/radix_sort.h — sorting (key, item) pairs by key, for the
// per-server position order of ZEN's partitions and its id-order output.
//
// Keys are non-negative and below a known bound, so an LSD radix sort with
// 11-bit digits sorts n pairs in ceil(bits(bound) / 11) passes of O(n)
// (2 passes for keys below 2^22); short lists (and keys so wide that a
// comparison sort is cheaper) fall back to std::sort. Stable in both cases
// for distinct keys (the only case ZEN has). `scratch` is resized to n and
// reused by the caller across calls, so steady-state calls do not allocate.
// The sorts of 64-bit words (a key above a payload: SortWordsByBits,
// IncrementalWordSort's LSD path) take digits of up to 12 bits (PlanRadix);
// IncrementalWordSort sorts keys of 13 to 26 bits by buckets of their high
// bits, each ranked in cache by a bitmap of its low bits.
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

#include "zen/core/error.h"

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

// The digits of an LSD radix sort of `bits`-bit keys: as few passes as
// digits of at most 12 bits allow for keys up to 36 bits (two passes for 24
// bits, where 11-bit digits need three), 11-bit digits beyond; the bits
// shared evenly. passes x 2^digit <= kRadixCounters.
struct RadixPlan {
  int passes;
  int digit;
};
inline constexpr size_t kRadixCounters = size_t{3} << 12;
inline RadixPlan PlanRadix(int bits) {
  bits = std::clamp(bits, 1, 64);
  const int max_digit = bits <= 36 ? 12 : 11;
  const int passes = (bits + max_digit - 1) / max_digit;
  return {passes, (bits + passes - 1) / passes};
}

// Sorts 64-bit words by their bits [shift, shift + bits) (the rest rides
// along: e.g. an id in the high 32 bits and a float's bits in the low 32,
// half the bytes of a KeyItem). Bits above shift + bits must be zero (they
// may fall into the last digit). shift + bits <= 64. An LSD radix sort
// (PlanRadix's digits), every digit's histogram counted in one read pass;
// short lists by StableSortWordsByMask. Stable; allocates nothing once
// scratch holds a.size() words.
inline void SortWordsByBits(std::span<uint64_t> a, std::vector<uint64_t>& scratch, int shift,
                            int bits) {
  const size_t n = a.size();
  bits = std::max(bits, 1);
  const RadixPlan plan = PlanRadix(bits);
  const int passes = plan.passes, digit = plan.digit;
  const size_t buckets = size_t{1} << digit;
  if (n < 1024 || std::log2(static_cast<double>(n)) <
                      passes * (3.0 + static_cast<double>(buckets) / static_cast<double>(n))) {
    const uint64_t mask = bits >= 64 ? ~uint64_t{0} : ((uint64_t{1} << bits) - 1) << shift;
    StableSortWordsByMask(a, scratch, mask);
    return;
  }
  if (scratch.size() < n) scratch.resize(n);
  const uint64_t mask = buckets - 1;
  std::array<size_t, kRadixCounters> count;  // passes x buckets of them zeroed
  std::fill_n(count.begin(), static_cast<size_t>(passes) * buckets, size_t{0});
  for (const uint64_t x : a) {
    for (int p = 0; p < passes; ++p) {
      ++count[static_cast<size_t>(p) * buckets + ((x >> (shift + p * digit)) & mask)];
    }
  }
  std::span<uint64_t> src = a, dst(scratch.data(), n);
  for (int p = 0; p < passes; ++p) {
    size_t* c = count.data() + static_cast<size_t>(p) * buckets;
    const int s = shift + p * digit;
    if (c[(src[0] >> s) & mask] == n) continue;
    size_t sum = 0;
    for (size_t b = 0; b < buckets; ++b) {
      const size_t k = c[b];
      c[b] = sum;
      sum += k;
    }
    for (const uint64_t x : src) dst[c[(x >> s) & mask]++] = x;
    std::swap(src, dst);
  }
  if (src.data() != a.data()) std::copy(src.begin(), src.end(), a.begin());
}

namespace radix_internal {
// IncrementalWordSort's words by bucket: part q's words of bucket b lie in
// buffer[starts[q * stride + b], starts[q * stride + b + 1]).
struct Buckets {
  const uint64_t* buffer;
  const size_t* starts;
  size_t stride;
  size_t parts;
  int shift;  // the key's lowest bit
  int low;    // the key bits below the bucket's
  uint64_t* bitmap;  // 2^low bits (at least a word), zeroed, left zeroed; or none
  size_t bitmap_words;  // 0: no bitmap (sparse keys)
  size_t* prefix;  // bitmap_words of them
  std::vector<uint64_t>* merge_scratch;
};
// Writes bucket b's words to out in the stable order of their low key bits;
// returns how many. In radix_sort.cc (popcnt chosen at run time).
size_t SortBucket(const Buckets& buckets, size_t b, uint64_t* out);
}  // namespace radix_internal

// An ascending sort of 64-bit words by their bits [shift, shift + bits)
// (shift + bits <= 64, bits above them zero) for words that arrive in
// parts, e.g. one pull message after another. Sort then hands each word to
// emit(index, word) instead of storing it, so that the caller writes its
// own output arrays (ids and values, say) with no unpacking pass after.
//
// Keys of 13 to 26 bits (an element-sparse tensor of 4097 to 2^26 rows) are
// sorted by bucket: Add(part) scatters the part's words, while they are in
// cache and later parts still travel, into 2^hi buckets of their high hi
// bits (hi chosen by the first part, Plan: buckets of about 512 words where
// keys are dense, of about 8 where sparse). Sort then takes one bucket after
// another (every part's words of it; they lie in a window of the output of
// that bucket's size) and ranks them by their low bits in cache: where the
// keys are distinct (zen's pulled ids are) and dense, a bitmap of the
// bucket's low bits and a prefix of popcounts give each word its index, so
// that the writes of the output stay in a window of a few hundred words
// instead of scattering over all of it as an LSD pass's would; buckets of
// up to 16 words are sorted by insertion, other sparse ones and ones with a
// repeated key by merge sort. Other keys (and a first part that is empty,
// sparse keys that would need buckets of more than 16 words, or too many
// parts for the bucket starts) take an LSD radix sort
// (PlanRadix's digits): Add counts every digit and copies, Sort makes the
// passes, the last one emitting.
// Stable for any keys. Buffers are the object's and grow only: a steady
// state allocates nothing.
//
// Usage:
//   zen::IncrementalWordSort sort;
//   sort.Reset(/*shift=*/32, /*bits=*/zen::KeyBits(rows), /*parts=*/n);
//   for (each arriving part) sort.Add(part);
//   sort.Sort(scratch, [&](size_t i, uint64_t w) { ids[i] = w >> 32; });
class IncrementalWordSort {
 public:
  static constexpr size_t kMaxBucketStarts = size_t{1} << 18;

  // Up to `parts` calls of Add follow.
  void Reset(int shift, int bits, size_t parts) {
    bits = std::clamp(bits, 1, 64);
    const RadixPlan plan = PlanRadix(bits);
    shift_ = shift;
    bits_ = bits;
    passes_ = plan.passes;
    digit_ = plan.digit;
    total_ = 0;
    parts_ = 0;
    max_parts_ = parts;
    by_bucket_ = bits > 12 && bits <= 26;  // decided by the first part (Add)
  }

  void Add(std::span<const uint64_t> part) {
    if (parts_ == max_parts_) {
      throw InvalidArgument(Where{}, "IncrementalWordSort: part ", parts_ + 1, " added, ",
                            max_parts_, " announced by Reset");
    }
    const size_t at = total_, m = part.size();
    if (buffer_.size() < at + m) buffer_.resize(std::max(at + m, buffer_.size() * 2));
    if (parts_ == 0) Plan(m);
    if (by_bucket_) {
      // This part's bucket starts (starts[b], b <= buckets: the end), then
      // its words scattered into [at, at + m) by bucket.
      const size_t buckets = size_t{1} << high_;
      const uint64_t mask = buckets - 1;
      const int s = shift_ + low_;
      size_t* starts = starts_.data() + parts_ * (buckets + 1);
      std::fill_n(starts, buckets + 1, size_t{0});
      for (const uint64_t x : part) ++starts[((x >> s) & mask) + 1];
      size_t sum = at;
      for (size_t b = 0; b <= buckets; ++b) {
        sum += starts[b];
        starts[b] = sum;
      }
      std::copy_n(starts, buckets, cursor_.data());
      size_t* cur = cursor_.data();
      uint64_t* out = buffer_.data();
      for (const uint64_t x : part) out[cur[(x >> s) & mask]++] = x;
    } else {
      const size_t buckets = size_t{1} << digit_;
      const uint64_t mask = buckets - 1;
      size_t* c = count_.data();
      uint64_t* out = buffer_.data() + at;
      for (size_t i = 0; i < m; ++i) {
        const uint64_t x = part[i];
        for (int p = 0; p < passes_; ++p) {
          ++c[static_cast<size_t>(p) * buckets + ((x >> (shift_ + p * digit_)) & mask)];
        }
        out[i] = x;
      }
    }
    total_ += m;
    ++parts_;
  }

  // The first part decides, from the words it suggests in all (its size x
  // the parts announced): where the keys are dense enough for bitmaps (at
  // most 256 bitmap bits per word), buckets of about 512 words (fewer
  // buckets: Add's scatter writes to fewer places; a bucket's bitmap of
  // 2^low bits stays in L1); where they are sparser, buckets of about 8
  // words (insertion sorts); the LSD sort where the first part is empty,
  // sparse keys need more than 2^12 buckets of 16, or the bucket starts of
  // all parts would exceed kMaxBucketStarts.
  void Plan(size_t first) {
    const uint64_t words = static_cast<uint64_t>(first) * std::max<size_t>(max_parts_, 1);
    bool dense = false;
    size_t buckets = 0;
    if (by_bucket_ && first > 0) {
      dense = words >= (uint64_t{1} << bits_) / 256;
      const uint64_t target = dense ? words / 512 : words / 8;
      high_ = std::clamp(static_cast<int>(std::bit_width(target)), 1, 12);
      low_ = bits_ - high_;
      buckets = size_t{1} << high_;
      by_bucket_ = (dense || words <= 16 * buckets) &&
                   max_parts_ <= kMaxBucketStarts / (buckets + 1);
    } else {
      by_bucket_ = false;
    }
    if (!by_bucket_) {
      count_.assign(static_cast<size_t>(passes_) << digit_, 0);
      return;
    }
    if (starts_.size() < max_parts_ * (buckets + 1)) starts_.resize(max_parts_ * (buckets + 1));
    if (cursor_.size() < buckets) cursor_.resize(buckets);
    // No bitmap for sparse keys (SortBucket sorts their buckets).
    const size_t bitmap_words = dense ? std::max<size_t>(1, (size_t{1} << low_) / 64) : 0;
    bitmap_.assign(bitmap_words, 0);
    if (prefix_.size() < bitmap_words) prefix_.resize(bitmap_words);
  }

  // Sorts the words added since Reset: calls emit(i, word) once per word, i
  // its index in the sorted order (not necessarily in increasing order).
  template <typename Emit>
  void Sort(std::vector<uint64_t>& scratch, Emit&& emit) {
    const size_t n = total_;
    if (n == 0) return;
    if (scratch.size() < n) scratch.resize(n);
    if (by_bucket_) {
      SortByBucket(scratch.data(), emit);
    } else {
      SortByDigits(scratch.data(), emit);
    }
  }

  size_t size() const { return total_; }

 private:
  template <typename Emit>
  void SortByBucket(uint64_t* scratch, Emit& emit) {
    const size_t buckets = size_t{1} << high_;
    const radix_internal::Buckets layout{buffer_.data(), starts_.data(), buckets + 1, parts_,
                                         shift_, low_, bitmap_.data(), bitmap_.size(),
                                         prefix_.data(), &merge_scratch_};
    size_t base = 0;  // the bucket's first index in the output
    for (size_t b = 0; b < buckets; ++b) {
      // Sorted into the output's window of the bucket (in cache), then handed on.
      uint64_t* out = scratch + base;
      const size_t m = radix_internal::SortBucket(layout, b, out);
      for (size_t i = 0; i < m; ++i) emit(base + i, out[i]);
      base += m;
    }
  }

  template <typename Emit>
  void SortByDigits(uint64_t* scratch, Emit& emit) {
    const size_t n = total_;
    const size_t buckets = size_t{1} << digit_;
    const uint64_t mask = buckets - 1;
    auto digit_of = [&](uint64_t x, int p) {
      return static_cast<size_t>((x >> (shift_ + p * digit_)) & mask);
    };
    // The passes to make: those of a digit on which the words fall in more
    // than one bucket.
    int todo[8];
    int passes = 0;
    for (int p = 0; p < passes_; ++p) {
      const size_t* c = count_.data() + static_cast<size_t>(p) * buckets;
      if (c[digit_of(buffer_[0], p)] != n) todo[passes++] = p;
    }
    if (passes == 0) {  // already in order
      for (size_t i = 0; i < n; ++i) emit(i, buffer_[i]);
      return;
    }
    uint64_t* src = buffer_.data();
    uint64_t* dst = scratch;
    for (int k = 0; k < passes; ++k) {
      const int p = todo[k];
      size_t* c = count_.data() + static_cast<size_t>(p) * buckets;
      size_t sum = 0;
      for (size_t b = 0; b < buckets; ++b) {
        const size_t v = c[b];
        c[b] = sum;
        sum += v;
      }
      if (k == passes - 1) {
        for (size_t i = 0; i < n; ++i) emit(c[digit_of(src[i], p)]++, src[i]);
      } else {
        for (size_t i = 0; i < n; ++i) dst[c[digit_of(src[i], p)]++] = src[i];
      }
      std::swap(src, dst);
    }
  }

  int shift_ = 0;
  int bits_ = 1;
  int passes_ = 1;
  int digit_ = 1;
  int high_ = 0;  // by bucket: the bits Add buckets by
  int low_ = 1;   // by bucket: the bits Sort ranks by
  bool by_bucket_ = false;
  size_t total_ = 0;
  size_t parts_ = 0;
  size_t max_parts_ = 0;
  std::vector<size_t> count_;           // by digits: passes_ histograms of 2^digit_ buckets
  std::vector<size_t> starts_;          // by bucket: each part's 2^high_ + 1 bucket starts
  std::vector<size_t> cursor_;          // by bucket: Add's write positions
  std::vector<uint64_t> bitmap_;        // by bucket: the low bits of a bucket's keys, zeroed
  std::vector<size_t> prefix_;          // by bucket: the output index of each bitmap word
  std::vector<uint64_t> merge_scratch_;  // by bucket: StableSortWordsByMask's
  std::vector<uint64_t> buffer_;        // the parts' words
};

}  // namespace zen
