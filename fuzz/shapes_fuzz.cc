// libFuzzer target: size arithmetic of the C++ entry points near int64
// limits (issue 13, item 2). From the input: a shape (rows, width) biased
// towards 0, 1, powers of two and int64 limits, a few ids and values. It
// drives SparseTensor::FromCoo (both duplicate modes), FromSorted,
// FromDense with a small buffer, ToDense where the dense form is small,
// DenseElements, and a zen-trace/1 file whose header declares that shape.
// Accepted: InvalidArgument from the constructors, FormatError from the
// trace reader. Anything else (a wrapped size read past a buffer, UB,
// std::bad_alloc, std::length_error, an allocation the shape did not
// justify) is a finding. Parameter bytes: Dim() for rows and width, a
// count byte, then per id a selector and 8 bytes, then value bytes.
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <limits>
#include <string>

#include "fuzz/fuzz_cases.h"
#include "zen/core/reduce.h"
#include "zen/testing/reference.h"
#include "zen/workload/trace.h"

namespace {

using zen::fuzz::Fail;
using zen::fuzz::Input;

// A dimension: selector byte s, then 8 raw bytes r. s % 8: 0 -> r, 1 -> 2^(r%63),
// 2 -> 2^(r%63) + 1, 3 -> 2^(r%63) - 1, 4 -> INT64_MAX - r%256, 5 -> r%4096,
// 6 -> INT64_MAX / (1 + r%4096), 7 -> -(r%4).
int64_t Dim(Input& in) {
  const uint8_t s = in.Byte();
  uint64_t r = 0;
  for (int i = 0; i < 8; ++i) r |= static_cast<uint64_t>(in.Byte()) << (8 * i);
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  switch (s % 8) {
    case 0: return static_cast<int64_t>(r);
    case 1: return int64_t{1} << (r % 63);
    case 2: return (int64_t{1} << (r % 63)) + 1;
    case 3: return (int64_t{1} << (r % 63)) - 1;
    case 4: return kMax - static_cast<int64_t>(r % 256);
    case 5: return static_cast<int64_t>(r % 4096);
    case 6: return kMax / (1 + static_cast<int64_t>(r % 4096));
    default: return -static_cast<int64_t>(r % 4);
  }
}

// Expected element count, or -1 when the shape is invalid or its dense
// bytes overflow size_t (what DenseElements must reject).
__int128 ExpectedElements(int64_t rows, int64_t width) {
  if (rows < 0 || width < 0) return -1;
  const __int128 e = static_cast<__int128>(rows) * width;
  if (e > std::numeric_limits<int64_t>::max()) return -1;
  if (e * 4 > static_cast<__int128>(std::numeric_limits<size_t>::max())) return -1;
  return e;
}

bool ShapeValid(int64_t rows, int64_t width) {
  return rows >= 1 && width >= 1 &&
         static_cast<__int128>(rows) * width <= std::numeric_limits<int64_t>::max();
}

template <typename F>
bool Accepts(F&& f) {
  try {
    f();
    return true;
  } catch (const zen::InvalidArgument&) {
    return false;
  }
}

void CheckDenseElements(int64_t rows, int64_t width) {
  const __int128 want = ExpectedElements(rows, width);
  size_t got = 0;
  const bool ok = Accepts([&] { got = zen::DenseElements(rows, width, "fuzz"); });
  if (ok != (want >= 0)) Fail("DenseElements accepted an overflowing shape or rejected a valid one");
  if (ok && static_cast<__int128>(got) != want) Fail("DenseElements wrapped");
}

void CheckConstructors(int64_t rows, int64_t width, const std::vector<int64_t>& ids,
                       const std::vector<float>& values) {
  const bool valid = ShapeValid(rows, width);
  for (auto dup : {zen::Duplicates::kReject, zen::Duplicates::kSum}) {
    zen::SparseTensor t;
    if (Accepts([&] { t = zen::SparseTensor::FromCoo(rows, width, ids, values, dup, "f"); })) {
      if (!valid) Fail("FromCoo accepted an invalid shape");
      zen::fuzz::CheckTensor(t, rows, width);
    }
  }
  zen::SparseTensor s;
  if (Accepts([&] { s = zen::SparseTensor::FromSorted(rows, width, ids, values, "f"); })) {
    if (!valid) Fail("FromSorted accepted an invalid shape");
    zen::fuzz::CheckTensor(s, rows, width);
    if (s.nnz() != ids.size()) Fail("FromSorted changed nnz");
    // The dense form only where it is small; above that ToDense must throw
    // InvalidArgument or succeed, but the fuzzer's malloc limit would flag
    // the allocation itself.
    const __int128 e = ExpectedElements(rows, width);
    if (e >= 0 && e <= (1 << 16)) {
      const std::vector<float> dense = s.ToDense();
      if (static_cast<__int128>(dense.size()) != e) Fail("ToDense size");
      const zen::SparseTensor back = zen::SparseTensor::FromDense(dense, rows, width, "f");
      zen::fuzz::CheckTensor(back, rows, width);
      const std::vector<zen::SparseTensor> one = {s};
      const zen::DenseReference ref(one);
      if (ref.CompareDense(dense).rows_mismatch != 0) Fail("ToDense disagrees with the reference");
    } else {
      std::vector<float> small(values.begin(), values.end());
      if (Accepts([&] { s.ToDense(small); })) Fail("ToDense filled a buffer of the wrong size");
      const std::vector<zen::SparseTensor> one = {s};
      const zen::DenseReference ref(one);  // sparse: fine for any rows
      if (ref.Compare(s).rows_mismatch != 0) Fail("reference disagrees with its input");
    }
  }
  // FromDense with the small buffer the fuzzer gave: accepted only when
  // rows x width equals its size exactly (no wrapping).
  zen::SparseTensor d;
  if (Accepts([&] { d = zen::SparseTensor::FromDense(values, rows, width, "f"); })) {
    if (!valid || static_cast<__int128>(rows) * width != static_cast<__int128>(values.size())) {
      Fail("FromDense accepted a buffer whose size is not rows x width");
    }
    zen::fuzz::CheckTensor(d, rows, width);
  }
}

// A zen-trace/1 file of one tensor whose header declares [rows, width] and
// holds the given ids (rank 0) with nnz x width values when that is small.
void CheckTraceHeader(int64_t rows, int64_t width, const std::vector<int64_t>& ids) {
  static const std::string path = "/tmp/zen-shapes-fuzz-" + std::to_string(::getpid());
  const uint64_t nnz = ids.size();
  const uint64_t w = static_cast<uint64_t>(width);
  const bool small = width >= 0 && w <= 64;
  const uint64_t vbytes = small ? nnz * w * 4 : 0;
  const std::string header =
      "{\"__metadata__\":{\"format\":\"zen-trace/1\",\"world_size\":\"1\",\"t.shape\":\"[" +
      std::to_string(rows) + ", " + std::to_string(width) + "]\"},\"t/0/indices\":{\"dtype\":" +
      "\"I64\",\"shape\":[" + std::to_string(nnz) + "],\"data_offsets\":[0," +
      std::to_string(nnz * 8) + "]},\"t/0/values\":{\"dtype\":\"F32\",\"shape\":[" +
      std::to_string(nnz) + "," + std::to_string(w) + "],\"data_offsets\":[" +
      std::to_string(nnz * 8) + "," + std::to_string(nnz * 8 + vbytes) + "]}}";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    const uint64_t len = header.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out << header;
    out.write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(nnz * 8));
    const std::vector<float> zeros(vbytes / 4, 1.0f);
    out.write(reinterpret_cast<const char*>(zeros.data()), static_cast<std::streamsize>(vbytes));
  }
  try {
    zen::TraceReader reader(path);
    if (!ShapeValid(rows, width)) Fail("trace reader accepted an invalid shape");
    const zen::SparseTensor t = reader.ReadRank("t", 0);
    zen::fuzz::CheckTensor(t, rows, width);
  } catch (const zen::FormatError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  const int64_t rows = Dim(in);
  const int64_t width = Dim(in);
  const uint8_t counts = in.Byte();
  const size_t nnz = counts % 8;
  std::vector<int64_t> ids;
  for (size_t i = 0; i < nnz; ++i) {
    // An id near 0, near rows, or raw.
    const uint8_t how = in.Byte();
    int64_t raw = 0;
    for (int b = 0; b < 8; ++b) raw |= static_cast<int64_t>(in.Byte()) << (8 * b);
    // (rows - 1 - k wraps for rows near INT64_MIN: computed unsigned, so the
    // harness itself has no signed overflow; such an id is invalid anyway.)
    const auto near_end =
        static_cast<int64_t>(static_cast<uint64_t>(rows) - 1 - static_cast<uint64_t>(raw & 15));
    ids.push_back(how % 3 == 0 ? raw % 16 : how % 3 == 1 ? near_end : raw);
  }
  // Values: nnz x width of them when that is small, else counts / 8 floats.
  std::vector<float> values;
  const size_t nvalues =
      width >= 1 && width <= 64 && (counts & 0x80) == 0 ? nnz * static_cast<size_t>(width)
                                                        : (counts >> 3) % 16;
  for (size_t i = 0; i < nvalues; ++i) values.push_back(static_cast<float>(in.Byte() % 7) - 3.0f);
  CheckDenseElements(rows, width);
  CheckConstructors(rows, width, ids, values);
  CheckTraceHeader(rows, width, ids);
  return 0;
}
