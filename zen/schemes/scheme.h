// zen/schemes/scheme.h — the interface every synchronization scheme
// implements, and what a scheme needs to know to say whether it can serve an
// input.
//
// A scheme takes this rank's sparse gradient and returns the global sum,
// identical on every rank, with exactly the union of the inputs' rows. The
// public Sync() validates the input and checks, with one small metadata
// exchange, that all ranks agree on shape and scheme before any data moves;
// subclasses implement DoSync() and see only the Communicator.
//
// Usage:
//   zen::SchemeRegistry registry = zen::BuiltinSchemes();
//   std::unique_ptr<zen::Scheme> s = registry.Create("agsparse");
//   zen::SparseTensor sum = s->Sync(comm, local);
//   // Dense gradient buffer (a DDP bucket): zero rows are skipped, the sum
//   // is written back in place.
//   s->SyncDense(comm, bucket_span, rows, width, "bucket0");
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "zen/comm/communicator.h"
#include "zen/core/dtype.h"
#include "zen/core/wire_values.h"
#include "zen/core/sparse_tensor.h"

namespace zen {

// What a scheme (and the cost model) may know about an input before syncing.
// Fields not measured yet are left at their defaults.
struct SparsityProfile {
  int world_size = 1;
  int64_t rows = 0;
  int64_t width = 1;
  size_t value_bytes = sizeof(float);  // DTypeSize(dtype)
  DType dtype = DType::kFloat32;        // the values' dtype
  size_t index_bytes = sizeof(int64_t);
  double density = 0;         // mean per-rank fraction of present rows
  std::vector<double> gamma;  // gamma[k-1] = union density of k ranks / density; gamma[0] = 1
  double skewness = 1;        // max over n even ranges of range density / mean density
};

// Answer of Scheme::supports(): ok, or not with a reason the selector logs.
struct Support {
  bool ok = true;
  std::string reason;
  static Support Yes() { return {}; }
  static Support No(std::string why) { return {false, std::move(why)}; }
};

// Options shared by all schemes; a scheme ignores what it does not use.
struct SchemeOptions {
  uint64_t seed = 0x5eed2e7ULL;   // hash seed (ZEN); agreed across ranks by Sync
  // The metadata exchange before data moves (Scheme::set_check_agreement),
  // applied by SchemeRegistry::Create. Turn it off only where the caller
  // agrees on every call by other means (the engine's batch round does):
  // without it, ranks out of step or with different shapes are not caught.
  bool check_agreement = true;
  int64_t block_values = 256;     // block size (OmniReduce, auto's profile): [1, kMaxBlockValues]
  int threads = 0;                // local worker threads; 0 = hardware concurrency,
                                  // at most kMaxThreads (worker_pool.h)
  // A block is at most 2^30 values (4 GiB of floats): record sizes then fit
  // size_t with room to spare.
  static constexpr int64_t kMaxBlockValues = int64_t{1} << 30;
};

// Checks every field of `options` for scheme `scheme` (the id, for the
// message): block_values in [1, kMaxBlockValues], threads in [0,
// kMaxThreads]. InvalidArgument naming the
// scheme, the option and its value; every factory calls it (through
// SchemeRegistry::Create and in the schemes' constructors), whether or not
// the scheme uses the option, so that a wrong value is caught where it is
// given, not as a crash of the call that first divides by it.
void ValidateSchemeOptions(const SchemeOptions& options, std::string_view scheme);

// One step of a sum order: from element `first` on, an element is summed
// starting at rank `start` and going down the ranks cyclically (start,
// start - 1, ..., start + 1), each rank's value added to the sum so far.
using SumStep = std::pair<int64_t, int>;

// What a scheme can do per call beyond float32 values summed in its own
// order (float32 tensors are summed by every scheme). Declared once per scheme: in its registry entry
// (SchemeInfo::capabilities, which the engine reads before building it) and
// by the built object (Scheme::capabilities(), which Sync checks); the two
// are one constant of the scheme's file (registry_test compares them).
//
// dtypes: the dtypes the scheme sums (float32 always). Each sums in its own
// precision (float64 in float64); bfloat16 and float16 travel at their own
// width and are summed in float, rounded to 16 bits where the scheme stores
// a result: once per value where all terms meet in one place (agsparse,
// sparse_ps, omnireduce), at every hop where partial sums cross the wire
// (the ring, sparcml's recursive steps), as NCCL and Gloo do.
// sum_order_dtypes: the dtypes other than float32 on which SyncDense takes
// a sum order (`sum_order` is float32's).
struct SyncCapabilities {
  bool narrow_values = false;  // SyncOptions::values other than float32 (float32 tensors)
  bool sum_order = false;      // SyncOptions::sum_order, on SyncDense of float32
  DTypeSet dtypes{DType::kFloat32};
  DTypeSet sum_order_dtypes{};
  // Whether a tensor of dtype d is summed / takes a sum order.
  constexpr bool Sums(DType d) const {
    return d == DType::kFloat32 || dtypes.Has(d);
  }
  constexpr bool Orders(DType d) const {
    return d == DType::kFloat32 ? sum_order : sum_order_dtypes.Has(d);
  }
  friend bool operator==(const SyncCapabilities&, const SyncCapabilities&) = default;
};

// The options of one Sync / SyncDense / SyncInto call; the defaults ask for
// nothing a scheme must declare.
struct SyncOptions {
  // Values on the wire: float32, or half width (sums stay float32;
  // zen/core/wire_values.h). Other than float32: capability narrow_values.
  WireValues values = WireValues::kFloat32;
  // Dense calls: the order in which the ranks' values are added, per
  // element of the [rows x width] buffer, as steps ascending by first
  // element, the first at 0 (SumStep). This is Gloo's ring allreduce order
  // when the element of chunk c starts at rank c - 1, so a caller that knows
  // where its buffer lies in a ring-reduced bucket gets the ring's float32
  // sums bit for bit (zen.torch does, for plain DDP's). Empty: ranks in
  // ascending order. Non-empty: capability sum_order. Read during the call
  // only.
  std::span<const SumStep> sum_order;
};

// What is wrong with a sum order over `world` ranks (steps start at element
// 0, ascend, and name ranks in [0, world)), or empty.
std::string SumOrderError(std::span<const SumStep> order, int world);
// "ranks" (ascending), or the steps' count and a digest: how a sum order is
// named in agreement checks and errors.
std::string SumOrderName(std::span<const SumStep> order);
// What `options` on values of `dtype` ask that `capabilities` lack, named
// for an error ("bfloat16 values on the wire", "a sum order", "float64
// values", "bfloat16 values"), or empty. `dense`: a SyncDense call (a sum order is for dense
// calls only: asked of a sparse call it is named too). Half-width wire
// values are for float32 values only (a float64 tensor asking them is named
// too).
std::string MissingCapability(const SyncCapabilities& capabilities, const SyncOptions& options,
                              bool dense, DType dtype = DType::kFloat32);

// A caller's dense [rows x width] buffer: its values as bytes and their
// dtype (what the virtual entries of a scheme take, so that one signature
// serves every dtype; a scheme reads it as<T>() once per call).
struct DenseValues {
  DType dtype = DType::kFloat32;
  std::span<std::byte> bytes;
  DenseValues() = default;
  // A buffer of any value type (dtype.h): float32, float64, bfloat16, ...
  template <typename T>
    requires IsValueType<T>
  DenseValues(std::span<T> v)  // NOLINT(google-explicit-constructor): a typed buffer
      : dtype(DTypeOf<T>), bytes(std::as_writable_bytes(v)) {}
  // From anything that converts to a span of one value type (a vector).
  template <typename R>
    requires requires(R&& r) { std::span(r); } &&
             IsValueType<typename decltype(std::span(std::declval<R&>()))::element_type> &&
             (!std::is_same_v<std::remove_cvref_t<R>, decltype(std::span(std::declval<R&>()))>)
  DenseValues(R&& r) : DenseValues(std::span(r)) {}  // NOLINT
  template <typename T>
  static DenseValues Of(std::span<T> v) {
    return DenseValues(v);
  }
  size_t size() const { return bytes.size() / DTypeSize(dtype); }
  // The values as T, the dtype's value type.
  template <typename T>
  std::span<T> as() const {
    return {reinterpret_cast<T*>(bytes.data()), bytes.size() / sizeof(T)};
  }
};

class Scheme {
 public:
  virtual ~Scheme() = default;

  virtual std::string_view name() const = 0;
  virtual std::string_view description() const = 0;
  virtual Support supports(const SparsityProfile& profile) const;

  // The global sum of `local` over all ranks of comm. `local.name()` is the
  // call's identity: ranks must make the same calls, with the same names, in
  // the same order (see CheckRanksAgree). Throws InvalidArgument for a bad
  // local tensor (also for a shape whose rows x width overflows, and for
  // memory exhaustion), MismatchError when ranks disagree (on every rank),
  // TransportError when the network fails.
  // `options`: this call's per-call options (SyncOptions); one the scheme
  // does not declare (capabilities()) is InvalidArgument naming the scheme
  // and the capability, raised on every rank.
  SparseTensor Sync(Communicator& comm, const SparseTensor& local,
                    const SyncOptions& options = {});

  // Dense-buffer entry: buffer is [rows x width] row-major; rows that are
  // all zero are not sent; the global sum is written back into buffer.
  // `tensor` is the call's identity, as local.name() is for Sync.
  // A float64 buffer is summed in float64, a bfloat16 or float16 one in
  // float (SyncCapabilities::dtypes).
  // One overload per value type (a vector converts).
#define ZEN_SYNC_DENSE(T, ...)                                                                \
  void SyncDense(Communicator& comm, std::span<T> buffer, int64_t rows, int64_t width,        \
                 std::string_view tensor = {}, const SyncOptions& options = {}) {             \
    SyncDenseValues(comm, DenseValues::Of(buffer), rows, width, tensor, options);             \
  }
  ZEN_FOR_EACH_VALUE_TYPE(ZEN_SYNC_DENSE)
#undef ZEN_SYNC_DENSE

  // Sparse in, dense out: writes the global sum of `local`, each value
  // divided by `divisor`, into `out` ([rows x width] row-major) and zeros
  // every other element. No sorted result is built, which saves a scheme
  // that produces the union unordered (zen) its sort, and the caller the
  // scatter and the division over the whole buffer (a DDP hook writing the
  // mean into its bucket). Each written value is `sum / divisor` in float,
  // the same as dividing Sync's result. `out` must not overlap `local`'s
  // memory; after an error its contents are unspecified. Errors as Sync;
  // an `out` of the wrong size or a divisor that is not finite and > 0 is
  // InvalidArgument, raised on every rank. `out` has local's dtype (float64:
  // each value sum / divisor in double; bfloat16, float16: in float, rounded
  // once). One overload per value type.
#define ZEN_SYNC_INTO(T, ...)                                                                 \
  void SyncInto(Communicator& comm, const SparseTensor& local, std::span<T> out,              \
                AccumOf<T> divisor = 1, const SyncOptions& options = {}) {                    \
    SyncIntoValues(comm, local, DenseValues::Of(out), divisor, options);                      \
  }
  ZEN_FOR_EACH_VALUE_TYPE(ZEN_SYNC_INTO)
#undef ZEN_SYNC_INTO
  // SyncDense and SyncInto on a buffer of any dtype (the engine's batches).
  void SyncDenseValues(Communicator& comm, DenseValues buffer, int64_t rows, int64_t width,
                       std::string_view tensor, const SyncOptions& options);
  void SyncIntoValues(Communicator& comm, const SparseTensor& local, DenseValues out,
                      double divisor, const SyncOptions& options);

  // What this scheme does per call beyond the defaults (its registry
  // entry's SchemeInfo::capabilities).
  virtual SyncCapabilities capabilities() const { return {}; }

  // Takes part in the metadata exchange of the call the peers are making,
  // with `error` as this rank's reason to refuse it, then throws
  // InvalidArgument(error) here; the peers raise InvalidArgument too. For
  // input that cannot even be built into a SparseTensor or buffer (the
  // bindings use it for argument conversion failures), so that no peer pairs
  // this call with its next one.
  [[noreturn]] void Reject(Communicator& comm, int64_t rows, int64_t width,
                           std::string_view tensor, const std::string& error,
                           DType dtype = DType::kFloat32);

  // The metadata exchange before data moves (on by default); off when the
  // caller has already agreed on the call by other means.
  void set_check_agreement(bool on) { check_agreement_ = on; }
  bool check_agreement() const { return check_agreement_; }

  // The settings of this object that every rank must share, because they
  // change what goes on the wire or how it is read (ZEN's row ownership,
  // OmniReduce's block size, what auto may choose), as text;
  // empty when they are the defaults. The metadata exchange carries a
  // fingerprint of it: ranks built with different settings raise
  // MismatchError on every rank before data moves, instead of summing
  // rows each rank reads differently. A call's options that are not the
  // defaults (wire values, a sum order) are added to it for that call.
  virtual std::string shared_settings() const { return {}; }

 protected:
  // `options` asks only for what capabilities() declares (Sync checked it).
  virtual SparseTensor DoSync(Communicator& comm, const SparseTensor& local,
                              const SyncOptions& options) = 0;
  // Override when the scheme can consume a dense buffer directly (ZEN's
  // hierarchical-hash extraction). The default extracts non-zero rows,
  // calls DoSync and scatters the result back. `buffer` has a dtype the
  // scheme declares (SyncCapabilities::dtypes).
  virtual void DoSyncDense(Communicator& comm, DenseValues buffer, int64_t rows, int64_t width,
                           std::string_view tensor, const SyncOptions& options);
  // Override when the scheme can write its result straight into a dense
  // buffer. The default calls DoSync and scatters the result (WriteInto).
  // `out` has local's dtype.
  virtual void DoSyncInto(Communicator& comm, const SparseTensor& local, DenseValues out,
                          double divisor, const SyncOptions& options);
  // For a scheme that dispatches to another (auto): runs `target`'s
  // algorithm on input this scheme's Sync already validated and agreed on,
  // without re-entering Sync (no second validation or metadata exchange).
  static SparseTensor Dispatch(Scheme& target, Communicator& comm, const SparseTensor& local,
                               const SyncOptions& options = {}) {
    return target.DoSync(comm, local, options);
  }
  static void DispatchInto(Scheme& target, Communicator& comm, const SparseTensor& local,
                           DenseValues out, double divisor, const SyncOptions& options = {}) {
    target.DoSyncInto(comm, local, out, divisor, options);
  }

 private:
  bool check_agreement_ = true;
};

// What is wrong with SyncInto's output and divisor for `local` (size, dtype,
// the divisor, memory shared with the input), or empty. The shape itself is
// checked apart.
std::string SyncIntoError(const SparseTensor& local, DenseValues out, double divisor);

// Zeros `out` ([sum.rows() x sum.width()], sum's dtype) and writes each of
// sum's values divided by `divisor` at its place (SyncInto's contract; what
// DoSyncInto's default does with DoSync's result).
void WriteInto(const SparseTensor& sum, DenseValues out, double divisor);
// The same for rows given apart: ids (ascending) minus first_id index the
// [rows x width] `out` (zeroed first); values holds ids.size() x width.
// Each value is divided in AccumOf<T> (float for the 16-bit types) and
// rounded once. For the 16-bit types the sum itself was already rounded to
// T, so sum-then-divide rounds twice (exact for a divisor that is a power
// of two; torch's own average of a bf16 all_reduce rounds twice as well).
#define ZEN_WRITE_ROWS_INTO(T, ...)                                                          \
  void WriteRowsInto(std::span<const int64_t> ids, std::span<const T> values, int64_t width, \
                     int64_t first_id, std::span<T> out, AccumOf<T> divisor);
ZEN_FOR_EACH_VALUE_TYPE(ZEN_WRITE_ROWS_INTO)
#undef ZEN_WRITE_ROWS_INTO

// The tag reserved for the metadata exchange (collectives use NextTag(),
// which starts above it), so the exchange matches even when ranks have
// drifted apart in call order.
inline constexpr Tag kControlTag = 0;

// Exchanges a 56-byte record (rows, width, dtype, scheme, call number, the
// call's identity, local error flag) with all ranks and throws on every rank
// if any differ:
//   - MismatchError when ranks are out of step: another call identity (the
//     tensor or bucket name, FNV-1a; an empty name matches any) or another
//     call number. A rank that made
//     an extra call, or skipped one, would otherwise pair its calls with the
//     peers' next ones and return a wrong sum. The communicator is then
//     marked (Communicator::out_of_step) and every later exchange on it
//     raises MismatchError at once, on every rank: build a new communicator.
//   - InvalidArgument when some rank reported bad local input (`local_error`,
//     empty when fine); the communicator stays usable.
//   - MismatchError naming the first disagreeing rank and both values when
//     ranks are in step but disagree on scheme, rows, width, dtype or the
//     scheme's shared settings (`settings`: Scheme::shared_settings(); a
//     48-bit fingerprint travels, and each rank's error names its own
//     settings); the communicator stays usable.
// Sends (n-1) x 56 bytes per rank. Called by Sync/SyncDense/Reject.
// `dtype`: the values' dtype (ranks with different dtypes raise
// MismatchError on every rank).
void CheckRanksAgree(Communicator& comm, std::string_view scheme, int64_t rows, int64_t width,
                     std::string_view tensor, const std::string& local_error = {},
                     std::string_view settings = {}, DType dtype = DType::kFloat32);

}  // namespace zen
