#include "zen/engine/context.h"

#include <algorithm>
#include <sstream>
#include <utility>

#include "zen/analysis/auto_scheme.h"
#include "zen/comm/collectives.h"
#include "zen/core/checked.h"
#include "zen/core/error.h"
#include "zen/core/hash.h"
#include "zen/core/row_permutation.h"

namespace zen {
namespace {

// FNV-1a over the bytes of a string and a separator byte, so that
// "ab"+"c" != "a"+"bc".
uint64_t Mix(uint64_t h, std::string_view s) { return Fnv1a("\xff", Fnv1a(s, h)); }

// The per-call options of a batch tensor (its sum order viewed, not copied).
SyncOptions CallOptions(const BatchTensor& t) { return SyncOptions{t.values, t.sum_order}; }

// What a tensor's dtype and options need of a scheme (SyncCapabilities).
struct Need {
  DType dtype = DType::kFloat32;
  bool narrow_values = false;
  bool sum_order = false;
  bool trivial() const { return dtype == DType::kFloat32 && !narrow_values && !sum_order; }
};

Need Needs(const BatchTensor& t) {
  return {t.value_type(), t.values != WireValues::kFloat32, !t.sum_order.empty()};
}

bool Covers(const SyncCapabilities& have, const Need& need) {
  return (have.narrow_values || !need.narrow_values) && have.Sums(need.dtype) &&
         (!need.sum_order || have.Orders(need.dtype));
}

// The registry's schemes that declare every capability in `need`, as
// "a or b", or "none".
std::string Declaring(const SchemeRegistry& registry, const Need& need) {
  std::string out;
  for (const SchemeInfo& info : registry.schemes()) {
    if (!Covers(info.capabilities, need)) continue;
    out += out.empty() ? "" : " or ";
    out += info.id;
  }
  return out.empty() ? "none" : out;
}

// The scheme a tensor runs with: its own or the context's. A selector
// (SchemeInfo::selector: auto) that does not declare what the tensor's
// options need means the first other registry entry that does.
const std::string& SchemeOf(const BatchTensor& t, const std::string& fallback,
                            const SchemeRegistry& registry) {
  const std::string& id = t.scheme.empty() ? fallback : t.scheme;
  const Need need = Needs(t);
  if (need.trivial()) return id;
  const SchemeInfo* info = registry.Find(id);
  if (info == nullptr || !info->selector || Covers(info->capabilities, need)) return id;
  for (const SchemeInfo& s : registry.schemes()) {
    if (!s.selector && Covers(s.capabilities, need)) return s.id;
  }
  return id;
}

// What the ranks must agree on for one tensor, in a fixed field order.
std::vector<std::string> Fields(const BatchTensor& t, const std::string& fallback) {
  return {t.name,
          t.kind == BatchTensor::Kind::kDense ? "dense" : "sparse",
          std::to_string(t.rows),
          std::to_string(t.width),
          t.dtype.empty() ? DTypeName(t.value_type()) : t.dtype,
          t.scheme.empty() ? fallback : t.scheme,  // as asked (auto stays auto)
          WireValuesName(t.values),
          t.rank_order && t.sum_order.empty() ? "ranks (required)" : SumOrderName(t.sum_order)};
}
constexpr const char* kFieldNames[] = {"name", "layout", "rows", "width", "dtype", "scheme",
                                       "values", "sum order"};

// One line per tensor, fields separated by tabs (names cannot hold tabs or
// newlines that matter here: they are escaped).
std::string Describe(const BatchTensor& t, const std::string& fallback) {
  std::string out;
  for (std::string f : Fields(t, fallback)) {
    for (char& c : f) {
      if (c == '\t' || c == '\n') c = ' ';
    }
    if (!out.empty()) out += '\t';
    out += f;
  }
  return out;
}

std::vector<std::string> Split(const std::string& line) {
  std::vector<std::string> out(1);
  for (char c : line) {
    if (c == '\t') {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

// "tensor 2 ('emb'): rows 11 on rank 1 vs 10 on rank 0", or a missing tensor.
std::string Difference(size_t index, const std::string* theirs, int their_rank,
                       const std::string* mine, int my_rank) {
  if (theirs == nullptr || mine == nullptr) {
    const std::string& present = theirs ? *theirs : *mine;
    return detail::Concat("tensor ", index, " ('", Split(present)[0], "') is missing on rank ",
                          theirs ? my_rank : their_rank, " (the ranks' batches have different "
                          "numbers of tensors)");
  }
  const std::vector<std::string> a = Split(*theirs), b = Split(*mine);
  for (size_t f = 0; f < a.size() && f < b.size(); ++f) {
    if (a[f] == b[f]) continue;
    return detail::Concat("tensor ", index, " ('", b[0], "'): ", kFieldNames[f], " ", a[f],
                          " on rank ", their_rank, " vs ", b[f], " on rank ", my_rank);
  }
  return detail::Concat("tensor ", index, " differs");
}

// What is wrong with this rank's tensor, or empty (checked before the
// metadata round, so that every rank hears of it).
std::string LocalError(const BatchTensor& t, const std::string& scheme,
                       const SchemeRegistry& registry, int world) {
  if (!t.error.empty()) return t.error;
  if (!registry.Find(scheme)) return "unknown scheme '" + scheme + "'";
  // The per-call options against what the scheme's entry declares.
  const SyncCapabilities& has = registry.Find(scheme)->capabilities;
  const DType dtype = t.value_type();
  const bool f32 = dtype == DType::kFloat32;
  if (!f32 && t.values != WireValues::kFloat32) {
    return detail::Concat(WireValuesName(t.values), " values on the wire are for float32 values, not ",
                          DTypeName(dtype));
  }
  if (!has.Sums(dtype)) {
    return detail::Concat(DTypeName(dtype), " values need scheme ",
                          Declaring(registry, Need{.dtype = dtype}), ", not '", scheme,
                          "' (it does not declare the dtype ", DTypeName(dtype), ")");
  }
  if (t.values != WireValues::kFloat32 && !has.narrow_values) {
    return detail::Concat(WireValuesName(t.values), " values on the wire need scheme ",
                          Declaring(registry, Need{.narrow_values = true}), ", not '", scheme,
                          "' (it does not declare the capability narrow_values)");
  }
  if (!t.sum_order.empty()) {
    const bool ordered = has.Orders(dtype);
    if (!ordered || t.kind != BatchTensor::Kind::kDense) {
      return detail::Concat("a sum order needs a dense tensor and scheme ",
                            Declaring(registry, Need{.dtype = dtype, .sum_order = true}), ", not ",
                            t.kind == BatchTensor::Kind::kDense ? "" : "a sparse tensor with ",
                            "'", scheme, "'",
                            ordered ? ""
                            : f32   ? " (it does not declare the capability sum_order)"
                                    : detail::Concat(" (it does not declare a sum order on ",
                                                     DTypeName(dtype), ")"));
    }
    const std::string order = SumOrderError(t.sum_order, world);
    if (!order.empty()) return order;
  }
  if (t.rows < 1 || t.width < 1) {
    return detail::Concat("shape [", t.rows, ", ", t.width,
                          "] is invalid: rows and width must be >= 1");
  }
  int64_t elements = 0;
  if (!TryMul(t.rows, t.width, elements)) {
    return detail::Concat("shape [", t.rows, ", ", t.width, "]: rows x width overflows int64");
  }
  if (t.kind == BatchTensor::Kind::kDense) {
    if (t.dense.size() != static_cast<size_t>(elements)) {
      return detail::Concat("dense buffer has ", t.dense.size(), " floats, expected rows ", t.rows,
                            " x width ", t.width);
    }
  } else {
    if (t.sparse == nullptr || (!t.into && t.sparse_out == nullptr)) {
      return "a sparse batch tensor needs an input and an output";
    }
    if (t.into) {
      const std::string why = SyncIntoError(*t.sparse, t.sparse_into, t.divisor);
      if (!why.empty()) return why;
    }
    if (t.sparse->rows() != t.rows || t.sparse->width() != t.width) {
      return detail::Concat("sparse input has shape [", t.sparse->rows(), ", ", t.sparse->width(),
                            "], the batch entry says [", t.rows, ", ", t.width, "]");
    }
  }
  return {};
}

// Coalescing pays where a tensor's own exchange is mostly fixed cost
// (rounds, per-message CPU); for large tensors the copy into the group and
// messages past the transport's eager size cost more than the rounds
// saved (bench/batch_coalescing.py measures where the balance turns: a
// few MB per tensor). Only agreed fields may decide (the ranks' row counts
// differ), so the bounds are on the dense shape: a tensor of more than
// kCoalesceTensorElements moves alone, and a group closes before it passes
// kCoalesceGroupElements.
//
// A dense tensor sends every element (its zero rows aside), so its bounds
// are far lower: coalescing dense tensors pays up to tens of thousands of
// elements each and costs beyond (bench/batch_coalescing.py --kind dense).
constexpr int64_t kCoalesceTensorElements = int64_t{1} << 22;
constexpr int64_t kCoalesceGroupElements = int64_t{1} << 24;
constexpr int64_t kCoalesceDenseTensorElements = int64_t{1} << 15;
constexpr int64_t kCoalesceDenseGroupElements = int64_t{1} << 17;

// The groups of a batch's tensors that Execute coalesces (each of two or
// more sparse tensors, or two or more dense tensors without a sum order, of
// one dtype, in batch order; a tensor in no group moves alone).
// Built from fields the metadata round compared, so every rank forms the
// same groups. A group also closes where its rows would pass the largest
// row count every coalescing scheme takes (zen's permutation: 2^62).
std::vector<std::vector<size_t>> CoalescedGroups(std::span<const BatchTensor> tensors,
                                                 const std::string& fallback,
                                                 const SchemeRegistry& registry) {
  struct Open {
    std::string key;
    std::vector<size_t> members;
    int64_t rows = 0;
  };
  std::vector<Open> open;
  std::vector<std::vector<size_t>> groups;
  auto close = [&](Open& g) {
    if (g.members.size() >= 2) groups.push_back(std::move(g.members));
    g.members.clear();
    g.rows = 0;
  };
  for (size_t i = 0; i < tensors.size(); ++i) {
    const BatchTensor& t = tensors[i];
    const bool dense = t.kind == BatchTensor::Kind::kDense;
    if (dense && !t.sum_order.empty()) continue;  // its own order of additions
    const int64_t max_tensor = dense ? kCoalesceDenseTensorElements : kCoalesceTensorElements;
    const int64_t max_group = dense ? kCoalesceDenseGroupElements : kCoalesceGroupElements;
    int64_t own = 0;
    if (!TryMul(t.rows, t.width, own) || own > max_tensor) continue;
    const std::string& id = SchemeOf(t, fallback, registry);
    const SchemeInfo* info = registry.Find(id);
    if (info == nullptr || !(info->rank_order || info->selector)) continue;
    const std::string key = detail::Concat(dense ? "dense" : "sparse", '\t', id, '\t',
                                           DTypeName(t.value_type()), '\t',
                                           WireValuesName(t.values), '\t', t.rank_order ? 1 : 0,
                                           '\t', t.width);
    auto it = std::find_if(open.begin(), open.end(), [&](const Open& g) { return g.key == key; });
    if (it == open.end()) it = open.insert(open.end(), Open{key, {}, 0});
    int64_t rows = 0, elements = 0;
    if (!TryAdd(it->rows, t.rows, rows) || rows > kMaxPermutedRows ||
        !TryMul(rows, t.width, elements) || elements > max_group) {
      close(*it);
      rows = t.rows;
    }
    it->members.push_back(i);
    it->rows = rows;
  }
  for (Open& g : open) close(g);
  // Exchanges run in the order of each group's first tensor.
  std::sort(groups.begin(), groups.end(),
            [](const auto& a, const auto& b) { return a.front() < b.front(); });
  return groups;
}

}  // namespace

DType BatchTensor::value_type() const {
  if (kind == Kind::kDense) return dense.dtype;
  return sparse != nullptr ? sparse->dtype() : DType::kFloat32;
}

BatchTensor BatchTensor::Dense(std::string name, DenseValues buffer, int64_t rows,
                               int64_t width) {
  BatchTensor t;
  t.kind = Kind::kDense;
  t.name = std::move(name);
  t.rows = rows;
  t.width = width;
  t.dense = buffer;
  return t;
}

BatchTensor BatchTensor::SparseInto(std::string name, const SparseTensor& input,
                                    DenseValues out, double divisor) {
  BatchTensor t = Sparse(std::move(name), input, nullptr);
  t.into = true;
  t.sparse_into = out;
  t.divisor = divisor;
  return t;
}

BatchTensor BatchTensor::Sparse(std::string name, const SparseTensor& input, SparseTensor* out) {
  BatchTensor t;
  t.kind = Kind::kSparse;
  t.name = std::move(name);
  t.rows = input.rows();
  t.width = input.width();
  t.sparse = &input;
  t.sparse_out = out;
  return t;
}

void CheckBatchAgree(Communicator& comm, std::string_view batch,
                     std::span<const BatchTensor> tensors, const std::string& default_scheme) {
  CheckBatchAgree(comm, batch, tensors, default_scheme, AllSchemes());
}

void CheckBatchAgree(Communicator& comm, std::string_view batch,
                     std::span<const BatchTensor> tensors, const std::string& default_scheme,
                     const SchemeRegistry& registry, std::string_view settings) {
  std::string error;
  uint64_t fingerprint = kFnv1aBasis;
  for (const BatchTensor& t : tensors) {
    const std::string& scheme = SchemeOf(t, default_scheme, registry);
    if (error.empty()) {
      const std::string why = LocalError(t, scheme, registry, comm.size());
      if (!why.empty()) error = "tensor '" + t.name + "': " + why;
    }
    fingerprint = Mix(fingerprint, Describe(t, default_scheme));
  }
  try {
    // rows = the number of tensors, width = the fingerprint of their
    // descriptions: any difference is a MismatchError on every rank.
    CheckRanksAgree(comm, "batch", static_cast<int64_t>(tensors.size()),
                    static_cast<int64_t>(fingerprint >> 1), batch, error, settings);
  } catch (const MismatchError&) {
    if (!comm.out_of_step().empty()) throw;  // another call: nothing to compare
    // In step but different tensors: a second round says which one (only on
    // this error path, so the common case stays one round).
    std::string mine;
    for (const BatchTensor& t : tensors) mine += Describe(t, default_scheme) + "\n";
    const std::vector<ByteBuffer> all =
        AllGatherV(comm, std::as_bytes(std::span(mine.data(), mine.size())), int64_t{1} << 20);
    const Where where{comm.rank(), batch};
    std::vector<std::string> my_lines;
    for (const BatchTensor& t : tensors) my_lines.push_back(Describe(t, default_scheme));
    for (int r = 0; r < comm.size(); ++r) {
      const ByteBuffer& b = all[static_cast<size_t>(r)];
      const std::string theirs(reinterpret_cast<const char*>(b.data()), b.size());
      if (theirs == mine) continue;
      std::vector<std::string> their_lines;
      std::istringstream in(theirs);
      for (std::string line; std::getline(in, line);) their_lines.push_back(line);
      for (size_t i = 0; i < std::max(their_lines.size(), my_lines.size()); ++i) {
        const std::string* a = i < their_lines.size() ? &their_lines[i] : nullptr;
        const std::string* m = i < my_lines.size() ? &my_lines[i] : nullptr;
        if (a && m && *a == *m) continue;
        throw MismatchError(where, "ranks disagree on the batch: ",
                            Difference(i, a, r, m, comm.rank()));
      }
    }
    throw;
  }
}

void Handle::Wait() const {
  if (!state_) throw InvalidArgument("zen::Handle::Wait on an empty handle");
  std::unique_lock lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

bool Handle::Test() const {
  if (!state_) return false;
  std::lock_guard lock(state_->mu);
  return state_->done;
}

Context::Context(std::unique_ptr<Communicator> comm, ContextOptions options)
    : owned_(std::move(comm)), comm_(owned_.get()), options_(std::move(options)) {
  if (!comm_) throw InvalidArgument("zen::Context needs a communicator");
  Init();
}

Context::Context(Communicator& comm, ContextOptions options)
    : comm_(&comm), options_(std::move(options)) {
  Init();
}

void Context::Init() {
  registry_ = options_.registry ? *options_.registry : AllSchemes();
  if (!registry_.Find(options_.scheme)) {
    throw InvalidArgument(Where{comm_->rank()}, "unknown scheme '", options_.scheme, "'");
  }
  thread_ = std::thread([this] { Run(); });
}

Context::~Context() { Close(); }

void Context::Close() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Handle Context::Start(std::string name, std::vector<BatchTensor>& tensors,
                      std::function<void(std::exception_ptr)> on_done) {
  auto state = std::make_shared<Handle::State>();
  state->on_done = std::move(on_done);
  {
    std::lock_guard lock(mu_);
    if (stop_) throw InvalidArgument("zen::Context::Start after destruction began");
    queue_.push_back(Job{std::move(name), &tensors, state});
  }
  cv_.notify_one();
  return Handle(state);
}

Handle Context::Submit(std::function<void(Communicator&)> work,
                       std::function<void(std::exception_ptr)> on_done) {
  auto state = std::make_shared<Handle::State>();
  state->on_done = std::move(on_done);
  {
    std::lock_guard lock(mu_);
    if (stop_) throw InvalidArgument("zen::Context::Submit after destruction began");
    queue_.push_back(Job{std::string(), nullptr, state, std::move(work)});
  }
  cv_.notify_one();
  return Handle(state);
}

void Context::Sync(std::string name, std::vector<BatchTensor>& tensors) {
  Start(std::move(name), tensors).Wait();
}

void Context::Drain() {
  std::unique_lock lock(mu_);
  idle_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

Scheme& Context::scheme(const std::string& id, bool rank_order) {
  std::lock_guard lock(schemes_mu_);
  const std::string key = id + (rank_order ? "/rank-order" : "");
  auto it = schemes_.find(key);
  if (it == schemes_.end()) {
    const SchemeInfo* info = registry_.Find(id);
    if (rank_order && info != nullptr && !SchemeRegistry::SumsInRankOrder(*info)) {
      std::string able;
      for (const SchemeInfo& s : registry_.schemes()) {
        if (SchemeRegistry::SumsInRankOrder(s)) able += (able.empty() ? "" : ", ") + s.id;
      }
      throw InvalidArgument(Where{comm_->rank()}, "scheme ", id,
                            " does not sum in rank order, which this tensor requires (schemes that "
                            "do: ", able.empty() ? "none" : able, ")");
    }
    std::unique_ptr<Scheme> s = registry_.Create(id, options_.scheme_options, rank_order);
    s->set_check_agreement(false);  // the batch's round did it
    it = schemes_.emplace(key, std::move(s)).first;
  }
  return *it->second;
}

void Context::Run() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left
      job = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    std::exception_ptr error;
    try {
      Execute(job);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard lock(job.state->mu);
      job.state->done = true;
      job.state->error = error;
    }
    job.state->cv.notify_all();
    if (job.state->on_done) job.state->on_done(error);
    {
      std::lock_guard lock(mu_);
      busy_ = false;
    }
    idle_cv_.notify_all();
  }
}

void Context::SyncCoalesced(const std::string& batch, std::vector<BatchTensor>& tensors,
                            std::span<const size_t> group) {
  WithValueType(tensors[group.front()].value_type(),
                [&]<typename T>() { SyncCoalescedOf<T>(batch, tensors, group); });
}

template <typename T>
void Context::SyncCoalescedOf(const std::string& batch, std::vector<BatchTensor>& tensors,
                              std::span<const size_t> group) {
  const BatchTensor& first = tensors[group.front()];
  const int64_t width = first.width;
  const size_t w = static_cast<size_t>(width);
  // The rows end to end: ids offset by the rows of the tensors before.
  std::string name = detail::Concat(batch, ": ", group.size(), " sparse tensors coalesced ('",
                                    first.name, "', ...)");
  std::vector<T>& values_in = coalesced_values_.Of<T>();
  coalesced_ids_.clear();
  values_in.clear();
  coalesced_offsets_.clear();
  int64_t offset = 0;
  for (size_t index : group) {
    const SparseTensor& in = *tensors[index].sparse;
    coalesced_offsets_.push_back(offset);
    for (int64_t id : in.ids()) coalesced_ids_.push_back(id + offset);
    const std::span<const T> values = in.values<T>();  // one dtype (CoalescedGroups)
    values_in.insert(values_in.end(), values.begin(), values.end());
    offset += in.rows();  // CoalescedGroups checked the total
  }
  SparseTensor input = SparseTensor::FromSorted<T>(offset, width, std::move(coalesced_ids_),
                                                   std::move(values_in), std::move(name));
  Scheme& s = scheme(SchemeOf(first, options_.scheme, registry_), first.rank_order);
  const SparseTensor sum = s.Sync(*comm_, input, CallOptions(first));
  // The input's storage back for the next batch (after an error the next
  // batch allocates it anew).
  coalesced_ids_ = std::move(input).TakeIds();
  values_in = std::move(input).template TakeValues<T>();

  // Each tensor's part of the sum: the result's ids are sorted, so a slice.
  const std::span<const int64_t> ids = sum.ids();
  const std::span<const T> values = sum.values<T>();
  for (size_t k = 0; k < group.size(); ++k) {
    BatchTensor& t = tensors[group[k]];
    const int64_t lo_id = coalesced_offsets_[k];
    const auto lo = std::lower_bound(ids.begin(), ids.end(), lo_id);
    const auto hi = std::lower_bound(lo, ids.end(), lo_id + t.rows);
    const size_t begin = static_cast<size_t>(lo - ids.begin());
    const size_t end = static_cast<size_t>(hi - ids.begin());
    if (t.into) {  // Scheme::SyncInto's contract
      WriteRowsInto(ids.subspan(begin, end - begin), values.subspan(begin * w, (end - begin) * w),
                    width, lo_id, t.sparse_into.as<T>(), static_cast<AccumOf<T>>(t.divisor));
      continue;
    }
    // Into the output's own storage where it has some of this dtype (no
    // allocation when the caller reuses its outputs).
    std::vector<int64_t> out_ids = std::move(*t.sparse_out).TakeIds();
    std::vector<T> out_values;
    if (t.sparse_out->dtype() == DTypeOf<T>) {
      out_values = std::move(*t.sparse_out).template TakeValues<T>();
    }
    out_ids.resize(end - begin);
    for (size_t i = begin; i < end; ++i) out_ids[i - begin] = ids[i] - lo_id;
    out_values.assign(values.begin() + static_cast<ptrdiff_t>(begin * w),
                      values.begin() + static_cast<ptrdiff_t>(end * w));
    *t.sparse_out = SparseTensor::FromSorted<T>(t.rows, width, std::move(out_ids),
                                                std::move(out_values), t.name);
  }
}

void Context::SyncCoalescedDense(const std::string& batch, std::vector<BatchTensor>& tensors,
                                 std::span<const size_t> group) {
  WithValueType(tensors[group.front()].value_type(),
                [&]<typename T>() { SyncCoalescedDenseOf<T>(batch, tensors, group); });
}

template <typename T>
void Context::SyncCoalescedDenseOf(const std::string& batch, std::vector<BatchTensor>& tensors,
                                   std::span<const size_t> group) {
  const BatchTensor& first = tensors[group.front()];
  std::vector<T>& buffer = coalesced_dense_.Of<T>();
  buffer.clear();  // capacity kept from batch to batch
  int64_t rows = 0;
  for (size_t index : group) {
    const BatchTensor& t = tensors[index];
    const std::span<const T> values = t.dense.as<T>();  // one dtype (CoalescedGroups)
    buffer.insert(buffer.end(), values.begin(), values.end());
    rows += t.rows;  // CoalescedGroups checked the total
  }
  const std::string name = detail::Concat(batch, ": ", group.size(),
                                          " dense tensors coalesced ('", first.name, "', ...)");
  Scheme& s = scheme(SchemeOf(first, options_.scheme, registry_), first.rank_order);
  s.SyncDense(*comm_, std::span<T>(buffer), rows, first.width, name, CallOptions(first));
  size_t at = 0;
  for (size_t index : group) {
    BatchTensor& t = tensors[index];
    std::copy_n(buffer.begin() + static_cast<ptrdiff_t>(at), t.dense.size(),
                t.dense.as<T>().begin());
    at += t.dense.size();
  }
}

// Explicit instantiations: the two entries above reach these only through
// WithValueType's generic lambda, which clang 14 does not instantiate them
// from (undefined references at link time).
#define ZEN_INSTANTIATE(T, ...)                                                               \
  template void Context::SyncCoalescedOf<T>(const std::string&, std::vector<BatchTensor>&,    \
                                            std::span<const size_t>);                         \
  template void Context::SyncCoalescedDenseOf<T>(const std::string&,                         \
                                                 std::vector<BatchTensor>&,                   \
                                                 std::span<const size_t>);
ZEN_FOR_EACH_VALUE_TYPE(ZEN_INSTANTIATE)
#undef ZEN_INSTANTIATE

void Context::Execute(const Job& job) {
  if (job.work) return job.work(*comm_);
  std::vector<BatchTensor>& tensors = *job.tensors;
  // The tensors' fields carry their schemes and wire values; what else
  // the context's schemes are built with and every rank must share: the
  // block size (OmniReduce's, auto's profile of OmniReduce).
  const int64_t block = options_.scheme_options.block_values;
  const std::string settings =
      block == SchemeOptions{}.block_values ? std::string() : detail::Concat("block_values ", block);
  CheckBatchAgree(*comm_, job.name, tensors, options_.scheme, registry_, settings);
  const std::vector<std::vector<size_t>> groups =
      CoalescedGroups(tensors, options_.scheme, registry_);
  std::vector<const std::vector<size_t>*> group_of(tensors.size(), nullptr);
  for (const auto& g : groups) {
    for (size_t i : g) group_of[i] = &g;
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    BatchTensor& t = tensors[i];
    if (group_of[i] != nullptr) {
      if (group_of[i]->front() != i) continue;
      if (t.kind == BatchTensor::Kind::kDense) {
        SyncCoalescedDense(job.name, tensors, *group_of[i]);
      } else {
        SyncCoalesced(job.name, tensors, *group_of[i]);
      }
      continue;
    }
    Scheme& s = scheme(SchemeOf(t, options_.scheme, registry_), t.rank_order);
    const SyncOptions call = CallOptions(t);
    if (t.kind == BatchTensor::Kind::kDense) {
      s.SyncDenseValues(*comm_, t.dense, t.rows, t.width, t.name, call);
    } else if (t.into) {
      s.SyncIntoValues(*comm_, *t.sparse, t.sparse_into, t.divisor, call);
    } else {
      *t.sparse_out = s.Sync(*comm_, *t.sparse, call);
    }
  }
}

}  // namespace zen
