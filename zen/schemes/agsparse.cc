#include "zen/schemes/agsparse.h"

#include <cstring>

#include "zen/comm/collectives.h"
#include "zen/core/error.h"
#include "zen/core/reduce.h"
#include "zen/schemes/wire.h"
#include "zen/core/merge_rows.h"

namespace zen {
namespace {

class AgSparse final : public Scheme {
 public:
  std::string_view name() const override { return "agsparse"; }
  std::string_view description() const override {
    return "AllGather of COO ids and values, merged locally (PyTorch Gloo / Horovod / DeepSpeed)";
  }

 protected:
  SparseTensor DoSync(Communicator& comm, const SparseTensor& local,
                      const SyncOptions&) override {
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
    AppendCoo(send_, local.ids(), local.values());
    AllGatherVInto(comm, send_, recv_, CooBytesBound(local.rows(), local.width()), requests_);
    parts_.clear();
    for (size_t j = 0; j < recv_.size(); ++j) {
      if (static_cast<int>(j) == r) {
        parts_.push_back({local.ids(), local.values()});
        continue;
      }
      const CooView m = ViewCoo(recv_[j], local.rows(), local.width(),
                                Where{r, local.name()}, static_cast<int>(j));
      parts_.push_back({m.ids, m.values});
    }
    // A keys-only merge sizes the result, the second writes it: no scratch
    // of n x nnz rows is kept between calls (only the messages are).
    const size_t union_rows = MergedCount(parts_, merge_);
    std::vector<int64_t> ids(union_rows);
    std::vector<float> values(union_rows * w);
    MergeSumRowsInto(parts_, local.width(), ids.data(), values.data(), merge_);
    return SparseTensor::FromSorted(local.rows(), local.width(), std::move(ids), std::move(values),
                                    local.name());
  }

 private:
  // Kept across calls (capacity reused).
  ByteBuffer send_;
  std::vector<ByteBuffer> recv_;
  RequestList requests_;
  std::vector<RowsView> parts_;
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
