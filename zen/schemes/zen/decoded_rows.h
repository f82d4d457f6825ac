// zen/schemes/zen/decoded_rows.h — a pulled or pushed rows message copied
// out of its buffer, for tests, fuzzing and benchmarks (the scheme reads
// the view, RowsMessage, in place). Header-only: not part of the library.
//
// Usage:
//   zen::DecodedRows got;
//   zen::DecodeRows(msg, domains.size(j), j, width, zen::Where{rank, "emb"}, got);
//   // got.positions ascending in [0, domain size), got.values row-major
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "zen/schemes/zen/row_codec.h"

namespace zen {

struct DecodedRows {
  RowEncoding encoding = RowEncoding::kCoo;
  std::vector<int64_t> positions;  // ascending, in [0, domain_size)
  std::vector<float> values;       // positions.size() x width
};

// ParseRows (every check, the positions included), then a copy into out.
inline void DecodeRows(std::span<const std::byte> message, int64_t domain_size, int server,
                       int64_t width, const Where& where, DecodedRows& out) {
  const RowsMessage m = ParseRows(message, domain_size, server, width, where);
  out.encoding = m.encoding;
  out.positions.resize(static_cast<size_t>(m.count));
  m.ForEach([&](size_t i, int64_t p) { out.positions[i] = p; });
  out.values.resize(static_cast<size_t>(m.count) * static_cast<size_t>(width));
  if (!out.values.empty()) {
    std::memcpy(out.values.data(), m.values, out.values.size() * sizeof(float));
  }
}

}  // namespace zen
