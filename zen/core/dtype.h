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
// zen.process_group: 1 float32, 2 float64, 3 bfloat16, 4 float16. float32
// and float64 are summed in themselves; bfloat16 and float16 are held as
// their bit patterns and summed in float (AccumOf), rounded once when a
// result is stored.
//
// Usage:
//   zen::DType d = t.dtype();                        // e.g. DType::kFloat64
//   size_t bytes = zen::DTypeSize(d);                // 8
//   zen::WithValueType(d, [&]<typename T>() { Sum<T>(t.values<T>()); });
//   float x = zen::Widen(zen::Narrow<zen::Bfloat16>(0.1f));   // 0.10009765625f
//   bool ok = zen::DTypeSet::All().Has(d);             // a scheme's dtypes
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "zen/core/error.h"
#include "zen/core/half.h"

namespace zen {

// The value types, one line each: X(C++ value type, DType enumerator, the
// code of the metadata record and zen.process_group, name). Everything that
// exists once per dtype is generated from this list: the DType enum,
// DTypeName, DTypeSize, DTypeOf, WithValueType, PerValueType (one object
// per value type), the explicit instantiations of the core kernels
// (reduce.cc, merge_rows.cc, sparse_tensor.cc) and of the schemes' typed
// code, and the bindings' dtype rule (ValueDType, python/src/bind_schemes.cc:
// numpy names the dtypes as DTypeName does). A new dtype is one line here
// plus its storage type and ValueTraits below (docs/architecture.md, "How
// to add a dtype").
#define ZEN_FOR_EACH_VALUE_TYPE(X)      \
  X(float, kFloat32, 1, "float32")      \
  X(double, kFloat64, 2, "float64")     \
  X(Bfloat16, kBfloat16, 3, "bfloat16") \
  X(Float16, kFloat16, 4, "float16")

#define ZEN_DTYPE_ENUMERATOR(T, e, code, name) e = code,
enum class DType : uint8_t { ZEN_FOR_EACH_VALUE_TYPE(ZEN_DTYPE_ENUMERATOR) };
#undef ZEN_DTYPE_ENUMERATOR

// The 16-bit value types, held as their bit patterns. They have no
// arithmetic of their own: a kernel widens them to AccumOf<T> (float), sums
// there, and narrows once when it stores (round to nearest even).
// Equality is of the bit patterns.
struct Bfloat16 {
  uint16_t bits;
  friend bool operator==(Bfloat16, Bfloat16) = default;
};
struct Float16 {
  uint16_t bits;
  friend bool operator==(Float16, Float16) = default;
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
// a + b in AccumOf<T>, rounded once to T (for float and double: a + b).
template <typename T>
T Add(T a, T b) {
  return Narrow<T>(Widen(a) + Widen(b));
}

// Whether T is one of the value types of ZEN_FOR_EACH_VALUE_TYPE.
#define ZEN_DTYPE_IS(V, e, code, name) || std::is_same_v<T, V>
template <typename T>
inline constexpr bool IsValueType = false ZEN_FOR_EACH_VALUE_TYPE(ZEN_DTYPE_IS);
#undef ZEN_DTYPE_IS

namespace detail {
struct NoType {};
template <typename Tuple>
struct DropFirst;
template <typename First, typename... Rest>
struct DropFirst<std::tuple<First, Rest...>> {
  using type = std::tuple<Rest...>;
};
}  // namespace detail

// "float32", "float64", ...; "an unknown dtype" for a code that names none.
inline const char* DTypeName(DType d) {
#define ZEN_DTYPE_CASE(T, e, code, name) \
  case DType::e: return name;
  switch (d) { ZEN_FOR_EACH_VALUE_TYPE(ZEN_DTYPE_CASE) }
#undef ZEN_DTYPE_CASE
  return "an unknown dtype";
}

// Bytes of one value (0 for a code that names no dtype).
inline size_t DTypeSize(DType d) {
#define ZEN_DTYPE_CASE(T, e, code, name) \
  case DType::e: return sizeof(T);
  switch (d) { ZEN_FOR_EACH_VALUE_TYPE(ZEN_DTYPE_CASE) }
#undef ZEN_DTYPE_CASE
  return 0;
}

// The dtype named `name` ("float32", "bfloat16", ...): true and `out` set,
// or false.
inline bool DTypeFromName(std::string_view name, DType& out) {
#define ZEN_DTYPE_IF_NAMED(T, e, code, n) \
  if (name == n) {                        \
    out = DType::e;                       \
    return true;                          \
  }
  ZEN_FOR_EACH_VALUE_TYPE(ZEN_DTYPE_IF_NAMED)
#undef ZEN_DTYPE_IF_NAMED
  return false;
}

namespace detail {
template <typename T>
constexpr DType DTypeOfType() {
#define ZEN_DTYPE_IF(V, e, code, name) \
  if constexpr (std::is_same_v<T, V>) return DType::e;
  ZEN_FOR_EACH_VALUE_TYPE(ZEN_DTYPE_IF)
#undef ZEN_DTYPE_IF
  static_assert(IsValueType<T>, "not a value type of ZEN_FOR_EACH_VALUE_TYPE");
  return DType{};
}
}  // namespace detail

// The DType of a value type: DTypeOf<double> == DType::kFloat64.
template <typename T>
inline constexpr DType DTypeOf = detail::DTypeOfType<T>();

// Calls fn.template operator()<T>() with T the value type of `d` and
// returns its result; a code that names no dtype is InvalidArgument. The
// one switch from a dtype to a kernel's value type.
template <typename Fn>
decltype(auto) WithValueType(DType d, Fn&& fn) {
#define ZEN_DTYPE_CASE(T, e, code, name) \
  case DType::e: return fn.template operator()<T>();
  switch (d) { ZEN_FOR_EACH_VALUE_TYPE(ZEN_DTYPE_CASE) }
#undef ZEN_DTYPE_CASE
  throw InvalidArgument(Where{}, "dtype code ", static_cast<int>(d), " names no dtype");
}

// One F<T> per value type, for state a scheme keeps across calls per dtype
// (its merge parts, its accumulator): Of<T>() is the one of T.
//   zen::PerValueType<std::vector> v;  v.Of<double>().push_back(1.0);
template <template <typename> class F>
class PerValueType {
 public:
  template <typename T>
  F<T>& Of() {
    return std::get<F<T>>(items_);
  }
  template <typename T>
  const F<T>& Of() const {
    return std::get<F<T>>(items_);
  }

 private:
#define ZEN_DTYPE_ITEM(T, e, code, name) , F<T>
  using Items = typename detail::DropFirst<std::tuple<detail::NoType ZEN_FOR_EACH_VALUE_TYPE(
      ZEN_DTYPE_ITEM)>>::type;
#undef ZEN_DTYPE_ITEM
  Items items_;
};

// A set of dtypes (what a scheme sums, SyncCapabilities): one bit per code.
class DTypeSet {
 public:
  constexpr DTypeSet() = default;
  constexpr DTypeSet(std::initializer_list<DType> dtypes) {
    for (DType d : dtypes) bits_ |= Bit(d);
  }
  // Every dtype of ZEN_FOR_EACH_VALUE_TYPE.
  static constexpr DTypeSet All() {
#define ZEN_DTYPE_ADD(T, e, code, name) s.bits_ |= Bit(DType::e);
    DTypeSet s;
    ZEN_FOR_EACH_VALUE_TYPE(ZEN_DTYPE_ADD)
#undef ZEN_DTYPE_ADD
    return s;
  }
  constexpr bool Has(DType d) const { return (bits_ & Bit(d)) != 0; }
  constexpr bool empty() const { return bits_ == 0; }
  // The names of the dtypes, comma-separated ("float32, float64").
  std::string Names() const {
    std::string out;
#define ZEN_DTYPE_NAME(T, e, code, name)    \
  if (Has(DType::e)) {                      \
    if (!out.empty()) out += ", ";          \
    out += name;                            \
  }
    ZEN_FOR_EACH_VALUE_TYPE(ZEN_DTYPE_NAME)
#undef ZEN_DTYPE_NAME
    return out;
  }
  friend constexpr bool operator==(DTypeSet, DTypeSet) = default;

 private:
  static constexpr uint32_t Bit(DType d) {
    return static_cast<uint8_t>(d) < 32 ? uint32_t{1} << static_cast<uint8_t>(d) : 0;
  }
  uint32_t bits_ = 0;
};

}  // namespace zen
