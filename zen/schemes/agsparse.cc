#include "zen/schemes/agsparse.h"

#include <cstring>
#include <type_traits>

#include "zen/comm/collectives.h"
#include "zen/core/error.h"
#include "zen/core/reduce.h"
#include "zen/schemes/wire.h"
#include "zen/core/merge_rows.h"

namespace zen {
namespace {

// Every dtype (the merge is one kernel per value type): float64 summed in
// float64; the 16-bit dtypes in float, rounded once per value.
constexpr SyncCapabilities kAgSparseCapabilities{.dtypes = DTypeSet::All()};

class AgSparse final : public Scheme {
 public:
  SyncCapabilities capabilities() const override { return kAgSparseCapabilities; }
  std::string_view name() const override { return "agsparse"; }
  std::string_view description() const override {
    return "AllGather of COO ids and values, merged locally (PyTorch Gloo / Horovod / DeepSpeed)";
  }

 protected:
  SparseTensor DoSync(Communicator& comm, const SparseTensor& local,
                      const SyncOptions&) override {
    return WithValueType(local.dtype(), [&]<typename T>() { return Sum<T>(comm, local); });
  }

 private:
  template <typename T>
  SparseTensor Sum(Communicator& comm, const SparseTensor& local) {
    // One message per peer: [ids (int64 x nnz)][values (float x nnz x width)],
    // encoded into a buffer kept across calls; AllGatherVInto exchanges the
    // byte counts in the transport's frames and receives into buffers kept
    // across calls too. The gathered messages are merged where they lie (in
    // rank order, this rank's own tensor read in place) straight into the
    // result, whose two vectors are the call's only allocations in steady
    // state.
    const int r = comm.rank();
    const size_t w = static_cast<size_t>(local.width());
    send_.clear();
    AppendCoo(send_, local.ids(), local.value_bytes());
    AllGatherVInto(comm, send_, recv_, CooBytesBound(local.rows(), local.width(), sizeof(T)),
                   requests_);
    std::vector<RowsOf<T>>& parts = Parts<T>();
    parts.clear();
    for (size_t j = 0; j < recv_.size(); ++j) {
      if (static_cast<int>(j) == r) {
        parts.push_back({local.ids(), local.values<T>()});
        continue;
      }
      const CooViewOf<T> m = ViewCoo<T>(recv_[j], local.rows(), local.width(),
                                        Where{r, local.name()}, static_cast<int>(j));
      parts.push_back({m.ids, m.values});
    }
    // A keys-only merge sizes the result, the second writes it: no scratch
    // of n x nnz rows is kept between calls (only the messages are).
    const size_t union_rows = MergedCount(std::span<const RowsOf<T>>(parts), merge_);
    std::vector<int64_t> ids(union_rows);
    std::vector<T> values(union_rows * w);
    MergeSumRowsInto(std::span<const RowsOf<T>>(parts), local.width(), ids.data(), values.data(),
                     merge_);
    return SparseTensor::FromSorted(local.rows(), local.width(), std::move(ids), std::move(values),
                                    local.name());
  }

  template <typename T>
  std::vector<RowsOf<T>>& Parts() {
    return parts_.Of<T>();
  }
  template <typename T>
  using PartList = std::vector<RowsOf<T>>;

  // Kept across calls (capacity reused).
  ByteBuffer send_;
  std::vector<ByteBuffer> recv_;
  RequestList requests_;
  PerValueType<PartList> parts_;
  MergeScratch merge_;
};

}  // namespace

SchemeInfo AgSparseInfo() {
  SchemeInfo info{"agsparse",
                  "AllGather of COO ids and values, merged locally (PyTorch Gloo / Horovod / DeepSpeed)",
                  [](const SchemeOptions& o) {
            ValidateSchemeOptions(o, "agsparse");
            return std::make_unique<AgSparse>();
          }};
  info.rank_order = true;  // every rank merges all gathered tensors in rank order
  info.capabilities = kAgSparseCapabilities;
  return info;
}

}  // namespace zen

// ---- Cost (registry.h): bytes per rank and rounds of one agsparse call ----
namespace zen {

// AllGatherV of each rank's COO stream (one round; the sizes travel in the
// transport's frames, which the counters do not include).
CostVolumes AgSparseCost(const CostInputs& in) {
  CostVolumes v = NewVolumes(in);
  if (in.n == 1) return v;
  const double bytes = (in.n - 1) * in.nnz * in.row;
  for (int r = 0; r < in.n; ++r) {
    v.recv[static_cast<size_t>(r)] += bytes;
    v.sent[static_cast<size_t>(r)] += bytes;
  }
  v.rounds += 1;
  return v;
}

}  // namespace zen
