#include "zen/schemes/sparse_ps.h"

#include <algorithm>

#include "zen/comm/collectives.h"
#include "zen/comm/peer_pattern.h"
#include "zen/core/error.h"
#include "zen/core/reduce.h"
#include "zen/schemes/wire.h"

namespace zen {
namespace {

constexpr char kDescription[] =
    "sparse parameter server: COO push to the owners of n even id ranges, owners sum and "
    "return their range (COO) to everyone";

// Index of the first id >= value in ids.
size_t LowerIndex(std::span<const int64_t> ids, int64_t value) {
  return static_cast<size_t>(std::lower_bound(ids.begin(), ids.end(), value) - ids.begin());
}

// Every dtype (SumAll is one kernel per value type): float64 summed in
// float64; the 16-bit dtypes in float by the owner, rounded once per value.
constexpr SyncCapabilities kSparsePsCapabilities{.dtypes = DTypeSet::All()};

class SparsePs final : public Scheme {
 public:
  SyncCapabilities capabilities() const override { return kSparsePsCapabilities; }
  std::string_view name() const override { return "sparse_ps"; }
  std::string_view description() const override { return kDescription; }

 protected:
  SparseTensor DoSync(Communicator& comm, const SparseTensor& local,
                      const SyncOptions&) override {
    return WithValueType(local.dtype(), [&]<typename T>() { return Sum<T>(comm, local); });
  }

 private:
  template <typename T>
  static SparseTensor Sum(Communicator& comm, const SparseTensor& local) {
    const int n = comm.size(), me = comm.rank();
    const int64_t rows = local.rows(), width = local.width();
    const size_t w = static_cast<size_t>(width);
    const Where where{me, local.name()};
    if (n == 1) return local;

    // Push: the slice of local rows in each owner's range.
    const auto ids = local.ids();
    const auto values = local.values<T>();
    std::vector<ByteBuffer> push(static_cast<size_t>(n));
    const std::vector<int64_t> bounds = BalancedChunkBounds(rows, n);
    std::vector<size_t> cut(bounds.size());
    for (size_t o = 0; o < bounds.size(); ++o) cut[o] = LowerIndex(ids, bounds[o]);
    for (int o = 0; o < n; ++o) {
      if (o == me) continue;
      const size_t b = cut[static_cast<size_t>(o)], e = cut[static_cast<size_t>(o) + 1];
      push[static_cast<size_t>(o)] =
          EncodeCoo(ids.subspan(b, e - b), values.subspan(b * w, (e - b) * w));
    }
    const std::vector<ByteBuffer> got =
        AllToAllV(comm, push, CooBytesBound(rows, width, sizeof(T)));

    // Serve: sum the pushes with this rank's own slice of its range.
    std::vector<SparseTensor> parts;
    parts.reserve(static_cast<size_t>(n));
    const size_t b = cut[static_cast<size_t>(me)], e = cut[static_cast<size_t>(me) + 1];
    parts.push_back(SparseTensor::FromSorted<T>(
        rows, width,
        {ids.begin() + static_cast<std::ptrdiff_t>(b), ids.begin() + static_cast<std::ptrdiff_t>(e)},
        {values.begin() + static_cast<std::ptrdiff_t>(b * w),
         values.begin() + static_cast<std::ptrdiff_t>(e * w)},
        local.name()));
    const int64_t lo = bounds[static_cast<size_t>(me)], hi = bounds[static_cast<size_t>(me) + 1];
    for (int q = 0; q < n; ++q) {
      if (q == me) continue;
      SparseTensor part = DecodeCoo<T>(got[static_cast<size_t>(q)], rows, width, where, q);
      CheckInRange(part, lo, hi, where, q);
      parts.push_back(std::move(part));
    }
    const SparseTensor served = SumAll(parts);

    // Pull: every server's summed range, concatenated in rank order.
    const ByteBuffer mine = EncodeCoo<T>(served.ids(), served.values<T>());
    const std::vector<ByteBuffer> all =
        AllGatherV(comm, mine, CooBytesBound(rows, width, sizeof(T)));
    std::vector<int64_t> out_ids;
    std::vector<T> out_values;
    for (int o = 0; o < n; ++o) {
      if (o == me) {
        out_ids.insert(out_ids.end(), served.ids().begin(), served.ids().end());
        out_values.insert(out_values.end(), served.values<T>().begin(),
                          served.values<T>().end());
        continue;
      }
      const SparseTensor part = DecodeCoo<T>(all[static_cast<size_t>(o)], rows, width, where, o);
      CheckInRange(part, bounds[static_cast<size_t>(o)], bounds[static_cast<size_t>(o) + 1], where,
                   o);
      out_ids.insert(out_ids.end(), part.ids().begin(), part.ids().end());
      out_values.insert(out_values.end(), part.values<T>().begin(), part.values<T>().end());
    }
    return SparseTensor::FromSorted(rows, width, std::move(out_ids), std::move(out_values),
                                    local.name());
  }

  // A message from `sender` may only hold ids of the range [lo, hi).
  static void CheckInRange(const SparseTensor& part, int64_t lo, int64_t hi, const Where& where,
                           int sender) {
    if (part.empty()) return;
    if (part.ids().front() < lo || part.ids().back() >= hi) {
      const int64_t bad = part.ids().front() < lo ? part.ids().front() : part.ids().back();
      throw FormatError(where, "sparse_ps message from rank ", sender, " holds id ", bad,
                        " outside the range [", lo, ", ", hi, ")");
    }
  }
};

}  // namespace

SchemeInfo SparsePsInfo() {
  SchemeInfo info{"sparse_ps", kDescription, [](const SchemeOptions& o) {
                    ValidateSchemeOptions(o, "sparse_ps");
                    return std::make_unique<SparsePs>();
                  }};
  info.capabilities = kSparsePsCapabilities;
  return info;
}

}  // namespace zen

// ---- Cost (registry.h): bytes per rank and rounds of one sparse_ps call ----
namespace zen {

// COO rows pushed to their range owners, the owners' summed ranges pulled.
CostVolumes SparsePsCost(const CostInputs& in) {
  return OwnerPushPullCost(in, in.nnz, in.Union(in.n), in.row, in.row_share,
                           in.union_row_share);
}

}  // namespace zen
