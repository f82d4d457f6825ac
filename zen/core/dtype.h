// zen/core/dtype.h — the type of a tensor's values, and the one place that
// maps it to a C++ value type.
//
// A SparseTensor carries its DType; data movement is bytes (row_bytes() =
// width x DTypeSize), and only the arithmetic (adding rows, merging, testing
// for zeros) is a kernel templated on the value type. A scheme turns the
// tensor's dtype into its value type once per call with WithValueType and
// runs its templated kernels; nothing dispatches per element.
//
// The codes are those of the metadata record (zen/schemes/scheme.cc) and of
// zen.process_group: 1 float32, 2 float64, 3 bfloat16, 4 float16.
//
// Usage:
//   zen::DType d = t.dtype();                        // e.g. DType::kFloat64
//   size_t bytes = zen::DTypeSize(d);                // 8
//   zen::WithValueType(d, [&]<typename T>() { Sum<T>(t.values<T>()); });
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "zen/core/error.h"
#include "zen/core/half.h"

namespace zen {

enum class DType : uint8_t { kFloat32 = 1, kFloat64 = 2, kBfloat16 = 3, kFloat16 = 4 };

// The 16-bit value types, held as their bit patterns. They have no
// arithmetic of their own: a kernel widens them to AccumOf<T> (float), sums
// there, and narrows once when it stores (round to nearest even).
struct Bfloat16 {
  uint16_t bits;
};
struct Float16 {
  uint16_t bits;
};

// What values of T are summed in, and the two conversions. float and double
// are summed in themselves; Bfloat16 and Float16 in float.
template <typename T>
struct ValueTraits {
  using Accum = T;
  static T Widen(T v) { return v; }
  static T Narrow(T a) { return a; }
};
template <>
struct ValueTraits<Bfloat16> {
  using Accum = float;
  static float Widen(Bfloat16 v) { return Bfloat16BitsToFloat(v.bits); }
  static Bfloat16 Narrow(float a) { return Bfloat16{FloatToBfloat16Bits(a)}; }
};
template <>
struct ValueTraits<Float16> {
  using Accum = float;
  static float Widen(Float16 v) { return HalfBitsToFloat(v.bits); }
  static Float16 Narrow(float a) { return Float16{FloatToHalfBits(a)}; }
};

// AccumOf<Bfloat16> == float; Widen/Narrow convert one value.
template <typename T>
using AccumOf = typename ValueTraits<T>::Accum;
template <typename T>
AccumOf<T> Widen(T v) {
  return ValueTraits<T>::Widen(v);
}
template <typename T>
T Narrow(AccumOf<T> a) {
  return ValueTraits<T>::Narrow(a);
}

// "float32", "float64"; "dtype <code>" for a code that names none.
inline const char* DTypeName(DType d) {
  switch (d) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kBfloat16: return "bfloat16";
    case DType::kFloat16: return "float16";
  }
  return "an unknown dtype";
}

// Bytes of one value (0 for a code that names no dtype).
inline size_t DTypeSize(DType d) {
  switch (d) {
    case DType::kFloat32: return sizeof(float);
    case DType::kFloat64: return sizeof(double);
    case DType::kBfloat16: return sizeof(Bfloat16);
    case DType::kFloat16: return sizeof(Float16);
  }
  return 0;
}

// The DType of a value type: DTypeOf<double> == DType::kFloat64.
template <typename T>
inline constexpr DType DTypeOf = std::is_same_v<T, double>     ? DType::kFloat64
                                 : std::is_same_v<T, Bfloat16> ? DType::kBfloat16
                                 : std::is_same_v<T, Float16>  ? DType::kFloat16
                                                               : DType::kFloat32;

// Calls fn.template operator()<T>() with T the value type of `d` (float,
// double) and returns its result; a code that names no dtype is
// InvalidArgument. The one switch from a dtype to a kernel's value type.
template <typename Fn>
decltype(auto) WithValueType(DType d, Fn&& fn) {
  switch (d) {
    case DType::kFloat32: return fn.template operator()<float>();
    case DType::kFloat64: return fn.template operator()<double>();
    case DType::kBfloat16:
    case DType::kFloat16: break;  // not yet taken by every kernel
  }
  throw InvalidArgument(Where{}, "dtype code ", static_cast<int>(d), " names no dtype");
}

}  // namespace zen
