// fuzz/fuzz_cases.h — how the fuzz targets read their input, shared with the
// seed writer (make_seeds.cc) so that the committed corpus starts from
// valid messages.
//
// Every target's input is a few parameter bytes followed by the bytes under
// test. A target accepts exactly the zen error it documents (FormatError
// for received or read bytes); any other exception escapes and libFuzzer
// reports it as a crash, as it does for a sanitizer finding. After a
// successful decode the target checks the invariants the decoder promises.
//
// Usage (in a target):
//   zen::fuzz::Input in(data, size);
//   const int64_t rows = in.Rows();        // consumes parameter bytes
//   std::span<const std::byte> rest = in.Rest();
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "zen/comm/communicator.h"
#include "zen/core/error.h"
#include "zen/core/sparse_tensor.h"
#include "zen/engine/context.h"
#include "zen/workload/synthetic.h"

namespace zen::fuzz {

// Parameter bytes, then the rest. Missing parameter bytes read as zero.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint16_t U16() {
    const uint16_t lo = Byte();
    return static_cast<uint16_t>(lo | (Byte() << 8));
  }
  std::span<const std::byte> Rest() const {
    if (pos_ >= size_) return {};
    return std::as_bytes(std::span<const uint8_t>(data_ + pos_, size_ - pos_));
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

[[noreturn]] inline void Fail(const std::string& what) {
  std::fprintf(stderr, "fuzz invariant violated: %s\n", what.c_str());
  std::abort();
}

inline void CheckTensor(const SparseTensor& t, int64_t rows, int64_t width) {
  if (t.rows() != rows || t.width() != width) Fail("shape changed");
  if (t.values().size() != t.nnz() * static_cast<size_t>(width)) Fail("values size");
  for (size_t i = 0; i < t.nnz(); ++i) {
    const int64_t id = t.ids()[i];
    if (id < 0 || id >= rows) Fail("id outside [0, rows)");
    if (i > 0 && id <= t.ids()[i - 1]) Fail("ids not increasing");
  }
}

// The one-byte rows and density selectors of PeerCase and BatchCase, and
// the bytes that select given values (for the seed writer).
inline int64_t RowsOf(uint8_t b) { return 64 + int64_t{b} * 37; }
inline double DensityOf(uint8_t b) { return (1 + b % 100) / 100.0; }
inline uint8_t RowsByte(int64_t rows) { return static_cast<uint8_t>((rows - 64) / 37); }
inline uint8_t DensityByte(double density) {
  return static_cast<uint8_t>(static_cast<int>(density * 100 + 0.5) - 1);
}

// ---- peer_fuzz: a scheme on rank 0 whose peers are the fuzz input ----

// Parameter bytes: scheme index, world (2..4), flags (bit 0: dense-buffer
// entry; bit 1: width 3 instead of 1; bits 2-3: calls - 1, at most 3 calls
// of one scheme object over the stream: state kept across calls, auto's
// trial rounds), rows selector, density selector.
struct PeerCase {
  size_t scheme = 0;  // index into AllSchemes().ids(), modulo their number
  int world = 2;
  bool dense = false;
  int calls = 1;
  SyntheticSpec spec;

  static PeerCase Read(Input& in) {
    PeerCase c;
    c.scheme = in.Byte();
    c.world = 2 + in.Byte() % 3;
    const uint8_t flags = in.Byte();
    c.dense = flags & 1;
    c.calls = 1 + ((flags >> 2) & 3) % 3;
    c.spec.width = (flags & 2) ? 3 : 1;
    c.spec.rows = RowsOf(in.Byte());
    c.spec.density = DensityOf(in.Byte());
    c.spec.skew = 1.1;
    c.spec.seed = 17;
    return c;
  }
  std::vector<uint8_t> Header() const {
    return {static_cast<uint8_t>(scheme), static_cast<uint8_t>(world - 2),
            static_cast<uint8_t>((dense ? 1 : 0) | (spec.width == 3 ? 2 : 0) | (calls - 1) << 2),
            RowsByte(spec.rows), DensityByte(spec.density)};
  }
};

// A request whose bytes are delivered when it is waited for.
class LazyRequest final : public Request {
 public:
  template <typename F>
  explicit LazyRequest(F fill) : fill_(std::move(fill)) {}
  void Wait() override {
    if (fill_) std::exchange(fill_, nullptr)();
  }

 private:
  std::function<void()> fill_;
};

// Rank 0 of `world`: sends vanish; each receive, when waited for, takes its
// bytes from the stream (all peers share one stream, in the order rank 0
// waits). An exhausted stream is a dead peer: TransportError.
class StreamComm final : public Communicator {
 public:
  StreamComm(int world, std::span<const std::byte> stream)
      : Communicator(0, world, std::chrono::milliseconds(1000)), stream_(stream) {}

  std::unique_ptr<Request> Send(int peer, Tag, std::span<const std::byte>) override {
    CheckPeer(peer);
    return std::make_unique<LazyRequest>([] {});
  }
  std::unique_ptr<Request> Recv(int peer, Tag tag, std::span<std::byte> data) override {
    CheckPeer(peer);
    return std::make_unique<LazyRequest>([this, peer, tag, data] { Take(peer, tag, data); });
  }
  // A framed message: an 8-byte length, then that many bytes.
  std::unique_ptr<Request> RecvUpTo(int peer, Tag tag, ByteBuffer& out,
                                    int64_t max_bytes) override {
    CheckPeer(peer);
    return std::make_unique<LazyRequest>([this, peer, tag, &out, max_bytes] {
      uint64_t length = 0;
      Take(peer, tag, std::as_writable_bytes(std::span(&length, 1)));
      if (length > static_cast<uint64_t>(max_bytes)) {
        throw FormatError(Where{0}, "fuzz peer ", peer, " announces ", length, " bytes under tag ",
                          tag, ", more than the ", max_bytes, " bytes this receive can hold");
      }
      out.resize(length);
      Take(peer, tag, out);
    });
  }

 private:
  void Take(int peer, Tag tag, std::span<std::byte> data) {
    if (stream_.size() - pos_ < data.size()) {
      throw TransportError(Where{0}, "fuzz peer ", peer, " hung up under tag ", tag);
    }
    std::copy_n(stream_.begin() + static_cast<std::ptrdiff_t>(pos_), data.size(), data.begin());
    pos_ += data.size();
  }

  std::span<const std::byte> stream_;
  size_t pos_ = 0;
};

// Wraps a real communicator and appends, in wait order, every byte received
// (what StreamComm replays): the seed writer records real runs with it.
class RecordingComm final : public Communicator {
 public:
  RecordingComm(std::unique_ptr<Communicator> inner, std::vector<uint8_t>& log)
      : Communicator(inner->rank(), inner->size(), inner->timeout()),
        inner_(std::move(inner)),
        log_(log) {
    const Tag next = inner_->NextTag();  // continue the inner call numbering
    while (next > 1 && NextTag() + 1 < next) {
    }
  }

  std::unique_ptr<Request> Send(int peer, Tag tag, std::span<const std::byte> data) override {
    return inner_->Send(peer, tag, data);
  }
  std::unique_ptr<Request> Recv(int peer, Tag tag, std::span<std::byte> data) override {
    std::shared_ptr<Request> r = inner_->Recv(peer, tag, data);
    return std::make_unique<LazyRequest>([this, r, data] {
      r->Wait();
      const auto* p = reinterpret_cast<const uint8_t*>(data.data());
      log_.insert(log_.end(), p, p + data.size());
    });
  }
  // Logged as StreamComm replays it: the length, then the bytes.
  std::unique_ptr<Request> RecvUpTo(int peer, Tag tag, ByteBuffer& out,
                                    int64_t max_bytes) override {
    std::shared_ptr<Request> r = inner_->RecvUpTo(peer, tag, out, max_bytes);
    return std::make_unique<LazyRequest>([this, r, &out] {
      r->Wait();
      const uint64_t length = out.size();
      const auto* l = reinterpret_cast<const uint8_t*>(&length);
      log_.insert(log_.end(), l, l + sizeof(length));
      const auto* p = reinterpret_cast<const uint8_t*>(out.data());
      log_.insert(log_.end(), p, p + out.size());
    });
  }

 private:
  std::unique_ptr<Communicator> inner_;
  std::vector<uint8_t>& log_;
};

// ---- rows_fuzz: DecodeRows against the domains of a small owner ----

// Parameter bytes: rows (u16, +1), servers (1..8), server, width (1..8),
// seed, owner kind (even: hash, odd: range).
struct RowsCase {
  int64_t rows = 1;
  int servers = 1;
  int server = 0;
  int64_t width = 1;
  uint8_t seed = 0;
  bool hash = true;

  static RowsCase Read(Input& in) {
    RowsCase c;
    c.rows = 1 + in.U16();
    c.servers = 1 + in.Byte() % 8;
    c.server = in.Byte() % c.servers;
    c.width = 1 + in.Byte() % 8;
    c.seed = in.Byte();
    c.hash = in.Byte() % 2 == 0;
    return c;
  }
  std::vector<uint8_t> Header() const {
    const auto r = static_cast<uint16_t>(rows - 1);
    return {static_cast<uint8_t>(r & 0xff),    static_cast<uint8_t>(r >> 8),
            static_cast<uint8_t>(servers - 1), static_cast<uint8_t>(server),
            static_cast<uint8_t>(width - 1),   seed,
            static_cast<uint8_t>(hash ? 0 : 1)};
  }
};

// ---- coo_fuzz: DecodeCoo ----

// Parameter bytes: rows (u16, +1), width (1..16), sender.
struct CooCase {
  int64_t rows = 1;
  int64_t width = 1;
  int sender = 0;

  static CooCase Read(Input& in) {
    CooCase c;
    c.rows = 1 + in.U16();
    c.width = 1 + in.Byte() % 16;
    c.sender = in.Byte();
    return c;
  }
  std::vector<uint8_t> Header() const {
    const auto r = static_cast<uint16_t>(rows - 1);
    return {static_cast<uint8_t>(r & 0xff), static_cast<uint8_t>(r >> 8),
            static_cast<uint8_t>(width - 1), static_cast<uint8_t>(sender)};
  }
};

// ---- batch_fuzz: a zen::Context batch on rank 0 whose peers are the input ----

// Parameter bytes: default scheme index (into AllSchemes().ids(), modulo
// their number), world (2..4), the batch's tensors (bits below), rows
// selector, density selector. The tensors, in this order:
//   bit 0  "fc.weight"  dense, [12 x 4]
//   bit 1  "fc.bias"    dense, [5]
//   bit 2  "emb"        sparse, width 3, the sum into a SparseTensor
//   bit 3  "topk"       sparse, width 1, the mean into a dense buffer (SparseInto)
//   bit 4  "emb.own"    sparse, width 3, with its own scheme (sparcml)
//   bit 5  "ring"       dense, [40], scheme zen with a sum order
//   bit 6  "emb"'s values travel as bfloat16 (scheme zen only; an error otherwise)
//   bit 7  three batches of these tensors, one after the other (the
//          schemes' state kept across them; auto's first trial round ends)
// No tensor bit set: "emb" alone. The sparse tensors are synthetic (spec
// below, each rank its own); the dense ones a function of the rank.
struct BatchCase {
  size_t scheme = 0;
  int world = 2;
  uint8_t tensors = 0;
  SyntheticSpec spec;

  static BatchCase Read(Input& in) {
    BatchCase c;
    c.scheme = in.Byte();
    c.world = 2 + in.Byte() % 3;
    c.tensors = in.Byte();
    c.spec.rows = RowsOf(in.Byte());
    c.spec.density = DensityOf(in.Byte());
    c.spec.skew = 1.1;
    c.spec.seed = 23;
    return c;
  }
  std::vector<uint8_t> Header() const {
    return {static_cast<uint8_t>(scheme), static_cast<uint8_t>(world - 2), tensors,
            RowsByte(spec.rows), DensityByte(spec.density)};
  }
  bool has(int bit) const { return (tensors & 0x3f) == 0 ? bit == 2 : (tensors >> bit) & 1; }
  int batches() const { return 1 + 2 * (tensors >> 7); }
};

// One rank's batch of a BatchCase: the tensors and the storage they point
// to (fixed members: the BatchTensors hold pointers into them).
class Batch {
 public:
  Batch(const BatchCase& c, int rank) {
    SyntheticSpec wide = c.spec;
    wide.width = 3;
    SyntheticSpec narrow = c.spec;
    narrow.width = 1;
    narrow.seed = c.spec.seed + 1;
    emb_ = GenerateSyntheticRank(wide, rank);
    topk_ = GenerateSyntheticRank(narrow, rank);
    wide.seed = c.spec.seed + 2;
    own_ = GenerateSyntheticRank(wide, rank);
    auto fill = [rank](std::vector<float>& v, size_t n) {
      v.resize(n);
      const size_t r = static_cast<size_t>(rank);
      for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 7 + 3 * r) % 11) - 5.0f;
    };
    fill(weight_, 12 * 4);
    fill(bias_, 5);
    fill(ring_, 40);
    topk_into_.assign(static_cast<size_t>(c.spec.rows), 0.0f);
    if (c.has(0)) tensors.push_back(BatchTensor::Dense("fc.weight", weight_, 12, 4));
    if (c.has(1)) tensors.push_back(BatchTensor::Dense("fc.bias", bias_, 5, 1));
    if (c.has(2)) {
      tensors.push_back(BatchTensor::Sparse("emb", emb_, &emb_sum_));
      if (c.tensors & 0x40) tensors.back().values = WireValues::kBfloat16;
    }
    if (c.has(3)) {
      tensors.push_back(BatchTensor::SparseInto("topk", topk_, topk_into_,
                                                static_cast<float>(c.world)));
    }
    if (c.has(4)) {
      tensors.push_back(BatchTensor::Sparse("emb.own", own_, &own_sum_));
      tensors.back().scheme = "sparcml";
    }
    if (c.has(5)) {
      tensors.push_back(BatchTensor::Dense("ring", ring_, 40, 1));
      tensors.back().scheme = "zen";
      tensors.back().sum_order = {{0, 1 % c.world}, {17, 0}};
    }
  }
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  // What a successful batch promises: well-formed sums of the right shapes.
  void Check(const BatchCase& c) const {
    if (c.has(2)) CheckTensor(emb_sum_, c.spec.rows, 3);
    if (c.has(4)) CheckTensor(own_sum_, c.spec.rows, 3);
    if (topk_into_.size() != static_cast<size_t>(c.spec.rows)) Fail("dense output resized");
  }

  std::vector<BatchTensor> tensors;

 private:
  SparseTensor emb_, topk_, own_, emb_sum_, own_sum_;
  std::vector<float> weight_, bias_, ring_, topk_into_;
};

// ---- running a case: the targets, the seed writer and its replay test ----

// Rank `rank`'s calls of a PeerCase: `id`'s scheme (from `registry`) on its
// synthetic input, each sparse sum checked for shape and order.
inline void RunPeerCase(const PeerCase& c, const SchemeRegistry& registry, const std::string& id,
                        Communicator& comm, int rank) {
  SchemeOptions options;
  options.threads = 1;
  const std::unique_ptr<Scheme> scheme = registry.Create(id, options);
  SparseTensor local = GenerateSyntheticRank(c.spec, rank);
  local.set_name("fuzz");
  for (int call = 0; call < c.calls; ++call) {
    if (c.dense) {
      std::vector<float> buffer = local.ToDense();
      scheme->SyncDense(comm, buffer, c.spec.rows, c.spec.width, "fuzz");
    } else {
      CheckTensor(scheme->Sync(comm, local), c.spec.rows, c.spec.width);
    }
  }
}

// Rank `rank`'s batches of a BatchCase, `scheme` the context's default,
// each batch's promises checked.
inline void RunBatchCase(const BatchCase& c, const std::string& scheme, Communicator& comm,
                         int rank) {
  ContextOptions options;
  options.scheme = scheme;
  options.scheme_options.threads = 1;
  Batch batch(c, rank);
  Context ctx(comm, options);
  for (int b = 0; b < c.batches(); ++b) {
    ctx.Sync("fuzz", batch.tensors);
    batch.Check(c);
  }
}

}  // namespace zen::fuzz
