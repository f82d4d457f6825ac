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
// zen.process_group: 1 float32, 2 float64; 3 and 4 are kept for bfloat16
// and float16.
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

namespace zen {

enum class DType : uint8_t { kFloat32 = 1, kFloat64 = 2 };

// "float32", "float64"; "dtype <code>" for a code that names none.
inline const char* DTypeName(DType d) {
  switch (d) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
  }
  return "an unknown dtype";
}

// Bytes of one value (0 for a code that names no dtype).
inline size_t DTypeSize(DType d) {
  switch (d) {
    case DType::kFloat32: return sizeof(float);
    case DType::kFloat64: return sizeof(double);
  }
  return 0;
}

// The DType of a value type: DTypeOf<double> == DType::kFloat64.
template <typename T>
inline constexpr DType DTypeOf = std::is_same_v<T, double> ? DType::kFloat64 : DType::kFloat32;

// Calls fn.template operator()<T>() with T the value type of `d` (float,
// double) and returns its result; a code that names no dtype is
// InvalidArgument. The one switch from a dtype to a kernel's value type.
template <typename Fn>
decltype(auto) WithValueType(DType d, Fn&& fn) {
  switch (d) {
    case DType::kFloat32: return fn.template operator()<float>();
    case DType::kFloat64: return fn.template operator()<double>();
  }
  throw InvalidArgument(Where{}, "dtype code ", static_cast<int>(d), " names no dtype");
}

}  // namespace zen
