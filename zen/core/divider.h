// zen/core/divider.h — exact unsigned 64-bit division by a divisor fixed in
// advance, with a multiply instead of a divide instruction.
//
// Row ownership divides on every row: a row's server is key x n / rows and
// its domain starts at ceil(s x rows / n). A 64-bit `div` costs 30-90 cycles
// on current x86 cores, more than the rest of locating a row together, so
// RowOwner keeps a Divider for `rows` and one for `n`.
//
// Method: m = floor((2^64 - 1) / d), the quotient estimate q' = floor(x m /
// 2^64) is floor(x / d) or one less (m <= 2^64 / d gives q' <= x / d, and
// m > 2^64 / d - 1 gives q' > x / d - 1), so one compare of the remainder
// corrects it. Exact for every x < 2^64 and every d >= 1.
//
// Usage:
//   zen::Divider by_rows(rows);
//   uint64_t q = by_rows.Div(x);   // == x / rows
#pragma once

#include <cstdint>

namespace zen {

class Divider {
 public:
  Divider() : Divider(1) {}
  // d >= 1 (d == 0 is treated as 1).
  explicit Divider(uint64_t d) : d_(d == 0 ? 1 : d), m_(~uint64_t{0} / d_) {}

  uint64_t Div(uint64_t x) const {
    uint64_t q = static_cast<uint64_t>((static_cast<unsigned __int128>(x) * m_) >> 64);
    if (x - q * d_ >= d_) ++q;
    return q;
  }
  uint64_t divisor() const { return d_; }

  friend bool operator==(const Divider& a, const Divider& b) { return a.d_ == b.d_; }

 private:
  uint64_t d_;
  uint64_t m_;
};

}  // namespace zen
