// zen/core/hash.h — the seeded universal hash family ZEN partitions rows with.
//
// UniversalHash is one function drawn from the k-independent polynomial
// family over the Mersenne prime field Z_p, p = 2^61 - 1:
//     h(x) = (c_{k-1} x^{k-1} + ... + c_1 x + c_0) mod p,
// with coefficients c_i drawn from a 64-bit seed (splitmix64 stream, reduced
// mod p, leading coefficient non-zero). For keys in [0, p) and uniformly
// random coefficients the values h(x_1), ..., h(x_k) of any k distinct keys
// are independent and uniform on Z_p (Carter & Wegman; Wegman & Carter 1981):
//   - independence 2 (a line) is pairwise independent: collision
//     probability of two keys is 1/range (up to the rounding of p/range);
//   - independence 4 (a cubic) bounds the 4th moment of a bin's load, so a
//     server's share of any fixed set of S rows is S/n (1 +- O(sqrt(n/S)))
//     with high probability, whatever the set (skewed, contiguous, strided).
// The seed fixes the function completely: ranks that agree on (seed, range)
// compute identical values on every id, with no communication, which is what
// makes the row -> server map consistent. The coefficient draw from a seed
// is a deterministic pseudo-random stream, so the guarantees hold for
// "random" seeds in the usual practical sense, not against an adversary
// that knows the seed.
//
// Values in [0, range) are taken from the top of the field value (multiply
// and shift), which keeps the bias below range / p < 2^-40 for range < 2^21.
// Keys must lie in [0, p); row ids above 2^61 - 2 are rejected by callers.
//
// Usage:
//   zen::UniversalHash h0(/*seed=*/42, /*independence=*/4);
//   int server = static_cast<int>(h0(row_id, /*range=*/n));   // same on every rank
//   zen::UniversalHash slot(zen::DeriveSeed(42, 1), 2);
//   uint64_t s = slot(row_id, table_size);
//   uint64_t f = zen::Fnv1a("emb.weight");   // a stable fingerprint of a name
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace zen {

// The field prime 2^61 - 1; keys must be below it.
inline constexpr uint64_t kHashPrime = (uint64_t{1} << 61) - 1;

// FNV-1a (64-bit) of the bytes of `s`, continuing from `h`: a stable
// fingerprint of a name or a record (the metadata exchange's call identity,
// the engine's batch description); not a keyed hash. kFnv1aBasis is the
// offset basis the metadata records and the committed fuzz seeds carry: the
// published one (14695981039346656037) less its last digit; Fnv1a(s,
// 14695981039346656037) is the published FNV-1a.
inline constexpr uint64_t kFnv1aBasis = 1469598103934665603ULL;
constexpr uint64_t Fnv1a(std::string_view s, uint64_t h = kFnv1aBasis) {
  for (const char c : s) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ULL;
  return h;
}

// Derives the seed of the i-th member of a family from a base seed
// (splitmix64 of base + i * golden ratio); distinct i give unrelated seeds.
uint64_t DeriveSeed(uint64_t base, uint64_t i);

class UniversalHash {
 public:
  static constexpr int kMaxIndependence = 4;

  // The pairwise-independent function of seed 0.
  UniversalHash() : UniversalHash(0, 2) {}
  // independence in [2, kMaxIndependence]; InvalidArgument otherwise.
  UniversalHash(uint64_t seed, int independence);

  // The field value h(key) in [0, p). key must be in [0, p).
  uint64_t Raw(uint64_t key) const {
    uint64_t h = coeff_[static_cast<size_t>(independence_ - 1)];
    for (int i = independence_ - 2; i >= 0; --i) {
      h = MulAddMod(h, key, coeff_[static_cast<size_t>(i)]);
    }
    return h;
  }

  // h(key) mapped onto [0, range); range >= 1.
  uint64_t operator()(uint64_t key, uint64_t range) const { return ToRange(Raw(key), range); }

  uint64_t seed() const { return seed_; }
  int independence() const { return independence_; }

  // (a * x + b) mod p for a, x, b < p.
  static uint64_t MulAddMod(uint64_t a, uint64_t x, uint64_t b) {
    const unsigned __int128 t = static_cast<unsigned __int128>(a) * x + b;
    uint64_t r = (static_cast<uint64_t>(t) & kHashPrime) + static_cast<uint64_t>(t >> 61);
    r = (r & kHashPrime) + (r >> 61);
    return r >= kHashPrime ? r - kHashPrime : r;
  }
  // v in [0, p) -> floor(v * range / 2^61), in [0, range).
  static uint64_t ToRange(uint64_t v, uint64_t range) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(v) * range) >> 61);
  }

  friend bool operator==(const UniversalHash& a, const UniversalHash& b) {
    return a.seed_ == b.seed_ && a.independence_ == b.independence_;
  }

 private:
  uint64_t seed_ = 0;
  int independence_ = 2;
  std::array<uint64_t, kMaxIndependence> coeff_{};
};

// h0 of the paper: row id -> server in [0, servers), 4-independent.
class ServerHash {
 public:
  ServerHash() = default;
  // servers >= 1; InvalidArgument otherwise.
  ServerHash(uint64_t seed, int servers);

  int operator()(int64_t id) const {
    return static_cast<int>(hash_(static_cast<uint64_t>(id), static_cast<uint64_t>(servers_)));
  }
  int servers() const { return servers_; }
  uint64_t seed() const { return hash_.seed(); }

  friend bool operator==(const ServerHash&, const ServerHash&) = default;

 private:
  UniversalHash hash_{0, 4};
  int servers_ = 1;
};

}  // namespace zen
