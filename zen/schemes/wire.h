// zen/schemes/wire.h — the COO message layout shared by the sparse schemes,
// with validation of everything received.
//
// A COO message is [ids: int64 x nnz][values: nnz x width of the tensor's
// dtype (float32 unless told: the T of the typed entries)], little
// endian, no header: the receiver knows rows and width (agreed by
// CheckRanksAgree) and derives nnz from the byte length. DecodeCoo rejects a
// length that is not a whole number of rows, ids outside [0, rows), and ids
// that are not strictly increasing, with a FormatError naming the receiving
// rank, the tensor, the sender and the offending value: received bytes are
// never trusted. Every size here is computed without wrapping (CooBytes
// saturates, CooBytesBound caps at INT64_MAX).
//
// Usage:
//   ByteBuffer msg = zen::EncodeCoo(t.ids(), t.values());
//   SparseTensor back = zen::DecodeCoo(msg, rows, width, Where{rank, name}, sender);
#pragma once

#include <cstdint>
#include <new>
#include <span>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "zen/comm/collectives.h"
#include "zen/core/checked.h"
#include "zen/core/error.h"
#include "zen/core/sparse_tensor.h"

namespace zen {

// Bytes of a COO message holding nnz rows of `width` values of
// `value_bytes` bytes each, saturating at SIZE_MAX when that does not fit
// size_t (no real message is that large, so a receiver treats SIZE_MAX as a
// corrupt announcement). width >= 0.
inline size_t CooBytes(size_t nnz, int64_t width, size_t value_bytes = sizeof(float)) {
  size_t values = 0, per_row = 0, out = 0;
  if (width < 0 || !TryMul(static_cast<size_t>(width), value_bytes, values) ||
      !TryAdd(values, sizeof(int64_t), per_row) || !TryMul(nnz, per_row, out)) {
    return SIZE_MAX;
  }
  return out;
}

// The largest COO message a sender can have for a [rows x width] tensor
// (every row present), saturating at INT64_MAX: the bound passed to the
// collectives so a peer cannot make a receiver allocate more.
inline int64_t CooBytesBound(int64_t rows, int64_t width, size_t value_bytes = sizeof(float)) {
  const size_t per_row = CooBytes(1, width, value_bytes);
  if (rows < 0 || per_row > static_cast<size_t>(INT64_MAX)) return INT64_MAX;
  int64_t out = 0;
  return TryMul(rows, static_cast<int64_t>(per_row), out) ? out : INT64_MAX;
}

// v.resize(n), where running out of memory (or n beyond what a vector can
// hold) is InvalidArgument naming rank, tensor and the bytes asked for,
// never std::bad_alloc or std::length_error.
template <typename T>
void ResizeOrThrow(std::vector<T>& v, size_t n, const Where& where, std::string_view what) {
  try {
    v.resize(n);
  } catch (const std::bad_alloc&) {
    throw InvalidArgument(where, what, ": ", n, " x ", sizeof(T), " bytes: out of memory");
  } catch (const std::length_error&) {
    throw InvalidArgument(where, what, ": ", n, " x ", sizeof(T),
                          " bytes: more than a vector can hold");
  }
}

// Appends the COO encoding to out (for messages with a header of their own);
// values are moved as bytes.
void AppendCoo(ByteBuffer& out, std::span<const int64_t> ids, std::span<const std::byte> values);
#define ZEN_APPEND_COO(T, ...)                                                     \
  inline void AppendCoo(ByteBuffer& out, std::span<const int64_t> ids,             \
                        std::span<const T> values) {                               \
    AppendCoo(out, ids, std::as_bytes(values));                                    \
  }
ZEN_FOR_EACH_VALUE_TYPE(ZEN_APPEND_COO)
#undef ZEN_APPEND_COO

template <typename T>
ByteBuffer EncodeCoo(std::span<const int64_t> ids, std::span<const T> values) {
  ByteBuffer out;
  AppendCoo(out, ids, std::as_bytes(values));
  return out;
}
inline ByteBuffer EncodeCoo(std::span<const int64_t> ids, std::span<const float> values) {
  return EncodeCoo<float>(ids, values);
}

// T: the values' type (any of dtype.h's value types), which the receiver
// knows from the agreed dtype.
template <typename T = float>
SparseTensor DecodeCoo(std::span<const std::byte> bytes, int64_t rows, int64_t width,
                       const Where& where, int sender);

// The same checks as DecodeCoo, without a copy: the message's ids and
// values viewed in place. bytes must start 8-byte aligned, as a
// ByteBuffer's data does (InvalidArgument otherwise), and outlive the views.
template <typename T = float>
struct CooViewOf {
  std::span<const int64_t> ids;
  std::span<const T> values;
};
using CooView = CooViewOf<float>;
template <typename T = float>
CooViewOf<T> ViewCoo(std::span<const std::byte> bytes, int64_t rows, int64_t width,
                     const Where& where, int sender);

}  // namespace zen
