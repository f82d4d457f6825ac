#include "zen/schemes/wire.h"

#include <cstring>

namespace zen {

void AppendCoo(ByteBuffer& out, std::span<const int64_t> ids, std::span<const float> values) {
  const size_t start = out.size();
  out.resize(start + ids.size_bytes() + values.size_bytes());
  if (!ids.empty()) std::memcpy(out.data() + start, ids.data(), ids.size_bytes());
  if (!values.empty()) {
    std::memcpy(out.data() + start + ids.size_bytes(), values.data(), values.size_bytes());
  }
}

ByteBuffer EncodeCoo(std::span<const int64_t> ids, std::span<const float> values) {
  ByteBuffer out;
  AppendCoo(out, ids, values);
  return out;
}

CooView ViewCoo(std::span<const std::byte> bytes, int64_t rows, int64_t width, const Where& where,
                int sender) {
  const size_t per_row = CooBytes(1, width);
  if (bytes.size() % per_row != 0) {
    throw FormatError(where, "COO message from rank ", sender, " has ", bytes.size(),
                      " bytes, not a multiple of the ", per_row, "-byte row (width ", width, ")");
  }
  const size_t nnz = bytes.size() / per_row;
  if (nnz == 0) return {};
  // int64 ids at offset 0 (8-byte aligned: ByteBuffer storage), then floats.
  const std::span<const int64_t> ids(reinterpret_cast<const int64_t*>(bytes.data()), nnz);
  const std::span<const float> values(
      reinterpret_cast<const float*>(bytes.data() + nnz * sizeof(int64_t)),
      nnz * static_cast<size_t>(width));
  for (size_t i = 0; i < nnz; ++i) {
    if (ids[i] < 0 || ids[i] >= rows || (i > 0 && ids[i] <= ids[i - 1])) {
      throw FormatError(where, "COO message from rank ", sender, " holds id ", ids[i],
                        " at position ", i, ": ids must be increasing and inside [0, ", rows, ")");
    }
  }
  return {ids, values};
}

SparseTensor DecodeCoo(std::span<const std::byte> bytes, int64_t rows, int64_t width,
                       const Where& where, int sender) {
  const CooView view = ViewCoo(bytes, rows, width, where, sender);
  return SparseTensor::FromSorted(rows, width, std::vector<int64_t>(view.ids.begin(), view.ids.end()),
                                  std::vector<float>(view.values.begin(), view.values.end()),
                                  std::string(where.tensor));
}

}  // namespace zen
