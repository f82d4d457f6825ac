// zen/core/wire_values.h — the width of the values a scheme sends, per call.
//
// Values on the wire at half width (opt-in, e.g. torch's bf16 compression
// composed with a sparse scheme): sums stay float32; only what crosses the
// wire is rounded (bfloat16: round to nearest even; float16: IEEE
// conversion, overflow to infinity). A scheme that can send them declares
// it (SyncCapabilities::narrow_values, zen/schemes/scheme.h); the engine
// and the bindings name the choice with this enum.
//
// Usage:
//   zen::SyncOptions call;
//   call.values = zen::WireValues::kBfloat16;
//   std::string what = zen::WireValuesName(call.values);  // "bfloat16"
#pragma once

#include <cstdint>

namespace zen {

enum class WireValues : uint8_t { kFloat32 = 0, kBfloat16 = 1, kFloat16 = 2 };

// "float32", "bfloat16", "float16" (anything else reads "float32").
inline const char* WireValuesName(WireValues v) {
  switch (v) {
    case WireValues::kBfloat16: return "bfloat16";
    case WireValues::kFloat16: return "float16";
    default: return "float32";
  }
}

}  // namespace zen
