#include "zen/schemes/sparcml.h"

#include <bit>
#include <cstring>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "zen/comm/collectives.h"
#include "zen/comm/peer_pattern.h"
#include "zen/core/checked.h"
#include "zen/core/error.h"
#include "zen/core/reduce.h"
#include "zen/schemes/wire.h"

namespace zen {
namespace {

constexpr char kDescription[] =
    "SparCML sparse recursive doubling (log n stages, COO switching to dense + presence "
    "bitmap once larger); Hierarchical Centralization";

size_t BitmapWords(int64_t rows) { return (static_cast<size_t>(rows) + 63) / 64; }

// The accumulated sum of a group of ranks, in either form. Kept by the
// scheme across calls, so that its vectors keep their capacity.
// T: the value type (dtype.h).
template <typename T>
struct Stream {
  int64_t rows = 0;
  int64_t width = 0;
  bool dense = false;
  std::vector<int64_t> ids;        // when !dense: sorted, unique
  std::vector<T> values;           // when !dense: ids.size() x width
  std::vector<uint64_t> present;   // when dense: bit id set = row id present
  std::vector<T> dense_values;     // when dense: rows x width
  int64_t nnz = 0;
};

template <typename T>
void Load(Stream<T>& s, const SparseTensor& t) {
  s.rows = t.rows();
  s.width = t.width();
  s.dense = false;
  s.ids.assign(t.ids().begin(), t.ids().end());
  s.values.assign(t.values<T>().begin(), t.values<T>().end());
  s.nnz = static_cast<int64_t>(t.nnz());
}

// Adds COO rows into a dense stream.
template <typename T>
void AddSparse(Stream<T>& acc, std::span<const int64_t> ids, std::span<const T> values) {
  const size_t w = static_cast<size_t>(acc.width);
  for (size_t i = 0; i < ids.size(); ++i) {
    const size_t id = static_cast<size_t>(ids[i]);
    AddInto(std::span<T>(acc.dense_values).subspan(id * w, w), values.subspan(i * w, w));
    acc.present[id / 64] |= 1ULL << (id % 64);
  }
}

// With present / dense_values set: adds the stream's own COO rows into
// them and makes the dense form the stream's.
template <typename T>
void FoldRowsIntoDense(Stream<T>& s) {
  s.dense = true;
  AddSparse<T>(s, s.ids, s.values);
  s.ids.clear();
  s.values.clear();
}

template <typename T>
void Densify(Stream<T>& s) {
  if (s.dense) return;
  s.present.assign(BitmapWords(s.rows), 0);
  s.dense_values.assign(static_cast<size_t>(s.rows) * static_cast<size_t>(s.width), T{0});
  FoldRowsIntoDense(s);  // onto zeros: the rows themselves
}

// Switches to the dense form when the COO form has become larger.
template <typename T>
void Normalize(Stream<T>& s) {
  if (!s.dense && SparcmlIsDense(s.nnz, s.rows, s.width, sizeof(T))) Densify(s);
}

int64_t CountPresent(std::span<const uint64_t> present) {
  int64_t c = 0;
  for (uint64_t word : present) c += std::popcount(word);
  return c;
}

template <typename T>
void EncodeInto(const Stream<T>& s, ByteBuffer& out) {
  out.clear();
  if (!s.dense) {
    AppendCoo(out, s.ids, std::span<const T>(s.values));
    return;
  }
  out.resize(SparcmlDenseBytes(s.rows, s.width, sizeof(T)));
  const size_t bitmap = s.present.size() * sizeof(uint64_t);
  std::memcpy(out.data(), s.present.data(), bitmap);
  if (!s.dense_values.empty()) {
    std::memcpy(out.data() + bitmap, s.dense_values.data(), s.dense_values.size() * sizeof(T));
  }
}

// What a received stream holds, checked and viewed in place (the message
// outlives the views): COO rows, or a presence bitmap and all values.
template <typename T>
struct Incoming {
  bool dense = false;
  std::span<const int64_t> ids;
  std::span<const T> values;
  std::span<const uint64_t> present;
};

template <typename T>
Incoming<T> View(std::span<const std::byte> bytes, int64_t nnz, int64_t rows, int64_t width,
                 const Where& where, int sender) {
  Incoming<T> in;
  if (!SparcmlIsDense(nnz, rows, width, sizeof(T))) {
    const CooViewOf<T> v = ViewCoo<T>(bytes, rows, width, where, sender);
    in.ids = v.ids;
    in.values = v.values;
    return in;
  }
  // The receive buffer has exactly SparcmlDenseBytes (PayloadFor) and
  // starts 8-byte aligned (a ByteBuffer's data).
  in.dense = true;
  const size_t words = BitmapWords(rows);
  in.present = std::span(reinterpret_cast<const uint64_t*>(bytes.data()), words);
  in.values = std::span(reinterpret_cast<const T*>(bytes.data() + words * sizeof(uint64_t)),
                        static_cast<size_t>(rows) * static_cast<size_t>(width));
  if (rows % 64 != 0 && (in.present.back() >> (rows % 64)) != 0) {
    throw FormatError(where, "sparcml dense stream from rank ", sender, " marks rows at or beyond ",
                      rows, " as present");
  }
  if (CountPresent(in.present) != nnz) {
    throw FormatError(where, "sparcml dense stream from rank ", sender, " has ",
                      CountPresent(in.present), " present rows, its header said ", nnz);
  }
  return in;
}

// The result's two vectors: the call's only allocations in steady state.
template <typename T>
SparseTensor ToTensor(const Stream<T>& s, const std::string& name) {
  if (!s.dense) {
    return SparseTensor::FromSorted(s.rows, s.width, s.ids, s.values, name);
  }
  const size_t w = static_cast<size_t>(s.width);
  std::vector<int64_t> ids;
  std::vector<T> values;
  ids.reserve(static_cast<size_t>(s.nnz));
  values.reserve(static_cast<size_t>(s.nnz) * w);
  for (size_t word = 0; word < s.present.size(); ++word) {
    for (uint64_t bits = s.present[word]; bits != 0; bits &= bits - 1) {
      const size_t id = word * 64 + static_cast<size_t>(std::countr_zero(bits));
      ids.push_back(static_cast<int64_t>(id));
      values.insert(values.end(), s.dense_values.begin() + static_cast<std::ptrdiff_t>(id * w),
                    s.dense_values.begin() + static_cast<std::ptrdiff_t>((id + 1) * w));
    }
  }
  return SparseTensor::FromSorted(s.rows, s.width, std::move(ids), std::move(values), name);
}

std::span<const std::byte> HeaderBytes(const int64_t& v) {
  return std::as_bytes(std::span<const int64_t>(&v, 1));
}
std::span<std::byte> HeaderBytes(int64_t& v) {
  return std::as_writable_bytes(std::span<int64_t>(&v, 1));
}

// Every dtype, each kernel per value type: float64 summed in float64; the
// 16-bit dtypes in float, rounded at each recursive step (a partial sum
// crosses the wire at its own width).
constexpr SyncCapabilities kSparcmlCapabilities{.dtypes = DTypeSet::All()};

class Sparcml final : public Scheme {
 public:
  SyncCapabilities capabilities() const override { return kSparcmlCapabilities; }
  std::string_view name() const override { return "sparcml"; }
  std::string_view description() const override { return kDescription; }

 protected:
  SparseTensor DoSync(Communicator& comm, const SparseTensor& local,
                      const SyncOptions&) override {
    return WithValueType(local.dtype(), [&]<typename T>() { return Sum<T>(comm, local); });
  }

 private:
  // The accumulator and merge scratch of value type T, kept across calls.
  template <typename T>
  struct State {
    Stream<T> acc;
    std::vector<int64_t> merged_ids;
    std::vector<T> merged_values;
  };
  template <typename T>
  State<T>& StateOf() {
    return states_.Of<T>();
  }

  template <typename T>
  SparseTensor Sum(Communicator& comm, const SparseTensor& local) {
    Stream<T>& acc = StateOf<T>().acc;
    const int n = comm.size(), me = comm.rank();
    if (n == 1) return local;
    if (plan_rank_ != me || plan_world_ != n) {  // the plan is kept: it has a vector
      plan_ = RecursiveDoubling(me, n);
      plan_rank_ = me;
      plan_world_ = n;
    }
    const RecursiveDoublingPlan& plan = plan_;
    const int stages = std::countr_zero(static_cast<unsigned>(plan.pow2));
    // Every rank takes the same tags, whatever its role.
    const Tag fold_tag = comm.NextTag();
    stage_tags_.clear();
    for (int i = 0; i < stages; ++i) stage_tags_.push_back(comm.NextTag());
    const Tag back_tag = comm.NextTag();
    const Where where{me, local.name()};

    Load(acc, local);
    Normalize(acc);
    if (plan.is_extra) {  // fold in, then wait for the result
      SendStream<T>(comm, plan.fold_partner, fold_tag);
      const Incoming<T> result = RecvStream<T>(comm, plan.fold_partner, back_tag, local, where);
      acc.dense = false;  // empty, then the result merged in
      acc.ids.clear();
      acc.values.clear();
      acc.nnz = 0;
      Merge<T>(result);
      return ToTensor(acc, local.name());
    }
    if (plan.fold_partner >= 0) {
      Merge<T>(RecvStream<T>(comm, plan.fold_partner, fold_tag, local, where));
    }
    for (size_t i = 0; i < plan.partners.size(); ++i) {
      Merge<T>(Swap<T>(comm, plan.partners[i], stage_tags_[i], local, where));
    }
    if (plan.fold_partner >= 0) SendStream<T>(comm, plan.fold_partner, back_tag);
    return ToTensor(acc, local.name());
  }

  // acc += other. Pairwise additions are commutative, so both partners of
  // a stage compute bit-identical sums.
  template <typename T>
  void Merge(const Incoming<T>& other) {
    State<T>& state = StateOf<T>();
    Stream<T>& acc = state.acc;
    if (!acc.dense && !other.dense) {
      const size_t w = static_cast<size_t>(acc.width);
      state.merged_ids.resize(acc.ids.size() + other.ids.size());
      state.merged_values.resize(state.merged_ids.size() * w);
      const size_t count = MergeSumInto(acc.ids, std::span<const T>(acc.values), other.ids,
                                        other.values, acc.width, state.merged_ids.data(),
                                        state.merged_values.data());
      state.merged_ids.resize(count);
      state.merged_values.resize(count * w);
      std::swap(acc.ids, state.merged_ids);
      std::swap(acc.values, state.merged_values);
      acc.nnz = static_cast<int64_t>(count);
      Normalize(acc);
      return;
    }
    if (!acc.dense) {  // the other is dense: it becomes the accumulator
      acc.present.assign(other.present.begin(), other.present.end());
      acc.dense_values.assign(other.values.begin(), other.values.end());
      FoldRowsIntoDense(acc);
    } else if (other.dense) {
      AddInto(std::span<T>(acc.dense_values), other.values);
      for (size_t i = 0; i < acc.present.size(); ++i) acc.present[i] |= other.present[i];
    } else {
      AddSparse<T>(acc, other.ids, other.values);
    }
    acc.nnz = CountPresent(acc.present);
  }

  template <typename T>
  void SendStream(Communicator& comm, int peer, Tag tag) {
    const Stream<T>& acc = StateOf<T>().acc;
    const int64_t header = acc.nnz;
    EncodeInto(acc, send_);
    auto h = comm.Send(peer, tag, HeaderBytes(header));
    auto b = comm.Send(peer, tag, send_);
    h->Wait();
    b->Wait();
  }

  static int64_t CheckedHeader(int64_t nnz, const SparseTensor& local, const Where& where,
                               int peer) {
    if (nnz < 0 || nnz > local.rows()) {
      throw FormatError(where, "sparcml header from rank ", peer, " announces ", nnz,
                        " rows, outside [0, ", local.rows(), "]");
    }
    return nnz;
  }

  // Sizes recv_ for a stream of nnz rows announced by peer.
  void PayloadFor(int64_t nnz, const SparseTensor& local, const Where& where, int peer) {
    const size_t bytes =
        SparcmlStreamBytes(nnz, local.rows(), local.width(), DTypeSize(local.dtype()));
    if (bytes == SIZE_MAX) {
      throw FormatError(where, "sparcml header from rank ", peer, " announces ", nnz,
                        " rows of width ", local.width(), ": the stream size overflows size_t");
    }
    ResizeOrThrow(recv_, bytes, where, "sparcml stream buffer");
  }

  // Receives peer's stream into recv_; returns it checked and viewed there
  // (valid until the next receive).
  template <typename T>
  Incoming<T> RecvStream(Communicator& comm, int peer, Tag tag, const SparseTensor& local,
                         const Where& where) {
    int64_t header = 0;
    comm.Recv(peer, tag, HeaderBytes(header))->Wait();
    const int64_t nnz = CheckedHeader(header, local, where, peer);
    PayloadFor(nnz, local, where, peer);
    comm.Recv(peer, tag, recv_)->Wait();
    return View<T>(recv_, nnz, local.rows(), local.width(), where, peer);
  }

  // Both partners send their stream and receive the other's (into recv_,
  // returned as RecvStream does).
  template <typename T>
  Incoming<T> Swap(Communicator& comm, int peer, Tag tag, const SparseTensor& local,
                   const Where& where) {
    const Stream<T>& acc = StateOf<T>().acc;
    const int64_t my_header = acc.nnz;
    EncodeInto(acc, send_);
    int64_t header = 0;
    auto rh = comm.Recv(peer, tag, HeaderBytes(header));
    auto sh = comm.Send(peer, tag, HeaderBytes(my_header));
    auto sb = comm.Send(peer, tag, send_);
    rh->Wait();
    const int64_t nnz = CheckedHeader(header, local, where, peer);
    PayloadFor(nnz, local, where, peer);
    comm.Recv(peer, tag, recv_)->Wait();
    sh->Wait();
    sb->Wait();
    return View<T>(recv_, nnz, local.rows(), local.width(), where, peer);
  }

  // Kept across calls (capacity reused): steady-state calls allocate only
  // their result.
  PerValueType<State> states_;
  ByteBuffer send_, recv_;
  std::vector<Tag> stage_tags_;
  RecursiveDoublingPlan plan_;
  int plan_rank_ = -1, plan_world_ = 0;
};

}  // namespace

size_t SparcmlDenseBytes(int64_t rows, int64_t width, size_t value_bytes) {
  if (rows < 0 || width < 0) return SIZE_MAX;
  size_t values = 0, out = 0;
  if (!TryMul(static_cast<size_t>(rows), static_cast<size_t>(width), values) ||
      !TryMul(values, value_bytes, values) ||
      !TryAdd(values, BitmapWords(rows) * sizeof(uint64_t), out)) {
    return SIZE_MAX;
  }
  return out;
}

bool SparcmlIsDense(int64_t nnz, int64_t rows, int64_t width, size_t value_bytes) {
  const size_t dense = SparcmlDenseBytes(rows, width, value_bytes);
  return dense != SIZE_MAX && CooBytes(static_cast<size_t>(nnz), width, value_bytes) > dense;
}

size_t SparcmlStreamBytes(int64_t nnz, int64_t rows, int64_t width, size_t value_bytes) {
  return SparcmlIsDense(nnz, rows, width, value_bytes)
             ? SparcmlDenseBytes(rows, width, value_bytes)
             : CooBytes(static_cast<size_t>(nnz), width, value_bytes);
}

SchemeInfo SparcmlInfo() {
  SchemeInfo info{"sparcml", kDescription, [](const SchemeOptions& o) {
                    ValidateSchemeOptions(o, "sparcml");
                    return std::make_unique<Sparcml>();
                  }};
  info.capabilities = kSparcmlCapabilities;
  return info;
}

}  // namespace zen

// ---- Cost (registry.h): bytes per rank and rounds of one sparcml call ----
#include <algorithm>
#include <cmath>

namespace zen {

// Every stage a rank receives an 8-byte header plus the stream of its
// partner's group, whose size is the union of the group's ranks. The payload
// follows its header without waiting for the receiver, so a stage costs one
// latency.
CostVolumes SparcmlCost(const CostInputs& in) {
  CostVolumes v = NewVolumes(in);
  if (in.n == 1) return v;
  const auto stream = [&](int k) {
    return 8 +
           static_cast<double>(SparcmlStreamBytes(std::llround(in.Union(k)), in.rows, in.width));
  };
  std::vector<RecursiveDoublingPlan> plans;
  for (int r = 0; r < in.n; ++r) plans.push_back(RecursiveDoubling(r, in.n));
  const int p = plans[0].pow2;
  std::vector<int> group(static_cast<size_t>(in.n), 1);
  const auto add = [&](int to, int from, double bytes) {
    v.recv[static_cast<size_t>(to)] += bytes;
    v.sent[static_cast<size_t>(from)] += bytes;
  };
  if (p != in.n) {  // fold the extra ranks in
    for (int e = p; e < in.n; ++e) add(e - p, e, stream(1));
    for (int e = p; e < in.n; ++e) group[static_cast<size_t>(e - p)] = 2;
    v.stage_max.push_back(stream(1));
    v.rounds += 1;
  }
  for (size_t k = 0; k < plans[0].partners.size(); ++k) {
    std::vector<int> next = group;
    double biggest = 0;
    for (int r = 0; r < p; ++r) {
      const int q = plans[static_cast<size_t>(r)].partners[k];
      add(r, q, stream(group[static_cast<size_t>(q)]));
      biggest = std::max(biggest, stream(group[static_cast<size_t>(q)]));
      next[static_cast<size_t>(r)] = group[static_cast<size_t>(r)] + group[static_cast<size_t>(q)];
    }
    group = next;
    v.stage_max.push_back(biggest);
    v.rounds += 1;
  }
  if (p != in.n) {  // send the result back
    for (int e = p; e < in.n; ++e) add(e, e - p, stream(in.n));
    v.stage_max.push_back(stream(in.n));
    v.rounds += 1;
  }
  return v;
}

}  // namespace zen
