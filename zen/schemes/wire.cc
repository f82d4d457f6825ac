#include "zen/schemes/wire.h"

#include <cstdint>
#include <cstring>

namespace zen {

void AppendCoo(ByteBuffer& out, std::span<const int64_t> ids, std::span<const std::byte> values) {
  const size_t start = out.size();
  out.resize(start + ids.size_bytes() + values.size());
  if (!ids.empty()) std::memcpy(out.data() + start, ids.data(), ids.size_bytes());
  if (!values.empty()) {
    std::memcpy(out.data() + start + ids.size_bytes(), values.data(), values.size());
  }
}

namespace {

// nnz of a COO message of `bytes` bytes; FormatError unless whole rows.
size_t CooRows(std::span<const std::byte> bytes, int64_t width, size_t value_bytes,
               const Where& where, int sender) {
  const size_t per_row = CooBytes(1, width, value_bytes);
  if (bytes.size() % per_row != 0) {
    throw FormatError(where, "COO message from rank ", sender, " has ", bytes.size(),
                      " bytes, not a multiple of the ", per_row, "-byte row (width ", width, ")");
  }
  return bytes.size() / per_row;
}

void CheckCooIds(std::span<const int64_t> ids, int64_t rows, const Where& where, int sender) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= rows || (i > 0 && ids[i] <= ids[i - 1])) {
      throw FormatError(where, "COO message from rank ", sender, " holds id ", ids[i],
                        " at position ", i, ": ids must be increasing and inside [0, ", rows, ")");
    }
  }
}

}  // namespace

template <typename T>
CooViewOf<T> ViewCoo(std::span<const std::byte> bytes, int64_t rows, int64_t width,
                     const Where& where, int sender) {
  const size_t nnz = CooRows(bytes, width, sizeof(T), where, sender);
  if (nnz == 0) return {};
  if (reinterpret_cast<std::uintptr_t>(bytes.data()) % alignof(int64_t) != 0) {
    throw InvalidArgument(where, "ViewCoo: the message from rank ", sender,
                          " does not start 8-byte aligned (DecodeCoo copies any message)");
  }
  // int64 ids at offset 0, then the values.
  const std::span<const int64_t> ids(reinterpret_cast<const int64_t*>(bytes.data()), nnz);
  const std::span<const T> values(
      reinterpret_cast<const T*>(bytes.data() + nnz * sizeof(int64_t)),
      nnz * static_cast<size_t>(width));
  CheckCooIds(ids, rows, where, sender);
  return {ids, values};
}

template <typename T>
SparseTensor DecodeCoo(std::span<const std::byte> bytes, int64_t rows, int64_t width,
                       const Where& where, int sender) {
  const size_t nnz = CooRows(bytes, width, sizeof(T), where, sender);
  std::vector<int64_t> ids(nnz);
  std::vector<T> values(nnz * static_cast<size_t>(width));
  if (nnz > 0) {  // copied, so the message may sit at any alignment
    std::memcpy(ids.data(), bytes.data(), nnz * sizeof(int64_t));
    std::memcpy(values.data(), bytes.data() + nnz * sizeof(int64_t), values.size() * sizeof(T));
  }
  CheckCooIds(ids, rows, where, sender);
  return SparseTensor::FromSorted(rows, width, std::move(ids), std::move(values),
                                  std::string(where.tensor));
}

#define ZEN_WIRE_COO(T, ...)                                                                \
  template SparseTensor DecodeCoo<T>(std::span<const std::byte>, int64_t, int64_t,          \
                                     const Where&, int);                                    \
  template CooViewOf<T> ViewCoo<T>(std::span<const std::byte>, int64_t, int64_t,            \
                                   const Where&, int);
ZEN_FOR_EACH_VALUE_TYPE(ZEN_WIRE_COO)
#undef ZEN_WIRE_COO

}  // namespace zen
