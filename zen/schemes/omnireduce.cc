#include "zen/schemes/omnireduce.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

#include "zen/comm/collectives.h"
#include "zen/comm/peer_pattern.h"
#include "zen/core/checked.h"
#include "zen/core/error.h"
#include "zen/core/reduce.h"

namespace zen {
namespace {

constexpr char kDescription[] =
    "OmniReduce-style blocks: non-zero 256-value blocks (index + row mask + values) pushed to "
    "the owners of n even block ranges, summed and returned to everyone";

// Where block b lies in the flattened rows x width tensor. Every quantity
// is computed so that it cannot overflow int64 for any total = rows x width
// that fits int64 (checked by MakeGeometry) and any b in [0, blocks()):
// lo(b) <= total - 1, and hi(b) is lo(b) plus what is left, never
// (b + 1) x block_values, which wraps for the last block of a tensor near
// 2^63 values.
struct Geometry {
  int64_t rows, width, block_values, total;
  size_t value_bytes = sizeof(float);  // of one value: the dtype's size

  int64_t blocks() const { return total / block_values + (total % block_values != 0 ? 1 : 0); }
  int64_t lo(int64_t b) const { return b * block_values; }
  int64_t hi(int64_t b) const { return lo(b) + std::min(block_values, total - lo(b)); }
  int64_t first_row(int64_t b) const { return lo(b) / width; }
  int64_t touched(int64_t b) const { return (hi(b) - 1) / width - first_row(b) + 1; }
  size_t mask_bytes(int64_t b) const {
    const int64_t t = touched(b);
    return static_cast<size_t>(t / 8 + (t % 8 != 0 ? 1 : 0));
  }
  // At most 8 + 2^27 + 2 + 8 x 2^30 bytes (block_values <= kMaxBlockValues).
  size_t record_bytes(int64_t b) const {
    return sizeof(uint64_t) + mask_bytes(b) + static_cast<size_t>(hi(b) - lo(b)) * value_bytes;
  }
};

constexpr int64_t kMaxBlockValues = SchemeOptions::kMaxBlockValues;

void CheckBlockValues(int64_t block_values) {
  if (block_values < 1 || block_values > kMaxBlockValues) {
    throw InvalidArgument(Where{}, "omnireduce: block_values ", block_values,
                          " must be in [1, 2^30]");
  }
}

Geometry MakeGeometry(int64_t rows, int64_t width, int64_t block_values, const Where& where,
                      size_t value_bytes = sizeof(float)) {
  CheckBlockValues(block_values);
  if (rows < 0 || width < 0) {  // 0 is an empty tensor of no blocks (profiles, cost model)
    throw InvalidArgument(where, "omnireduce: shape [", rows, ", ", width, "] is negative");
  }
  return {rows, width, block_values, CheckedMul(rows, width, where, "omnireduce: rows x width"),
          value_bytes};
}

// An upper bound on any message (the records of all blocks), saturating:
// what a peer may announce.
int64_t MaxMessageBytes(const Geometry& g) {
  const long double mask = static_cast<long double>((g.block_values + 2 + 7) / 8 + 1);
  const long double bytes = static_cast<long double>(g.blocks()) * (sizeof(uint64_t) + mask) +
                            static_cast<long double>(g.total) * g.value_bytes;
  return bytes >= static_cast<long double>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(bytes);
}

// A parsed block record inside a received buffer.
struct Record {
  int64_t block;
  const std::byte* mask;
  const std::byte* values;  // (hi - lo) values of the dtype, unaligned
};

bool MaskBit(const std::byte* mask, int64_t j) {
  return (std::to_integer<unsigned>(mask[j / 8]) >> (j % 8)) & 1u;
}

// Appends the record of block b of `local` (whose row index k is the first
// id >= first_row(b)) to out.
void AppendLocalRecord(ByteBuffer& out, const Geometry& g, const SparseTensor& local, int64_t b,
                       size_t k) {
  const size_t start = out.size();
  out.resize(start + g.record_bytes(b), std::byte{0});
  const uint64_t index = static_cast<uint64_t>(b);
  std::memcpy(out.data() + start, &index, sizeof(index));
  std::byte* mask = out.data() + start + sizeof(index);
  std::byte* values = mask + g.mask_bytes(b);
  const int64_t first = g.first_row(b), last = first + g.touched(b) - 1;
  const auto ids = local.ids();
  const std::byte* rows = local.value_bytes().data();
  const int64_t vb = static_cast<int64_t>(g.value_bytes);
  for (; k < ids.size() && ids[k] <= last; ++k) {
    const int64_t id = ids[k], j = id - first;
    mask[j / 8] |= std::byte{static_cast<unsigned char>(1u << (j % 8))};
    const int64_t from = std::max(g.lo(b), id * g.width),
                  to = std::min(g.hi(b), (id + 1) * g.width);
    std::memcpy(values + (from - g.lo(b)) * vb,
                rows + (static_cast<int64_t>(k) * g.width + (from - id * g.width)) * vb,
                static_cast<size_t>((to - from) * vb));
  }
}

// The non-zero blocks of local, encoded per owner of their block range.
std::vector<ByteBuffer> EncodeLocal(const Geometry& g, const SparseTensor& local, int n) {
  std::vector<ByteBuffer> out(static_cast<size_t>(n));
  const std::vector<int64_t> bounds = BalancedChunkBounds(g.blocks(), n);
  const auto ids = local.ids();
  int owner = 0;
  int64_t last_block = -1;
  size_t k = 0;  // first id >= first_row of the current block
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t b0 = ids[i] * g.width / g.block_values;
    const int64_t b1 = ((ids[i] + 1) * g.width - 1) / g.block_values;
    for (int64_t b = std::max(b0, last_block + 1); b <= b1; ++b) {
      while (bounds[static_cast<size_t>(owner) + 1] <= b) ++owner;
      while (ids[k] < g.first_row(b)) ++k;
      AppendLocalRecord(out[static_cast<size_t>(owner)], g, local, b, k);
      last_block = b;
    }
  }
  return out;
}

// Parses and validates records of blocks in [block_lo, block_hi).
std::vector<Record> Parse(std::span<const std::byte> bytes, const Geometry& g, int64_t block_lo,
                          int64_t block_hi, const Where& where, int sender) {
  std::vector<Record> out;
  size_t pos = 0;
  int64_t prev = block_lo - 1;
  while (pos < bytes.size()) {
    uint64_t index = 0;
    if (bytes.size() - pos < sizeof(index)) {
      throw FormatError(where, "omnireduce message from rank ", sender,
                        " ends inside a block index");
    }
    std::memcpy(&index, bytes.data() + pos, sizeof(index));
    const int64_t b = static_cast<int64_t>(index);
    if (b <= prev || b >= block_hi) {
      throw FormatError(where, "omnireduce message from rank ", sender, " holds block ", b,
                        ": blocks must be increasing and inside [", block_lo, ", ", block_hi, ")");
    }
    if (bytes.size() - pos < g.record_bytes(b)) {
      throw FormatError(where, "omnireduce message from rank ", sender, " truncates block ", b);
    }
    const std::byte* mask = bytes.data() + pos + sizeof(index);
    for (int64_t j = g.touched(b); j < static_cast<int64_t>(g.mask_bytes(b)) * 8; ++j) {
      if (MaskBit(mask, j)) {
        throw FormatError(where, "omnireduce message from rank ", sender, " marks row ",
                          g.first_row(b) + j, " outside block ", b);
      }
    }
    out.push_back({b, mask, mask + g.mask_bytes(b)});
    pos += g.record_bytes(b);
    prev = b;
  }
  return out;
}

// Sums records of the same block (in source order) into one record each.
// T: the value type (dtype.h); summed in AccumOf<T>, rounded once per value.
template <typename T>
ByteBuffer Aggregate(const Geometry& g, std::vector<std::pair<int, Record>> parts) {
  std::stable_sort(parts.begin(), parts.end(),
                   [](const auto& a, const auto& b) { return a.second.block < b.second.block; });
  ByteBuffer out;
  std::vector<AccumOf<T>> sum;
  std::vector<T> add;
  for (size_t i = 0; i < parts.size();) {
    const int64_t b = parts[i].second.block;
    const size_t len = static_cast<size_t>(g.hi(b) - g.lo(b)), mb = g.mask_bytes(b);
    sum.assign(len, AccumOf<T>{0});
    add.resize(len);
    std::vector<std::byte> mask(mb, std::byte{0});
    for (; i < parts.size() && parts[i].second.block == b; ++i) {
      std::memcpy(add.data(), parts[i].second.values, len * sizeof(T));
      AddWidenedInto<T>(sum, add);
      for (size_t m = 0; m < mb; ++m) mask[m] |= parts[i].second.mask[m];
    }
    const size_t start = out.size();
    out.resize(start + g.record_bytes(b));
    const uint64_t index = static_cast<uint64_t>(b);
    std::memcpy(out.data() + start, &index, sizeof(index));
    std::memcpy(out.data() + start + sizeof(index), mask.data(), mb);
    if constexpr (!std::is_same_v<AccumOf<T>, T>) {
      NarrowInto<T>(add, sum);  // `add` now holds the rounded sums
      std::memcpy(out.data() + start + sizeof(index) + mb, add.data(), len * sizeof(T));
    } else {
      std::memcpy(out.data() + start + sizeof(index) + mb, sum.data(), len * sizeof(T));
    }
  }
  return out;
}

// Appends the present rows of summed records (blocks ascending) to ids/values.
template <typename T>
void DecodeInto(const Geometry& g, const std::vector<Record>& records, std::vector<int64_t>& ids,
                std::vector<T>& values) {
  const size_t w = static_cast<size_t>(g.width);
  for (const Record& r : records) {
    const int64_t first = g.first_row(r.block);
    for (int64_t j = 0; j < g.touched(r.block); ++j) {
      if (!MaskBit(r.mask, j)) continue;
      const int64_t id = first + j;
      if (ids.empty() || ids.back() != id) {
        ids.push_back(id);
        values.resize(values.size() + w, T{0});
      }
      const int64_t from = std::max(g.lo(r.block), id * g.width);
      const int64_t to = std::min(g.hi(r.block), (id + 1) * g.width);
      std::memcpy(values.data() + values.size() - w + static_cast<size_t>(from - id * g.width),
                  r.values + (from - g.lo(r.block)) * static_cast<int64_t>(sizeof(T)),
                  static_cast<size_t>(to - from) * sizeof(T));
    }
  }
}

// Every dtype (a block's sum is one kernel per value type): float64 summed
// in float64; the 16-bit dtypes in float by the block's owner, rounded once
// per value.
constexpr SyncCapabilities kOmniReduceCapabilities{.dtypes = DTypeSet::All()};

class OmniReduce final : public Scheme {
 public:
  SyncCapabilities capabilities() const override { return kOmniReduceCapabilities; }
  explicit OmniReduce(const SchemeOptions& options) : block_values_(options.block_values) {
    ValidateSchemeOptions(options, "omnireduce");
  }
  std::string_view name() const override { return "omnireduce"; }
  // The block size: a rank with another one cuts the tensor into other
  // blocks, and reads every peer's block indices as other blocks.
  std::string shared_settings() const override {
    return block_values_ == SchemeOptions{}.block_values
               ? std::string()
               : "block_values " + std::to_string(block_values_);
  }
  std::string_view description() const override { return kDescription; }

 protected:
  SparseTensor DoSync(Communicator& comm, const SparseTensor& local,
                      const SyncOptions&) override {
    return WithValueType(local.dtype(), [&]<typename T>() { return Sum<T>(comm, local); });
  }

 private:
  template <typename T>
  SparseTensor Sum(Communicator& comm, const SparseTensor& local) const {
    const int n = comm.size(), me = comm.rank();
    if (n == 1) return local;
    const Where where{me, local.name()};
    const Geometry g =
        MakeGeometry(local.rows(), local.width(), block_values_, where, sizeof(T));
    const int64_t nb = g.blocks();
    const std::vector<int64_t> bounds = BalancedChunkBounds(nb, n);
    const auto range = [&](int o) {
      return std::pair{bounds[static_cast<size_t>(o)], bounds[static_cast<size_t>(o) + 1]};
    };

    std::vector<ByteBuffer> push = EncodeLocal(g, local, n);
    const ByteBuffer own = std::move(push[static_cast<size_t>(me)]);
    push[static_cast<size_t>(me)].clear();
    const std::vector<ByteBuffer> got = AllToAllV(comm, push, MaxMessageBytes(g));

    const auto [lo, hi] = range(me);
    std::vector<std::pair<int, Record>> parts;
    for (int q = 0; q < n; ++q) {
      const auto& bytes = q == me ? own : got[static_cast<size_t>(q)];
      for (const Record& r : Parse(bytes, g, lo, hi, where, q)) parts.emplace_back(q, r);
    }
    const ByteBuffer served = Aggregate<T>(g, std::move(parts));

    const std::vector<ByteBuffer> all = AllGatherV(comm, served, MaxMessageBytes(g));
    std::vector<int64_t> ids;
    std::vector<T> values;
    for (int o = 0; o < n; ++o) {
      const auto [olo, ohi] = range(o);
      const auto& bytes = o == me ? served : all[static_cast<size_t>(o)];
      DecodeInto(g, Parse(bytes, g, olo, ohi, where, o), ids, values);
    }
    return SparseTensor::FromSorted(local.rows(), local.width(), std::move(ids), std::move(values),
                                    local.name());
  }

  int64_t block_values_;
};

}  // namespace

int64_t OmniBlockCount(int64_t rows, int64_t width, int64_t block_values) {
  return MakeGeometry(rows, width, block_values, Where{}).blocks();
}

size_t OmniBlockRecordBytes(int64_t block, int64_t rows, int64_t width, int64_t block_values) {
  const Geometry g = MakeGeometry(rows, width, block_values, Where{});
  if (block < 0 || block >= g.blocks()) {
    throw InvalidArgument(Where{}, "omnireduce: block ", block, " is outside [0, ", g.blocks(), ")");
  }
  return g.record_bytes(block);
}

SchemeInfo OmniReduceInfo() {
  SchemeInfo info{"omnireduce", kDescription,
                  [](const SchemeOptions& o) { return std::make_unique<OmniReduce>(o); }};
  info.rank_order = true;  // each block's owner adds the ranks' blocks in rank order
  info.capabilities = kOmniReduceCapabilities;
  return info;
}

}  // namespace zen

// ---- Cost (registry.h): bytes per rank and rounds of one omnireduce call ----
#include <algorithm>
#include <cmath>

namespace zen {

// Non-zero blocks pushed to their range owners as records (index + mask +
// values), the owners' summed blocks pulled. Block-level inputs the profile
// did not measure assume random placement: a block of g rows is non-zero
// with probability 1 - (1 - d)^g; a row wider than a block fills its blocks.
CostVolumes OmniReduceCost(const CostInputs& in) {
  const WorkloadProfile& p = *in.profile;
  const int64_t nb = OmniBlockCount(in.rows, in.width, p.block_values);
  const double blocks = static_cast<double>(nb);
  // Masks repeat with the row/block alignment, so a prefix of blocks gives
  // the mean record size.
  const int64_t probe = std::min<int64_t>(nb, 4096);
  double sum = 0;
  for (int64_t b = 0; b < probe; ++b)
    sum += static_cast<double>(OmniBlockRecordBytes(b, in.rows, in.width, p.block_values));
  const double record = sum / static_cast<double>(probe);
  const double g = static_cast<double>(p.block_values) / static_cast<double>(in.width);
  const auto fill = [&](double d) { return g >= 1 ? 1 - std::pow(1 - d, g) : d; };
  const double density = p.sparsity.density;
  const double db = (p.block_density >= 0 ? p.block_density : fill(density)) * blocks;
  const double union_d = in.Union(in.n) / static_cast<double>(in.rows);
  const double ub =
      p.block_gamma_n >= 0 ? std::min(blocks, p.block_gamma_n * db) : fill(union_d) * blocks;
  const size_t n = static_cast<size_t>(in.n);
  const std::vector<double> share =
      p.block_share.size() == n ? p.block_share : SharesFromSkew(p.sparsity.skewness, nb, in.n);
  const std::vector<double> union_share =
      p.union_block_share.size() == n ? p.union_block_share : share;
  return OwnerPushPullCost(in, db, ub, record, share, union_share);
}

}  // namespace zen
