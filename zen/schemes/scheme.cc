#include "zen/schemes/scheme.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <new>
#include <stdexcept>

#include "zen/core/checked.h"
#include "zen/core/error.h"
#include "zen/core/hash.h"
#include "zen/core/worker_pool.h"

namespace zen {

void ValidateSchemeOptions(const SchemeOptions& options, std::string_view scheme) {
  if (options.block_values < 1 || options.block_values > SchemeOptions::kMaxBlockValues) {
    throw InvalidArgument(Where{}, scheme, ": block_values ", options.block_values,
                          " is outside [1, 2^30]");
  }
  if (options.threads < 0 || options.threads > kMaxThreads) {
    throw InvalidArgument(Where{}, scheme, ": threads ", options.threads, " is outside [0, ",
                          kMaxThreads, "] (0 = one per hardware thread)");
  }
}

std::string SumOrderError(std::span<const SumStep> order, int world) {
  for (size_t i = 0; i < order.size(); ++i) {
    const auto [first, start] = order[i];
    if ((i == 0 ? first != 0 : first <= order[i - 1].first) || start < 0 || start >= world) {
      return detail::Concat("sum order step ", i, " (", first, ", ", start,
                            ") is invalid: steps start at element 0, ascend, and name ranks "
                            "in [0, ", world, ")");
    }
  }
  return {};
}

std::string SumOrderName(std::span<const SumStep> order) {
  if (order.empty()) return "ranks";
  uint64_t h = kFnv1aBasis;
  for (const auto& [first, start] : order) {
    h = Fnv1a("\xff", Fnv1a(std::to_string(first) + ":" + std::to_string(start), h));
  }
  return detail::Concat(order.size(), " steps #", h % 1000000007ULL);
}

std::string MissingCapability(const SyncCapabilities& capabilities, const SyncOptions& options,
                              bool dense, DType dtype) {
  const bool ordered = capabilities.Orders(dtype);
  if (options.values != WireValues::kFloat32 &&
      (!capabilities.narrow_values || dtype != DType::kFloat32)) {
    return detail::Concat(WireValuesName(options.values), " values on the wire",
                          dtype != DType::kFloat32 ? " for " : "",
                          dtype != DType::kFloat32 ? DTypeName(dtype) : "",
                          dtype != DType::kFloat32 ? " values (float32 only)" : "");
  }
  if (!capabilities.Sums(dtype)) return detail::Concat(DTypeName(dtype), " values");
  if (!options.sum_order.empty() && (!ordered || !dense)) {
    return dtype == DType::kFloat32 ? std::string("a sum order")
                                    : detail::Concat("a sum order on ", DTypeName(dtype), " values");
  }
  return {};
}

namespace {

constexpr uint64_t kMetaMagic = 0x7A656E6D65746132ULL;  // "zenmeta2"
constexpr uint64_t kBadInputFlag = uint64_t{1} << 8;

// A stable fingerprint of a scheme id or a call's identity.
uint64_t Fingerprint(std::string_view s) { return Fnv1a(s); }

// A scheme's shared settings as the record's bits 16-63: 0 for the
// defaults (empty), else 48 bits of their fingerprint (never 0).
constexpr int kSettingsShift = 16;
uint64_t SettingsKey(std::string_view settings) {
  if (settings.empty()) return 0;
  const uint64_t key = Fingerprint(settings) >> kSettingsShift;
  return (key == 0 ? 1 : key) << kSettingsShift;
}

// The identity of a call whose tensor has no name: it matches any other
// (an unnamed call carries nothing to compare).
constexpr uint64_t kNoIdentity = 0;

uint64_t Identity(std::string_view tensor) {
  if (tensor.empty()) return kNoIdentity;
  const uint64_t h = Fingerprint(tensor);
  return h == kNoIdentity ? 1 : h;
}

// The record every rank sends every other rank before data moves (56 bytes).
struct Meta {
  uint64_t magic;
  int64_t rows;
  int64_t width;
  uint64_t scheme;  // Fingerprint(scheme id)
  uint64_t call;    // the communicator's call number (NextTag)
  uint64_t key;     // Fingerprint(the call's identity: tensor or bucket name)
  uint64_t flags;   // bits 0-7: dtype; bit 8: this rank rejected its input;
                    // bits 16-63: SettingsKey(the scheme's shared settings)
};
static_assert(sizeof(Meta) == 56, "the cost model counts 56 bytes per peer");

std::string Describe(const Meta& m, int rank) {
  return detail::Concat("rank ", rank, " has rows=", m.rows, " width=", m.width,
                        " call=", m.call);
}

// Whether `other` is in another call than `mine` (ranks out of step): the
// call's identity or the call number differ. Empty when in step.
std::string Drift(const Meta& mine, const Meta& other, std::string_view tensor) {
  if (other.key != mine.key && other.key != kNoIdentity && mine.key != kNoIdentity) {
    return detail::Concat("a call with another identity than this rank's '", tensor,
                          "' (ranks issued different sequences of calls: one made a call the "
                          "others did not, or calls in another order)");
  }
  if (other.call != mine.call) {
    return detail::Concat("call number ", other.call, " vs ", mine.call,
                          " (ranks issued different sequences of collective calls)");
  }
  return {};
}

// The first field, of a call in step, in which `other` differs from `mine`.
std::string Difference(const Meta& mine, const Meta& other) {
  if (other.scheme != mine.scheme) return "a different scheme";
  if (other.rows != mine.rows) return detail::Concat("rows ", other.rows, " vs ", mine.rows);
  if (other.width != mine.width) return detail::Concat("width ", other.width, " vs ", mine.width);
  if ((other.flags & 0xff) != (mine.flags & 0xff)) {
    return detail::Concat("a different dtype (",
                          DTypeName(static_cast<DType>(other.flags & 0xff)), " vs ",
                          DTypeName(static_cast<DType>(mine.flags & 0xff)), ")");
  }
  if ((other.flags >> kSettingsShift) != (mine.flags >> kSettingsShift)) {
    return "other settings of the scheme";
  }
  return {};
}

// Rank r's record.
const Meta& At(const std::vector<Meta>& all, int r) { return all[static_cast<size_t>(r)]; }

}  // namespace

Support Scheme::supports(const SparsityProfile&) const { return Support::Yes(); }

void CheckRanksAgree(Communicator& comm, std::string_view scheme, int64_t rows, int64_t width,
                     std::string_view tensor, const std::string& local_error,
                     std::string_view settings, DType dtype) {
  const Where where{comm.rank(), tensor};
  if (!comm.out_of_step().empty()) {
    // Pairing this call with whatever the peers send now would sum tensors
    // of different calls. Every rank saw the same records, so every rank is
    // here too and none of them waits.
    throw MismatchError(where, "the ranks are out of step since an earlier call (",
                        comm.out_of_step(),
                        "); this communicator cannot pair calls any more: build a new one");
  }
  const Meta mine{kMetaMagic,     rows,
                  width,          Fingerprint(scheme),
                  comm.NextTag(), Identity(tensor),
                  static_cast<uint64_t>(dtype) | (local_error.empty() ? 0 : kBadInputFlag) |
                      SettingsKey(settings)};
  const int n = comm.size();
  std::vector<Meta> all(static_cast<size_t>(n));
  all[static_cast<size_t>(comm.rank())] = mine;
  std::vector<std::unique_ptr<Request>> pending;
  for (int s = 1; s < n; ++s) {
    const int from = (comm.rank() - s + n) % n;
    auto* slot = reinterpret_cast<std::byte*>(&all[static_cast<size_t>(from)]);
    pending.push_back(comm.Recv(from, kControlTag, std::span<std::byte>(slot, sizeof(Meta))));
  }
  const auto* self = reinterpret_cast<const std::byte*>(&mine);
  for (int s = 1; s < n; ++s) {
    pending.push_back(comm.Send((comm.rank() + s) % n, kControlTag,
                                std::span<const std::byte>(self, sizeof(Meta))));
  }
  for (auto& r : pending) r->Wait();
  // A corrupt record says nothing about the call it belongs to.
  for (int r = 0; r < n; ++r) {
    if (At(all, r).magic != kMetaMagic) {
      throw MismatchError(where, "ranks disagree before '", scheme, "': rank ", r,
                          " sent a corrupt metadata message");
    }
  }
  // Out of step first: then nothing else in the records can be compared, and
  // every later call would pair the wrong calls, so the communicator is
  // marked and refuses them (on every rank: all saw the same records).
  for (int r = 0; r < n; ++r) {
    const std::string drift = Drift(mine, At(all, r), tensor);
    if (!drift.empty()) {
      const std::string why = detail::Concat("rank ", r, " was in ", drift);
      comm.MarkOutOfStep(why);
      throw MismatchError(where, "ranks disagree before '", scheme, "': ", why, "; ",
                          Describe(At(all, r), r), ", ", Describe(mine, comm.rank()));
    }
  }
  if (!local_error.empty()) throw InvalidArgument(where, local_error);
  for (int r = 0; r < n; ++r) {
    if (At(all, r).flags & kBadInputFlag) {
      throw InvalidArgument(where, "rank ", r, " rejected its input for scheme '", scheme,
                            "' (see that rank's error)");
    }
  }
  for (int r = 0; r < n; ++r) {
    const std::string diff = Difference(mine, At(all, r));
    if (!diff.empty()) {
      // Only a fingerprint of the settings travels: each rank names its own.
      const bool settings_differ = (At(all, r).flags ^ mine.flags) >> kSettingsShift != 0;
      throw MismatchError(where, "ranks disagree before '", scheme, "': rank ", r, " sent ", diff,
                          "; ", Describe(At(all, r), r), ", ", Describe(mine, comm.rank()),
                          settings_differ ? "; this rank's settings: " : "",
                          !settings_differ     ? std::string_view()
                          : settings.empty() ? std::string_view("the defaults")
                                             : settings);
    }
  }
}

void Scheme::Reject(Communicator& comm, int64_t rows, int64_t width, std::string_view tensor,
                    const std::string& error, DType dtype) {
  if (check_agreement_) {
    try {
      CheckRanksAgree(comm, name(), rows, width, tensor, error, shared_settings(), dtype);
    } catch (const InvalidArgument&) {  // ours, rethrown below without the prefix twice
    }
  }
  throw InvalidArgument(Where{comm.rank(), tensor}, error);
}

namespace {

// What is wrong with a [rows x width] shape, or empty.
std::string ShapeError(int64_t rows, int64_t width) {
  if (rows < 1 || width < 1) {
    return detail::Concat("shape [", rows, ", ", width,
                          "] is invalid: rows and width must be >= 1");
  }
  int64_t elements = 0;
  if (!TryMul(rows, width, elements)) {
    return detail::Concat("shape [", rows, ", ", width, "]: rows x width overflows int64");
  }
  return {};
}

// Runs a scheme's data phase; memory exhaustion and impossible lengths from
// the standard library become zen errors that name rank and tensor.
template <typename Fn>
auto Guarded(const Where& where, std::string_view scheme, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw InvalidArgument(where, "scheme '", scheme,
                          "' ran out of memory (std::bad_alloc) for this input; a scheme whose "
                          "memory follows the non-zeros (zen, agsparse, sparcml) may fit");
  } catch (const std::length_error& e) {
    throw InvalidArgument(where, "scheme '", scheme, "' cannot size a buffer for this input (",
                          e.what(), ")");
  }
}

// What is wrong with a call's options for `scheme` over `world` ranks, or
// empty.
std::string CallError(const Scheme& scheme, const SyncOptions& options, bool dense, int world,
                      DType dtype) {
  const auto v = static_cast<int>(options.values);
  if (v < 0 || v > static_cast<int>(WireValues::kFloat16)) {
    return detail::Concat("wire values ", v,
                          " is not one of float32 (0), bfloat16 (1), float16 (2)");
  }
  const std::string missing = MissingCapability(scheme.capabilities(), options, dense, dtype);
  if (!missing.empty()) {
    return detail::Concat("scheme '", scheme.name(), "' does not take ", missing,
                          !dense && !options.sum_order.empty() && scheme.capabilities().Orders(dtype)
                              ? " on a sparse call (dense calls only)"
                              : " (not among its declared capabilities)");
  }
  return SumOrderError(options.sum_order, world);
}

// The settings every rank must share for this call: the scheme's own and
// the call's options that are not the defaults.
std::string CallSettings(const Scheme& scheme, const SyncOptions& options) {
  std::string out = scheme.shared_settings();
  const auto add = [&](const std::string& what) {
    if (!out.empty()) out += ", ";
    out += what;
  };
  if (options.values != WireValues::kFloat32) {
    add(std::string("wire values ") + WireValuesName(options.values));
  }
  if (!options.sum_order.empty()) add("sum order " + SumOrderName(options.sum_order));
  return out;
}

}  // namespace

SparseTensor Scheme::Sync(Communicator& comm, const SparseTensor& local,
                          const SyncOptions& options) {
  std::string error = ShapeError(local.rows(), local.width());
  if (error.empty()) error = CallError(*this, options, /*dense=*/false, comm.size(), local.dtype());
  if (check_agreement_) {
    CheckRanksAgree(comm, name(), local.rows(), local.width(), local.name(), error,
                    CallSettings(*this, options), local.dtype());
  } else if (!error.empty()) {
    throw InvalidArgument(Where{comm.rank(), local.name()}, error);
  }
  SparseTensor sum = Guarded(Where{comm.rank(), local.name()}, name(),
                             [&] { return DoSync(comm, local, options); });
  sum.OwnRows();  // a scheme may return its input (one rank): never the caller's memory
  return sum;
}

void Scheme::SyncIntoValues(Communicator& comm, const SparseTensor& local, DenseValues out,
                            double divisor, const SyncOptions& options) {
  std::string error = ShapeError(local.rows(), local.width());
  if (error.empty()) error = SyncIntoError(local, out, divisor);
  if (error.empty()) error = CallError(*this, options, /*dense=*/false, comm.size(), local.dtype());
  if (check_agreement_) {
    CheckRanksAgree(comm, name(), local.rows(), local.width(), local.name(), error,
                    CallSettings(*this, options), local.dtype());
  } else if (!error.empty()) {
    throw InvalidArgument(Where{comm.rank(), local.name()}, error);
  }
  Guarded(Where{comm.rank(), local.name()}, name(),
          [&] { DoSyncInto(comm, local, out, divisor, options); });
}

void Scheme::DoSyncInto(Communicator& comm, const SparseTensor& local, DenseValues out,
                        double divisor, const SyncOptions& options) {
  WriteInto(DoSync(comm, local, options), out, divisor);
}

std::string SyncIntoError(const SparseTensor& local, DenseValues out, double divisor) {
  if (out.dtype != local.dtype()) {
    return detail::Concat("dense output of dtype ", DTypeName(out.dtype), " for a ",
                          DTypeName(local.dtype()), " tensor");
  }
  if (out.size() != static_cast<size_t>(local.rows()) * static_cast<size_t>(local.width())) {
    return detail::Concat("dense output has ", out.size(), " floats, expected rows ", local.rows(),
                          " x width ", local.width());
  }
  if (!(std::isfinite(divisor) && divisor > 0)) {
    return detail::Concat("divisor ", divisor, " is not a finite number > 0");
  }
  // Compared as addresses: the buffers are unrelated objects.
  const auto overlaps = [&](const void* p, size_t bytes) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const uintptr_t o = reinterpret_cast<uintptr_t>(out.bytes.data());
    return bytes > 0 && !out.bytes.empty() && a < o + out.bytes.size() && o < a + bytes;
  };
  if (overlaps(local.ids().data(), local.ids().size_bytes()) ||
      overlaps(local.value_bytes().data(), local.value_bytes().size())) {
    return "the dense output overlaps the sparse input's memory";
  }
  return {};
}

void WriteInto(const SparseTensor& sum, DenseValues out, double divisor) {
  WithValueType(sum.dtype(), [&]<typename T>() {
    WriteRowsInto(sum.ids(), sum.values<T>(), sum.width(), 0, out.as<T>(),
                  static_cast<AccumOf<T>>(divisor));
  });
}

namespace {

template <typename T>
void WriteRowsIntoT(std::span<const int64_t> ids, std::span<const T> values, int64_t width,
                    int64_t first_id, std::span<T> out, AccumOf<T> divisor) {
  std::fill(out.begin(), out.end(), T{0});
  const size_t w = static_cast<size_t>(width);
  const T* v = values.data();
  for (size_t i = 0; i < ids.size(); ++i, v += w) {
    T* dst = out.data() + static_cast<size_t>(ids[i] - first_id) * w;
    if (divisor == AccumOf<T>{1}) {
      std::copy_n(v, w, dst);
    } else {
      for (size_t k = 0; k < w; ++k) dst[k] = Narrow<T>(Widen(v[k]) / divisor);
    }
  }
}

}  // namespace

#define ZEN_WRITE_ROWS_INTO(T, ...)                                                          \
  void WriteRowsInto(std::span<const int64_t> ids, std::span<const T> values, int64_t width, \
                     int64_t first_id, std::span<T> out, AccumOf<T> divisor) {               \
    WriteRowsIntoT(ids, values, width, first_id, out, divisor);                              \
  }
ZEN_FOR_EACH_VALUE_TYPE(ZEN_WRITE_ROWS_INTO)
#undef ZEN_WRITE_ROWS_INTO

void Scheme::SyncDenseValues(Communicator& comm, DenseValues buffer, int64_t rows, int64_t width,
                             std::string_view tensor, const SyncOptions& options) {
  std::string error = ShapeError(rows, width);
  if (error.empty() && buffer.size() != static_cast<size_t>(rows) * static_cast<size_t>(width)) {
    error = detail::Concat("dense buffer has ", buffer.size(), " floats, expected rows ", rows,
                           " x width ", width);
  }
  if (error.empty()) error = CallError(*this, options, /*dense=*/true, comm.size(), buffer.dtype);
  if (check_agreement_) {
    CheckRanksAgree(comm, name(), rows, width, tensor, error, CallSettings(*this, options),
                    buffer.dtype);
  } else if (!error.empty()) {
    throw InvalidArgument(Where{comm.rank(), tensor}, error);
  }
  Guarded(Where{comm.rank(), tensor}, name(),
          [&] { DoSyncDense(comm, buffer, rows, width, tensor, options); });
}

void Scheme::DoSyncDense(Communicator& comm, DenseValues buffer, int64_t rows, int64_t width,
                         std::string_view tensor, const SyncOptions& options) {
  WithValueType(buffer.dtype, [&]<typename T>() {
    const std::span<T> values = buffer.as<T>();
    const SparseTensor local =
        SparseTensor::FromDense<T>(values, rows, width, std::string(tensor));
    const SparseTensor sum = DoSync(comm, local, options);
    sum.ToDense<T>(values);
  });
}

}  // namespace zen
