#include "zen/schemes/agsparse.h"

#include <cstring>

#include "zen/comm/collectives.h"
#include "zen/core/error.h"
#include "zen/core/reduce.h"
#include "zen/schemes/wire.h"

namespace zen {
namespace {

class AgSparse final : public Scheme {
 public:
  std::string_view name() const override { return "agsparse"; }
  std::string_view description() const override {
    return "AllGather of COO ids and values, merged locally (PyTorch Gloo / Horovod / DeepSpeed)";
  }

 protected:
  SparseTensor DoSync(Communicator& comm, const SparseTensor& local) override {
    // One message per peer: [ids (int64 x nnz)][values (float x nnz x width)].
    // AllGatherV exchanges the byte counts first.
    const ByteBuffer mine = EncodeCoo(local.ids(), local.values());
    std::vector<ByteBuffer> all =
        AllGatherV(comm, mine, CooBytesBound(local.rows(), local.width()));
    std::vector<SparseTensor> parts;
    parts.reserve(all.size());
    for (size_t r = 0; r < all.size(); ++r) {
      if (static_cast<int>(r) == comm.rank()) {
        parts.push_back(local);
        continue;
      }
      parts.push_back(DecodeCoo(all[r], local.rows(), local.width(),
                                Where{comm.rank(), local.name()}, static_cast<int>(r)));
    }
    return SumAll(parts);
  }
};

}  // namespace

SchemeInfo AgSparseInfo() {
  SchemeInfo info{"agsparse",
                  "AllGather of COO ids and values, merged locally (PyTorch Gloo / Horovod / DeepSpeed)",
                  [](const SchemeOptions&) { return std::make_unique<AgSparse>(); }};
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
