#include "zen/schemes/dense_ring.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "zen/comm/peer_pattern.h"
#include "zen/core/checked.h"
#include "zen/core/error.h"
#include "zen/schemes/wire.h"

namespace zen {
namespace {

// In-place ring allreduce of `data` (reduce-scatter then allgather), with
// `combine(dst, src)` applied element-wise during reduce-scatter. Chunks
// are the balanced split of data into n contiguous pieces.
template <typename T, typename Combine>
void RingAllReduce(Communicator& comm, std::span<T> data, Combine combine) {
  const int n = comm.size();
  if (n == 1) return;
  const int r = comm.rank();
  const RingNeighbours ring = Ring(r, n);
  const int right = ring.next, left = ring.prev;
  const auto chunk = [&](int c) {
    const RowRange range = BalancedChunk(static_cast<int64_t>(data.size()), n, c);
    return data.subspan(static_cast<size_t>(range.begin), static_cast<size_t>(range.size()));
  };
  size_t max_chunk = 0;
  for (int c = 0; c < n; ++c) max_chunk = std::max(max_chunk, chunk(c).size());
  std::vector<T> incoming(max_chunk);
  for (int s = 0; s < n - 1; ++s) {
    const Tag tag = comm.NextTag();
    const auto out = chunk(RingReduceScatterSendChunk(r, n, s));
    const auto in = chunk(RingReduceScatterRecvChunk(r, n, s));
    auto recv = comm.Recv(left, tag, std::as_writable_bytes(std::span<T>(incoming).first(in.size())));
    auto send = comm.Send(right, tag, std::as_bytes(out));
    recv->Wait();
    send->Wait();
    for (size_t i = 0; i < in.size(); ++i) combine(in[i], incoming[i]);
  }
  for (int s = 0; s < n - 1; ++s) {
    const Tag tag = comm.NextTag();
    const auto out = chunk(RingAllGatherSendChunk(r, n, s));
    const auto in = chunk(RingAllGatherRecvChunk(r, n, s));
    auto recv = comm.Recv(left, tag, std::as_writable_bytes(in));
    auto send = comm.Send(right, tag, std::as_bytes(out));
    recv->Wait();
    send->Wait();
  }
}

// Every dtype (one ring kernel per value type): float64 summed in float64;
// the 16-bit dtypes in float, rounded at each reduce-scatter step (the
// partial sum crosses the wire at its own width, as in Gloo's and NCCL's
// rings). Also in a given sum order, for every dtype but float32 (float32
// sums in an order are zen's).
constexpr SyncCapabilities kDenseRingCapabilities{
    .dtypes = DTypeSet::All(),
    .sum_order_dtypes = DTypeSet::All()};  // float32's is `sum_order`: false

// The element ranges [begin, end) of `order`'s steps (SumStep) over a
// buffer of `total` elements, grouped by the rank each step starts at.
std::vector<std::vector<std::pair<size_t, size_t>>> RangesByStart(std::span<const SumStep> order,
                                                                  size_t total, int n) {
  std::vector<std::vector<std::pair<size_t, size_t>>> groups(static_cast<size_t>(n));
  for (size_t i = 0; i < order.size(); ++i) {
    const size_t begin = static_cast<size_t>(order[i].first);
    const size_t end = i + 1 < order.size() ? static_cast<size_t>(order[i + 1].first) : total;
    if (begin < end) groups[static_cast<size_t>(order[i].second)].emplace_back(begin, end);
  }
  return groups;
}

// In-place allreduce of `data` in a sum order: each element is summed from
// its step's start rank s down the ranks (s, s - 1, ..., s + 1), each rank
// adding its value to the sum so far, which is the order
// SyncOptions::sum_order names. A ring towards rank r - 1 whose chunks are
// the groups of elements that share a start rank: at reduce step k rank r
// passes on the sums of group r + k; after n - 1 steps it holds group r - 1
// whole, which an allgather along the same ring hands to every rank.
template <typename T>
void OrderedRingAllReduce(Communicator& comm, std::span<T> data, std::span<const SumStep> order) {
  const int n = comm.size();
  if (n == 1) return;
  const int r = comm.rank();
  const RingNeighbours ring = Ring(r, n);
  const auto groups = RangesByStart(order, data.size(), n);
  const auto group = [&](int g) -> const auto& { return groups[static_cast<size_t>((g % n + n) % n)]; };
  const auto count = [&](int g) {
    size_t c = 0;
    for (const auto& [b, e] : group(g)) c += e - b;
    return c;
  };
  size_t most = 0;
  for (int g = 0; g < n; ++g) most = std::max(most, count(g));
  std::vector<T> out(most), in(most);
  const auto pack = [&](int g) {
    size_t at = 0;
    for (const auto& [b, e] : group(g)) {
      std::copy(data.begin() + static_cast<std::ptrdiff_t>(b),
                data.begin() + static_cast<std::ptrdiff_t>(e), out.begin() + static_cast<std::ptrdiff_t>(at));
      at += e - b;
    }
    return std::span<const T>(out).first(at);
  };
  const auto exchange = [&](int send_group, int recv_group) {
    const Tag tag = comm.NextTag();
    const std::span<const T> sent = pack(send_group);
    auto recv = comm.Recv(ring.next, tag,
                          std::as_writable_bytes(std::span<T>(in).first(count(recv_group))));
    auto send = comm.Send(ring.prev, tag, std::as_bytes(sent));
    recv->Wait();
    send->Wait();
  };
  for (int k = 0; k < n - 1; ++k) {
    exchange(r + k, r + 1 + k);
    size_t at = 0;  // the sum so far, plus this rank's value
    for (const auto& [b, e] : group(r + 1 + k)) {
      for (size_t i = b; i < e; ++i) data[i] = Add(in[at++], data[i]);
    }
  }
  for (int k = 0; k < n - 1; ++k) {
    exchange(r - 1 + k, r + k);
    size_t at = 0;
    for (const auto& [b, e] : group(r + k)) {
      std::copy(in.begin() + static_cast<std::ptrdiff_t>(at),
                in.begin() + static_cast<std::ptrdiff_t>(at + (e - b)),
                data.begin() + static_cast<std::ptrdiff_t>(b));
      at += e - b;
    }
  }
}

class DenseRing final : public Scheme {
 public:
  SyncCapabilities capabilities() const override { return kDenseRingCapabilities; }
  std::string_view name() const override { return "dense"; }
  std::string_view description() const override {
    return "dense ring AllReduce (reduce-scatter + allgather) of the densified tensor";
  }

 protected:
  SparseTensor DoSync(Communicator& comm, const SparseTensor& local,
                      const SyncOptions&) override {
    return WithValueType(local.dtype(), [&]<typename T>() { return Sum<T>(comm, local); });
  }

  // A dense bucket is reduced in place; presence is whatever is non-zero.
  void DoSyncDense(Communicator& comm, DenseValues buffer, int64_t rows, int64_t width,
                   std::string_view tensor, const SyncOptions& options) override {
    // rows x width without wrapping: rows 2^62 + 1 x width 4 is not a
    // 4-float buffer.
    const Where where{comm.rank(), tensor};
    const size_t bytes = CheckedBytes(rows, width, sizeof(float), where, "dense: rows x width x 4");
    if (buffer.size() != bytes / sizeof(float)) {
      throw InvalidArgument(where, "dense buffer has ", buffer.size(), " floats, expected rows ",
                            rows, " x width ", width, " = ", bytes / sizeof(float));
    }
    WithValueType(buffer.dtype, [&]<typename T>() {
      if (options.sum_order.empty()) {
        RingAllReduce(comm, buffer.as<T>(), [](T& a, T b) { a = Add(a, b); });
      } else {
        OrderedRingAllReduce(comm, buffer.as<T>(), options.sum_order);
      }
    });
  }

 private:
  // The sum of a sparse tensor of value type T: densified, ring-reduced.
  template <typename T>
  static SparseTensor Sum(Communicator& comm, const SparseTensor& local) {
    const size_t w = static_cast<size_t>(local.width());
    const Where where{comm.rank(), local.name()};
    // rows x width x 4 bytes, checked, then allocated without letting
    // bad_alloc / length_error escape (rows 2^40 of width 64 need 256 TiB).
    const size_t elements = static_cast<size_t>(
        CheckedBytes(local.rows(), local.width(), sizeof(float), where, "dense: rows x width x 4") /
        sizeof(float));
    std::vector<T> dense;
    ResizeOrThrow(dense, elements, where, "dense: the densified tensor");
    local.ToDense<T>(std::span<T>(dense));
    RingAllReduce(comm, std::span<T>(dense), [](T& a, T b) { a = Add(a, b); });
    // Row presence travels as a bitmap, OR-reduced, so rows that sum to zero
    // are still reported (1 bit per row on top of the values).
    std::vector<uint64_t> present;
    ResizeOrThrow(present, (static_cast<size_t>(local.rows()) + 63) / 64, where,
                  "dense: the row-presence bitmap");
    for (int64_t id : local.ids()) present[static_cast<size_t>(id) / 64] |= 1ULL << (id % 64);
    RingAllReduce(comm, std::span<uint64_t>(present), [](uint64_t& a, uint64_t b) { a |= b; });
    // Received bits: rows past the tensor would be read from beyond `dense`.
    const int64_t tail = local.rows() % 64;
    if (tail != 0 && (present.back() >> tail) != 0) {
      throw FormatError(Where{comm.rank(), local.name()},
                        "dense: the row-presence bitmap reduced over all ranks marks rows at or "
                        "beyond ",
                        local.rows(), " (a peer sent a corrupt bitmap)");
    }
    std::vector<int64_t> ids;
    std::vector<T> values;
    for (size_t word = 0; word < present.size(); ++word) {
      for (uint64_t bits = present[word]; bits != 0; bits &= bits - 1) {
        const int64_t id = static_cast<int64_t>(word * 64 + static_cast<size_t>(std::countr_zero(bits)));
        ids.push_back(id);
        const T* row = dense.data() + static_cast<size_t>(id) * w;
        values.insert(values.end(), row, row + w);
      }
    }
    return SparseTensor::FromSorted(local.rows(), local.width(), std::move(ids), std::move(values),
                                    local.name());
  }
};

}  // namespace

SchemeInfo DenseRingInfo() {
  SchemeInfo info{"dense",
                  "dense ring AllReduce (reduce-scatter + allgather) of the densified tensor",
                  [](const SchemeOptions& o) {
                    ValidateSchemeOptions(o, "dense");
                    return std::make_unique<DenseRing>();
                  }};
  info.capabilities = kDenseRingCapabilities;
  return info;
}

}  // namespace zen

// ---- Cost (registry.h): bytes per rank and rounds of one dense call ----
#include <algorithm>

namespace zen {

// Ring reduce-scatter + ring allgather of the values, then the same of the
// presence bitmap (uint64 words). Rank r receives every chunk but its own in
// each phase: reduce-scatter misses chunk r, allgather chunk r + 1.
CostVolumes DenseRingCost(const CostInputs& in) {
  CostVolumes v = NewVolumes(in);
  if (in.n == 1) return v;
  const int64_t values = in.rows * in.width;
  const int64_t words = in.rows / 64 + (in.rows % 64 != 0 ? 1 : 0);  // (rows + 63) wraps near 2^63
  const double total = static_cast<double>(values) * 4 + static_cast<double>(words) * 8;
  double biggest = 0;
  for (int r = 0; r < in.n; ++r) {
    const auto chunk = [&](int c) {
      return static_cast<double>(BalancedChunk(values, in.n, c).size()) * 4 +
             static_cast<double>(BalancedChunk(words, in.n, c).size()) * 8;
    };
    const double bytes = 2 * total - chunk(r) - chunk((r + 1) % in.n);
    v.recv[static_cast<size_t>(r)] += bytes;
    v.sent[static_cast<size_t>(r)] += bytes;
    biggest = std::max(biggest, chunk(r));
  }
  v.rounds += 4 * (in.n - 1);
  v.stage_max.assign(static_cast<size_t>(2 * (in.n - 1)), biggest);
  return v;
}

}  // namespace zen
