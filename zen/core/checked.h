// zen/core/checked.h — size arithmetic that cannot overflow silently.
//
// Tables of 10^9 rows exist and peers send sizes over the wire, so every
// product or sum that sizes a buffer goes through these helpers. The
// `Try*` forms return false on overflow (and leave `out` unspecified); the
// `Checked*` forms throw InvalidArgument naming rank, tensor and both
// operands.
//
// Usage:
//   int64_t n = zen::CheckedMul(rows, width, zen::Where{rank, "emb"}, "rows x width");
//   size_t bytes = zen::CheckedMul(static_cast<size_t>(n), sizeof(float), where, "bytes");
//   int64_t total;
//   if (!zen::TryAdd(a, b, total)) return "a + b overflows";
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "zen/core/error.h"

namespace zen {

template <typename T>
  requires std::is_integral_v<T>
[[nodiscard]] constexpr bool TryMul(T a, T b, T& out) {
  return !__builtin_mul_overflow(a, b, &out);
}

template <typename T>
  requires std::is_integral_v<T>
[[nodiscard]] constexpr bool TryAdd(T a, T b, T& out) {
  return !__builtin_add_overflow(a, b, &out);
}

// a * b, or InvalidArgument "<what>: a x b overflows <type>".
template <typename T>
  requires std::is_integral_v<T>
T CheckedMul(T a, T b, const Where& where, std::string_view what) {
  T out{};
  if (!TryMul(a, b, out)) {
    throw InvalidArgument(where, what, ": ", a, " x ", b, " overflows ",
                          std::is_signed_v<T> ? "int64" : "size_t");
  }
  return out;
}

// a + b, or InvalidArgument "<what>: a + b overflows <type>".
template <typename T>
  requires std::is_integral_v<T>
T CheckedAdd(T a, T b, const Where& where, std::string_view what) {
  T out{};
  if (!TryAdd(a, b, out)) {
    throw InvalidArgument(where, what, ": ", a, " + ", b, " overflows ",
                          std::is_signed_v<T> ? "int64" : "size_t");
  }
  return out;
}

// rows x width x element bytes as size_t, with every step checked; rows
// and width must be >= 0. InvalidArgument on overflow.
inline size_t CheckedBytes(int64_t rows, int64_t width, size_t element_bytes, const Where& where,
                           std::string_view what) {
  if (rows < 0 || width < 0) {
    throw InvalidArgument(where, what, ": negative size (rows ", rows, ", width ", width, ")");
  }
  const int64_t elements = CheckedMul<int64_t>(rows, width, where, what);
  return CheckedMul<size_t>(static_cast<size_t>(elements), element_bytes, where, what);
}

}  // namespace zen
