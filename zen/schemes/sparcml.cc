#include "zen/schemes/sparcml.h"

#include <bit>
#include <cstring>
#include <utility>

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

// The accumulated sum of a group of ranks, in either form.
struct Stream {
  int64_t rows = 0;
  int64_t width = 0;
  bool dense = false;
  SparseTensor sparse;            // when !dense
  std::vector<uint64_t> present;  // when dense: bit id set = row id present
  std::vector<float> values;      // when dense: rows x width
  int64_t nnz = 0;
};

Stream FromTensor(const SparseTensor& t) {
  Stream s;
  s.rows = t.rows();
  s.width = t.width();
  s.sparse = t;
  s.nnz = static_cast<int64_t>(t.nnz());
  return s;
}

void Densify(Stream& s) {
  if (s.dense) return;
  s.present.assign(BitmapWords(s.rows), 0);
  for (int64_t id : s.sparse.ids()) s.present[static_cast<size_t>(id) / 64] |= 1ULL << (id % 64);
  s.values = s.sparse.ToDense();
  s.sparse = SparseTensor();
  s.dense = true;
}

// Switches to the dense form when the COO form has become larger.
void Normalize(Stream& s) {
  if (!s.dense && SparcmlIsDense(s.nnz, s.rows, s.width)) Densify(s);
}

// Adds a sparse tensor into a dense stream.
void AddSparse(Stream& acc, const SparseTensor& t) {
  const size_t w = static_cast<size_t>(acc.width);
  const auto ids = t.ids();
  for (size_t i = 0; i < ids.size(); ++i) {
    const size_t id = static_cast<size_t>(ids[i]);
    AddInto(std::span<float>(acc.values).subspan(id * w, w), t.row(i));
    acc.present[id / 64] |= 1ULL << (id % 64);
  }
}

int64_t CountPresent(const std::vector<uint64_t>& present) {
  int64_t c = 0;
  for (uint64_t word : present) c += std::popcount(word);
  return c;
}

// acc += other. Pairwise additions are commutative, so both partners of a
// stage compute bit-identical sums.
void Merge(Stream& acc, Stream other) {
  if (!acc.dense && !other.dense) {
    acc.sparse = MergeSum(acc.sparse, other.sparse);
    acc.nnz = static_cast<int64_t>(acc.sparse.nnz());
    Normalize(acc);
    return;
  }
  if (!acc.dense) std::swap(acc, other);  // acc is now dense
  if (other.dense) {
    AddInto(acc.values, other.values);
    for (size_t i = 0; i < acc.present.size(); ++i) acc.present[i] |= other.present[i];
  } else {
    AddSparse(acc, other.sparse);
  }
  acc.nnz = CountPresent(acc.present);
}

ByteBuffer Encode(const Stream& s) {
  if (!s.dense) return EncodeCoo(s.sparse.ids(), s.sparse.values());
  ByteBuffer out(SparcmlDenseBytes(s.rows, s.width));
  const size_t bitmap = s.present.size() * sizeof(uint64_t);
  std::memcpy(out.data(), s.present.data(), bitmap);
  if (!s.values.empty())
    std::memcpy(out.data() + bitmap, s.values.data(), s.values.size() * sizeof(float));
  return out;
}

Stream Decode(std::span<const std::byte> bytes, int64_t nnz, int64_t rows, int64_t width,
              const Where& where, int sender) {
  Stream s;
  s.rows = rows;
  s.width = width;
  s.nnz = nnz;
  if (!SparcmlIsDense(nnz, rows, width)) {
    s.sparse = DecodeCoo(bytes, rows, width, where, sender);
    return s;
  }
  s.dense = true;
  s.present.resize(BitmapWords(rows));
  s.values.resize(static_cast<size_t>(rows) * static_cast<size_t>(width));
  const size_t bitmap = s.present.size() * sizeof(uint64_t);
  std::memcpy(s.present.data(), bytes.data(), bitmap);
  if (!s.values.empty())
    std::memcpy(s.values.data(), bytes.data() + bitmap, s.values.size() * sizeof(float));
  if (rows % 64 != 0 && (s.present.back() >> (rows % 64)) != 0) {
    throw FormatError(where, "sparcml dense stream from rank ", sender, " marks rows at or beyond ",
                      rows, " as present");
  }
  if (CountPresent(s.present) != nnz) {
    throw FormatError(where, "sparcml dense stream from rank ", sender, " has ",
                      CountPresent(s.present), " present rows, its header said ", nnz);
  }
  return s;
}

SparseTensor ToTensor(Stream s, const std::string& name) {
  if (!s.dense) {
    s.sparse.set_name(name);
    return std::move(s.sparse);
  }
  const size_t w = static_cast<size_t>(s.width);
  std::vector<int64_t> ids;
  std::vector<float> values;
  ids.reserve(static_cast<size_t>(s.nnz));
  values.reserve(static_cast<size_t>(s.nnz) * w);
  for (size_t word = 0; word < s.present.size(); ++word) {
    for (uint64_t bits = s.present[word]; bits != 0; bits &= bits - 1) {
      const size_t id = word * 64 + static_cast<size_t>(std::countr_zero(bits));
      ids.push_back(static_cast<int64_t>(id));
      values.insert(values.end(), s.values.begin() + static_cast<std::ptrdiff_t>(id * w),
                    s.values.begin() + static_cast<std::ptrdiff_t>((id + 1) * w));
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

class Sparcml final : public Scheme {
 public:
  std::string_view name() const override { return "sparcml"; }
  std::string_view description() const override { return kDescription; }

 protected:
  SparseTensor DoSync(Communicator& comm, const SparseTensor& local) override {
    const int n = comm.size(), me = comm.rank();
    if (n == 1) return local;
    const RecursiveDoublingPlan plan = RecursiveDoubling(me, n);
    const int stages = std::countr_zero(static_cast<unsigned>(plan.pow2));
    // Every rank takes the same tags, whatever its role.
    const Tag fold_tag = comm.NextTag();
    std::vector<Tag> stage_tags;
    for (int i = 0; i < stages; ++i) stage_tags.push_back(comm.NextTag());
    const Tag back_tag = comm.NextTag();
    const Where where{me, local.name()};

    Stream acc = FromTensor(local);
    Normalize(acc);
    if (plan.is_extra) {  // fold in, then wait for the result
      SendStream(comm, plan.fold_partner, fold_tag, acc);
      return ToTensor(RecvStream(comm, plan.fold_partner, back_tag, local, where), local.name());
    }
    if (plan.fold_partner >= 0)
      Merge(acc, RecvStream(comm, plan.fold_partner, fold_tag, local, where));
    for (size_t i = 0; i < plan.partners.size(); ++i) {
      Merge(acc, Swap(comm, plan.partners[i], stage_tags[i], acc, local, where));
    }
    if (plan.fold_partner >= 0) SendStream(comm, plan.fold_partner, back_tag, acc);
    return ToTensor(std::move(acc), local.name());
  }

 private:
  static void SendStream(Communicator& comm, int peer, Tag tag, const Stream& s) {
    const int64_t header = s.nnz;
    const ByteBuffer payload = Encode(s);
    auto h = comm.Send(peer, tag, HeaderBytes(header));
    auto b = comm.Send(peer, tag, payload);
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

  // The payload buffer for a stream of nnz rows announced by peer.
  static ByteBuffer PayloadFor(int64_t nnz, const SparseTensor& local, const Where& where,
                               int peer) {
    const size_t bytes = SparcmlStreamBytes(nnz, local.rows(), local.width());
    if (bytes == SIZE_MAX) {
      throw FormatError(where, "sparcml header from rank ", peer, " announces ", nnz,
                        " rows of width ", local.width(), ": the stream size overflows size_t");
    }
    ByteBuffer payload;
    ResizeOrThrow(payload, bytes, where, "sparcml stream buffer");
    return payload;
  }

  static Stream RecvStream(Communicator& comm, int peer, Tag tag, const SparseTensor& local,
                           const Where& where) {
    int64_t header = 0;
    comm.Recv(peer, tag, HeaderBytes(header))->Wait();
    const int64_t nnz = CheckedHeader(header, local, where, peer);
    ByteBuffer payload = PayloadFor(nnz, local, where, peer);
    comm.Recv(peer, tag, payload)->Wait();
    return Decode(payload, nnz, local.rows(), local.width(), where, peer);
  }

  // Both partners send their stream and receive the other's.
  static Stream Swap(Communicator& comm, int peer, Tag tag, const Stream& mine,
                     const SparseTensor& local, const Where& where) {
    const int64_t my_header = mine.nnz;
    const ByteBuffer my_payload = Encode(mine);
    int64_t header = 0;
    auto rh = comm.Recv(peer, tag, HeaderBytes(header));
    auto sh = comm.Send(peer, tag, HeaderBytes(my_header));
    auto sb = comm.Send(peer, tag, my_payload);
    rh->Wait();
    const int64_t nnz = CheckedHeader(header, local, where, peer);
    ByteBuffer payload = PayloadFor(nnz, local, where, peer);
    comm.Recv(peer, tag, payload)->Wait();
    sh->Wait();
    sb->Wait();
    return Decode(payload, nnz, local.rows(), local.width(), where, peer);
  }
};

}  // namespace

size_t SparcmlDenseBytes(int64_t rows, int64_t width) {
  if (rows < 0 || width < 0) return SIZE_MAX;
  size_t values = 0, out = 0;
  if (!TryMul(static_cast<size_t>(rows), static_cast<size_t>(width), values) ||
      !TryMul(values, sizeof(float), values) ||
      !TryAdd(values, BitmapWords(rows) * sizeof(uint64_t), out)) {
    return SIZE_MAX;
  }
  return out;
}

bool SparcmlIsDense(int64_t nnz, int64_t rows, int64_t width) {
  const size_t dense = SparcmlDenseBytes(rows, width);
  return dense != SIZE_MAX && CooBytes(static_cast<size_t>(nnz), width) > dense;
}

size_t SparcmlStreamBytes(int64_t nnz, int64_t rows, int64_t width) {
  return SparcmlIsDense(nnz, rows, width) ? SparcmlDenseBytes(rows, width)
                                          : CooBytes(static_cast<size_t>(nnz), width);
}

SchemeInfo SparcmlInfo() {
  return {"sparcml", kDescription,
          [](const SchemeOptions&) { return std::make_unique<Sparcml>(); }};
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
