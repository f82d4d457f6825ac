// zen/core/row_permutation.h — a keyed pseudo-random bijection of [0, rows),
// computed arithmetically (no table), with its inverse.
//
// ZEN's ownership needs (a) a balanced row -> server map whatever the skew
// of the ids and (b) every server's domain D_j as a dense index space for
// the hash bitmap. Both follow from one bijection pi of [0, rows): server j
// owns the ids whose permuted index pi(id) falls in the j-th of n even
// contiguous ranges, and an id's position in D_j is pi(id) - start_j. The
// inverse maps a position back to its id. Memory is O(1) whatever `rows`
// (2^40 rows cost nothing), so ZEN's cost follows the non-zeros.
//
// Construction: a generalized Feistel network on k = max(2, ceil(log2 rows))
// bits, the value split into a high half of a = ceil(k/2) bits and a low half
// of b = floor(k/2) bits; round i xors one half with F_i(other half), masked
// to its width, alternating halves (every round is its own inverse given the
// untouched half, so the network is a bijection on [0, 2^k)). F_i is a
// multiply-shift hash: the top bits of (half xor key_i) x mul_i (mul_i odd),
// keys and multipliers derived from the seed. Eight rounds (four full
// Feistel rounds); about 10 ns per application. Cycle walking restricts it to
// [0, rows): apply the network until the value lands below rows; since
// 2^k < 2 rows, that takes fewer than 2 applications on average. Cycle
// walking of a bijection on a superset is a bijection on the subset.
//
// The seed fixes the function: ranks that agree on (seed, rows) agree on
// every value without communication. Pseudo-random, not cryptographic.
//
// Usage:
//   zen::RowPermutation pi(/*seed=*/42, /*rows=*/int64_t{1} << 40);
//   int64_t p = pi(id);             // in [0, rows)
//   int64_t back = pi.Inverse(p);   // == id
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace zen {

// The largest `rows` a RowPermutation (and ZEN's ownership) accepts.
inline constexpr int64_t kMaxPermutedRows = int64_t{1} << 62;

class RowPermutation {
 public:
  static constexpr size_t kRounds = 8;

  // The permutation of [0, 1) (identity).
  RowPermutation() : RowPermutation(0, 1) {}
  // rows in [1, kMaxPermutedRows]; InvalidArgument otherwise.
  RowPermutation(uint64_t seed, int64_t rows);

  // pi(id) for id in [0, rows) (unchecked).
  int64_t operator()(int64_t id) const {
    uint64_t x = static_cast<uint64_t>(id);
    do {
      x = Forward(x);
    } while (x >= static_cast<uint64_t>(rows_));
    return static_cast<int64_t>(x);
  }
  // pi^-1(p) for p in [0, rows) (unchecked). Both also take any value in
  // [rows, 2^bits()) and walk it on to the first value below rows: what
  // continuing a cycle walk from that value gives.
  int64_t Inverse(int64_t p) const {
    uint64_t x = static_cast<uint64_t>(p);
    do {
      x = Backward(x);
    } while (x >= static_cast<uint64_t>(rows_));
    return static_cast<int64_t>(x);
  }

  // pi^-1 of the key held in bits [shift, 64) of every word, in place; the
  // bits below `shift` ride along. shift in [0, 64), every key in [0, rows)
  // and below 2^(64 - shift) (unchecked). The same values as Inverse. Rows
  // are inverted sixteen at a time in vector registers (four 64-bit lanes
  // each; AVX2 where the CPU has it, chosen at run time). Results that
  // leave [0, rows) (up to half of them: the network permutes [0, 2^bits()))
  // walk their cycle batched too, collected per block of 1024 words, which
  // costs a fraction of walking them one at a time
  // (`zen_local_bench --benchmark_filter=Permutation` measures both).
  // The element-sparse decode's hottest loop (one inverse per result row).
  void InverseInPlace(std::span<uint64_t> words, int shift) const;
  // pi of every word's key field, in place, under the same conditions: the
  // batched operator() (the partitioner's per-row loop).
  void ForwardInPlace(std::span<uint64_t> words, int shift) const;

  int64_t rows() const { return rows_; }
  uint64_t seed() const { return seed_; }
  int bits() const { return lo_bits_ + hi_bits_; }

  friend bool operator==(const RowPermutation& a, const RowPermutation& b) {
    return a.seed_ == b.seed_ && a.rows_ == b.rows_;
  }

 private:
  // One pass of the network over [0, 2^k).
  // Round function i: multiply-shift (Dietzfelbinger) of the half xor a
  // key, keeping the product's top `bits` bits (its best-mixed ones).
  // (The shifts 64 - bits are precomputed: the inverse runs once per row
  // of every result, ZEN's hottest loop for element-sparse tensors.)
  uint64_t F(size_t i, uint64_t v, int shift) const {
    return ((v ^ keys_[i]) * muls_[i]) >> shift;
  }
  uint64_t Forward(uint64_t x) const {
    uint64_t hi = x >> lo_bits_, lo = x & lo_mask_;
    for (size_t i = 0; i < kRounds; i += 2) {
      hi ^= F(i, lo, hi_shift_);
      lo ^= F(i + 1, hi, lo_shift_);
    }
    return (hi << lo_bits_) | lo;
  }
  uint64_t Backward(uint64_t x) const {
    uint64_t hi = x >> lo_bits_, lo = x & lo_mask_;
    for (size_t i = kRounds; i >= 2; i -= 2) {
      lo ^= F(i - 1, hi, lo_shift_);
      hi ^= F(i - 2, lo, hi_shift_);
    }
    return (hi << lo_bits_) | lo;
  }

  uint64_t seed_ = 0;
  int64_t rows_ = 1;
  int lo_bits_ = 1;
  int hi_bits_ = 1;
  int lo_shift_ = 63;  // 64 - lo_bits_
  int hi_shift_ = 63;  // 64 - hi_bits_
  uint64_t lo_mask_ = 1;
  uint64_t hi_mask_ = 1;
  std::array<uint64_t, kRounds> keys_{};
  std::array<uint64_t, kRounds> muls_{};  // odd
};

}  // namespace zen
