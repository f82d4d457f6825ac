#include "zen/core/radix_sort.h"

#include <bit>

namespace zen::radix_internal {

// With the popcnt instruction where the CPU has it (chosen at run time; the
// portable std::popcount is a library call on baseline x86-64). Not under
// ThreadSanitizer: see CountBits in zen/schemes/zen/row_codec.cc.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__)
__attribute__((target_clones("popcnt", "default")))
#endif
size_t SortBucket(const Buckets& k, size_t b, uint64_t* out) {
  // Buckets of at most this many words are sorted by insertion.
  constexpr size_t kInsertion = 16;
  const uint64_t low_mask = (uint64_t{1} << k.low) - 1;
  const int shift = k.shift;
  auto key = [&](uint64_t x) { return (x >> shift) & low_mask; };
  // Every part's words of bucket b, in the order of the parts.
  auto each = [&](auto&& f) {
    for (size_t q = 0; q < k.parts; ++q) {
      const size_t* starts = k.starts + q * k.stride + b;
      for (size_t i = starts[0]; i < starts[1]; ++i) f(k.buffer[i]);
    }
  };
  size_t m = 0;
  for (size_t q = 0; q < k.parts; ++q) {
    const size_t* starts = k.starts + q * k.stride + b;
    m += starts[1] - starts[0];
  }
  if (m <= kInsertion) {
    size_t n = 0;
    each([&](uint64_t x) {
      size_t j = n++;
      for (; j > 0 && key(out[j - 1]) > key(x); --j) out[j] = out[j - 1];
      out[j] = x;
    });
    return m;
  }
  uint64_t* bitmap = k.bitmap;
  const size_t words = k.bitmap_words;
  if (words != 0 && words <= 4 * m) {
    // Distinct keys take their index from a bitmap of the keys and a prefix
    // of its popcounts; a key marked twice leaves the bucket to the merge
    // sort below.
    uint64_t repeated = 0;
    each([&](uint64_t x) {
      const uint64_t v = key(x), bit = uint64_t{1} << (v & 63);
      repeated |= bitmap[v >> 6] & bit;
      bitmap[v >> 6] |= bit;
    });
    if (repeated == 0) {
      size_t* prefix = k.prefix;
      size_t run = 0;
      for (size_t j = 0; j < words; ++j) {
        prefix[j] = run;
        run += static_cast<size_t>(std::popcount(bitmap[j]));
      }
      each([&](uint64_t x) {
        const uint64_t v = key(x);
        const uint64_t below = bitmap[v >> 6] & ((uint64_t{1} << (v & 63)) - 1);
        out[prefix[v >> 6] + static_cast<size_t>(std::popcount(below))] = x;
      });
      std::fill_n(bitmap, words, uint64_t{0});
      return m;
    }
    std::fill_n(bitmap, words, uint64_t{0});
  }
  size_t n = 0;
  each([&](uint64_t x) { out[n++] = x; });
  StableSortWordsByMask(std::span<uint64_t>(out, m), *k.merge_scratch, low_mask << shift);
  return m;
}

}  // namespace zen::radix_internal
