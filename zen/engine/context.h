// zen/engine/context.h — asynchronous, batched synchronization: what a
// training framework calls from its backward pass.
//
// A Context owns a communicator, the schemes it has created and one progress
// thread. Start() queues a batch of tensors (a DDP bucket: several
// parameters of different shapes, dense or sparse) and returns at once with
// a Handle; the progress thread synchronizes queued batches one after the
// other, in Start() order, which is the same on every rank. No thread is
// created per call.
//
// One batch is one collective call: a single metadata round checks, on every
// rank, that all ranks are in the same call (the batch's name), with the
// same tensors (names, shapes, schemes) and that no rank rejected its input;
// then the data moves without a metadata round per tensor. Sparse tensors
// that share a scheme which adds the ranks' values in rank order
// (SchemeInfo::rank_order: zen, agsparse, omnireduce) or a selector
// (SchemeInfo::selector: auto), their dtype, wire values, rank-order
// requirement and width are coalesced: their rows are
// laid end to end (ids offset by the rows before them) and move in one
// exchange, e.g. one push and one pull for zen, whatever their number; each
// sum is bit for bit what a call of its own gives (the same additions in the
// same order; a 16-bit value is rounded where it would be alone). Dense
// tensors without a sum order are coalesced the same way among themselves
// (their buffers laid end to end, summed by one SyncDense, each slice copied
// back): a top-k hook's biases and norms. Every dtype coalesces (a group
// holds one dtype); the buffers are kept per value type from batch to
// batch. Only sparse
// tensors of at most 2^22 elements (rows x width) are coalesced, up to 2^24
// per exchange, and dense ones of at most 2^15, up to 2^17: for larger ones
// the copy and the larger messages cost more than the rounds saved
// (context.cc has the measurements). Other schemes, and dense tensors with
// a sum order, move one tensor at a time.
// A disagreement is raised on every rank, naming
// the first tensor that differs. As with Scheme::Sync, a batch that is out
// of step with the peers' (one rank started a batch the others did not)
// marks the communicator and every later batch fails too.
//
// Tensors are borrowed: a dense buffer is summed in place, a sparse input is
// read, and its sum is written to `sparse_out` (or, made by SparseInto,
// densely into a caller's buffer: a top-k hook's bucket); all must stay alive and
// untouched until the handle completes. Errors are the library's
// (InvalidArgument, MismatchError, FormatError, TransportError), raised by
// Handle::Wait().
//
// Usage:
//   zen::Context ctx(std::move(comm));   // ContextOptions: scheme "auto" by default
//   std::vector<float> grad_a(rows_a * width_a), grad_b(n_b);
//   zen::SparseTensor emb = ...;     // this rank's embedding gradient (e.g.
//                                    // SparseTensor::View of the framework's
//                                    // coalesced ids and rows: no copy)
//   zen::SparseTensor emb_sum;
//   std::vector<zen::BatchTensor> bucket = {
//       zen::BatchTensor::Dense("fc.weight", grad_a, rows_a, width_a),
//       zen::BatchTensor::Dense("fc.bias", grad_b, n_b, 1),
//       zen::BatchTensor::Sparse("emb.weight", emb, &emb_sum)};
//   zen::Handle h = ctx.Start("bucket0", bucket);
//   ...                                 // compute goes on
//   h.Wait();                           // grad_a, grad_b and emb_sum hold the sums
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "zen/comm/communicator.h"
#include "zen/core/dtype.h"
#include "zen/core/sparse_tensor.h"
#include "zen/schemes/registry.h"
#include "zen/schemes/scheme.h"

namespace zen {

// One tensor of a batch.
struct BatchTensor {
  enum class Kind { kDense, kSparse };
  Kind kind = Kind::kDense;
  std::string name;  // the tensor's identity; the same on every rank
  int64_t rows = 0;
  int64_t width = 0;
  // kDense: [rows x width] of any dtype (dtype.h), summed in place: float32
  // and float64 in their own precision, bfloat16 and float16 in float,
  // rounded where the scheme stores (a dtype other than float32 needs a
  // scheme that declares it: SyncCapabilities::dtypes; a selector such as
  // "auto" picks one).
  DenseValues dense;
  const SparseTensor* sparse = nullptr;  // kSparse: this rank's input
  SparseTensor* sparse_out = nullptr;    // kSparse: receives the sum
  // kSparse made by SparseInto, instead of sparse_out: the sum, each value
  // divided by `divisor`, written densely into [rows x width], zeros
  // elsewhere (Scheme::SyncInto: no sorted result is built).
  bool into = false;
  DenseValues sparse_into;  // the input's dtype
  double divisor = 1.0;
  std::string scheme;                    // empty: the context's scheme
  // The caller's dtype before any conversion to float32 (e.g. "bfloat16"):
  // only compared across ranks; empty means the values' own dtype (which
  // is summed as it is).
  std::string dtype;
  // Values on the wire: float32, or bfloat16/float16 (half the value bytes;
  // sums stay float32): SyncOptions::values. Half widths need a scheme
  // whose registry entry declares SyncCapabilities::narrow_values (a
  // selector such as "auto" then means the first such entry); the ranks
  // must agree.
  WireValues values = WireValues::kFloat32;
  // kDense only: the order in which ranks' values are added, per element
  // (SyncOptions::sum_order: (first element, start rank) steps; empty:
  // ascending ranks). zen.torch passes Gloo's ring order so that its sums
  // are plain DDP's bit for bit. Needs a scheme that declares
  // SyncCapabilities::sum_order (a selector then means the first such
  // entry); the ranks must agree.
  std::vector<SumStep> sum_order;
  // The sum must be the ranks' values added in ascending rank order on
  // every rank, bit for bit (PyTorch's Gloo sparse allreduce; zen.torch
  // asks for it on DDP's sparse gradients): a selector ("auto") then
  // chooses only among the schemes that sum so (SchemeInfo::rank_order,
  // rank_order_factory), and another scheme that does not is
  // InvalidArgument. The ranks must agree.
  bool rank_order = false;
  // Set when this rank cannot synchronize the tensor (e.g. an unsupported
  // dtype seen by a binding): every rank then raises InvalidArgument for
  // the batch, this rank with this message.
  std::string error;

  static BatchTensor Dense(std::string name, DenseValues buffer, int64_t rows, int64_t width);
  static BatchTensor Sparse(std::string name, const SparseTensor& input, SparseTensor* out);
  static BatchTensor SparseInto(std::string name, const SparseTensor& input, DenseValues out,
                                double divisor = 1.0);
  // The dtype of the values (the dense buffer's, or the sparse input's).
  DType value_type() const;
};

struct ContextOptions {
  std::string scheme = "auto";  // default scheme id for tensors that name none
  SchemeOptions scheme_options;
  // The schemes the tensors' ids name; empty: AllSchemes() (every builtin
  // scheme and auto). The context reads only what each entry declares.
  std::optional<SchemeRegistry> registry;
};

// The completion of one Start(). Copyable; all copies see the same state.
class Handle {
 public:
  Handle() = default;
  // Blocks until the batch is done; rethrows its error (on every call).
  void Wait() const;
  // True once the batch is done (successfully or not); never blocks.
  bool Test() const;
  bool valid() const { return state_ != nullptr; }

 private:
  friend class Context;
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;
    std::function<void(std::exception_ptr)> on_done;
  };
  explicit Handle(std::shared_ptr<State> s) : state_(std::move(s)) {}
  std::shared_ptr<State> state_;
};

class Context {
 public:
  // Takes the communicator; starts the progress thread. InvalidArgument for
  // an unknown scheme id.
  explicit Context(std::unique_ptr<Communicator> comm, ContextOptions options = {});
  // Borrows a communicator that outlives the context (tests, bindings that
  // share one communicator).
  explicit Context(Communicator& comm, ContextOptions options = {});
  // Finishes the queued batches, then joins the progress thread (Close()).
  ~Context();

  // Finishes the queued batches and joins the progress thread; later
  // Start() calls throw InvalidArgument. Idempotent. Not from the progress
  // thread. (Bindings call it before their interpreter shuts down, while
  // completion callbacks can still run.)
  void Close();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Queues `tensors` as one collective call named `name` (the batch's
  // identity, the same on every rank). Keep batch and tensor names the same
  // from step to step ("bucket3", not "step12.bucket3"): "auto" keeps its
  // profile and decision per tensor name and, for coalesced tensors, per
  // batch name, so a new name is profiled and its candidates timed afresh
  // (its state is kept for the AutoOptions::max_tensors most recent names).
  // `tensors` (the vector and what its entries point to) must stay valid
  // until the handle completes.
  // `on_done`, if set, runs on the progress thread when the batch
  // completes, with its error or nullptr (a binding completes its future
  // there); it must not throw. It runs just after the handle is marked
  // done, so a Wait() may return before it has run; Drain() waits for it.
  Handle Start(std::string name, std::vector<BatchTensor>& tensors,
               std::function<void(std::exception_ptr)> on_done = {});

  // Start(...).Wait().
  void Sync(std::string name, std::vector<BatchTensor>& tensors);

  // Queues `work`, run on the progress thread with the communicator in
  // Start() order, between batches: a collective that is not a batch of
  // tensors (exchange_job.h: byte exchanges for zen.fsdp). Its exception
  // is the handle's error; `on_done` as for Start().
  Handle Submit(std::function<void(Communicator&)> work,
                std::function<void(std::exception_ptr)> on_done = {});

  // Blocks until every batch started so far is done.
  void Drain();

  // Whether the caller runs on this context's progress thread (e.g. inside
  // an on_done callback). A context must not be destroyed there: its
  // destructor joins that thread.
  bool OnProgressThread() const { return std::this_thread::get_id() == thread_.get_id(); }

  Communicator& comm() { return *comm_; }
  const ContextOptions& options() const { return options_; }

  // The scheme object the context uses for an id (created on first use);
  // e.g. to read a scheme's last stats or an auto decision. Read it only
  // while no batch is in flight (the progress thread uses it).
  // `rank_order`: the instance that honours BatchTensor::rank_order.
  Scheme& scheme(const std::string& id, bool rank_order = false);

 private:
  struct Job {
    std::string name;
    std::vector<BatchTensor>* tensors;
    std::shared_ptr<Handle::State> state;
    std::function<void(Communicator&)> work = {};  // set by Submit: runs instead of a batch
  };
  void Init();
  void Run();
  void Execute(const Job& job);

  // Synchronizes tensors[group] (sparse, one scheme, one width) in one
  // exchange of their rows laid end to end, then hands each its part.
  void SyncCoalesced(const std::string& batch, std::vector<BatchTensor>& tensors,
                     std::span<const size_t> group);
  // The same for dense tensors: their buffers laid end to end in one
  // buffer, summed by one SyncDense, each slice copied back.
  void SyncCoalescedDense(const std::string& batch, std::vector<BatchTensor>& tensors,
                          std::span<const size_t> group);
  // Their bodies for the group's value type T.
  template <typename T>
  void SyncCoalescedOf(const std::string& batch, std::vector<BatchTensor>& tensors,
                       std::span<const size_t> group);
  template <typename T>
  void SyncCoalescedDenseOf(const std::string& batch, std::vector<BatchTensor>& tensors,
                            std::span<const size_t> group);

  std::unique_ptr<Communicator> owned_;
  Communicator* comm_;
  SchemeRegistry registry_;  // options.registry or AllSchemes(), built once
  // SyncCoalesced's input, reused from batch to batch (progress thread
  // only), its values kept per value type.
  template <typename T>
  using Values = std::vector<T>;
  std::vector<int64_t> coalesced_ids_;
  PerValueType<Values> coalesced_values_;
  std::vector<int64_t> coalesced_offsets_;
  PerValueType<Values> coalesced_dense_;  // SyncCoalescedDense's buffers
  ContextOptions options_;
  std::mutex schemes_mu_;
  std::map<std::string, std::unique_ptr<Scheme>> schemes_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  std::deque<Job> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread thread_;
};

// The batch's metadata round (what Context does before data moves):
// exchanges one 56-byte record per rank with the batch's identity and a
// fingerprint of its tensors' names, shapes and schemes; on a difference a
// second round exchanges the tensors' descriptions so that every rank names
// the first tensor that differs. Throws like CheckRanksAgree.
void CheckBatchAgree(Communicator& comm, std::string_view batch,
                     std::span<const BatchTensor> tensors, const std::string& default_scheme);
// The same with the registry the tensors' schemes are looked up in
// (AllSchemes(); a Context passes the one it keeps) and the settings of the
// schemes it builds that every rank must share (Scheme::shared_settings;
// a Context passes its SchemeOptions' block size when not the default).
void CheckBatchAgree(Communicator& comm, std::string_view batch,
                     std::span<const BatchTensor> tensors, const std::string& default_scheme,
                     const SchemeRegistry& registry, std::string_view settings = {});

}  // namespace zen
