// zen/schemes/wire.h — the COO message layout shared by the sparse schemes,
// with validation of everything received.
//
// A COO message is [ids: int64 x nnz][values: float x nnz x width], little
// endian, no header: the receiver knows rows and width (agreed by
// CheckRanksAgree) and derives nnz from the byte length. DecodeCoo rejects a
// length that is not a whole number of rows, ids outside [0, rows), and ids
// that are not strictly increasing, with a FormatError naming the receiving
// rank, the tensor, the sender and the offending value: received bytes are
// never trusted.
//
// Usage:
//   ByteBuffer msg = zen::EncodeCoo(t.ids(), t.values());
//   SparseTensor back = zen::DecodeCoo(msg, rows, width, Where{rank, name}, sender);
#pragma once

#include <cstdint>
#include <span>

#include "zen/comm/collectives.h"
#include "zen/core/error.h"
#include "zen/core/sparse_tensor.h"

namespace zen {

// Bytes of a COO message holding nnz rows of `width` floats.
inline size_t CooBytes(size_t nnz, int64_t width) {
  return nnz * (sizeof(int64_t) + static_cast<size_t>(width) * sizeof(float));
}

// The largest COO message a sender can have for a [rows x width] tensor
// (every row present), saturating at INT64_MAX: the bound passed to the
// collectives so a peer cannot make a receiver allocate more.
inline int64_t CooBytesBound(int64_t rows, int64_t width) {
  const auto per_row = static_cast<int64_t>(CooBytes(1, width));
  return rows > INT64_MAX / per_row ? INT64_MAX : rows * per_row;
}

ByteBuffer EncodeCoo(std::span<const int64_t> ids, std::span<const float> values);

// Appends the COO encoding to out (for messages with a header of their own).
void AppendCoo(ByteBuffer& out, std::span<const int64_t> ids, std::span<const float> values);

SparseTensor DecodeCoo(std::span<const std::byte> bytes, int64_t rows, int64_t width,
                       const Where& where, int sender);

}  // namespace zen
