// sparse_ps: even id ranges, skew piling rows on the first owner, and the
// exact bytes of push and pull. The registry-wide grid
// (all_schemes_test.cc) covers density/skew/backends.
#include "zen/schemes/sparse_ps.h"

#include <gtest/gtest.h>

#include "zen/testing/ranks.h"
#include "zen/core/reduce.h"
#include "zen/testing/reference.h"
#include "zen/workload/synthetic.h"

namespace zen {
namespace {

using testing::Backend;

std::vector<uint64_t> RunExact(Backend backend, const std::vector<SparseTensor>& inputs) {
  const DenseReference reference(inputs);
  std::vector<SparseTensor> results(inputs.size());
  std::vector<uint64_t> recv(inputs.size());
  testing::RunRanks(backend, static_cast<int>(inputs.size()), [&](Communicator& comm) {
    auto scheme = SparsePsInfo().factory({});
    const size_t r = static_cast<size_t>(comm.rank());
    results[r] = scheme->Sync(comm, inputs[r]);
    recv[r] = comm.counters().total_recv();
  });
  for (size_t r = 0; r < results.size(); ++r) {
    const Agreement a = reference.Compare(results[r]);
    EXPECT_LE(a.max_rel_error, 1e-5) << "rank " << r;
    EXPECT_EQ(a.rows_mismatch, 0) << "rank " << r;
    EXPECT_TRUE(results[r] == results[0]) << "rank " << r << " differs from rank 0";
  }
  return recv;
}

TEST(SparsePsTest, SkewLoadsTheFirstOwner) {
  const auto inputs = GenerateSynthetic(
      ParseSyntheticSpec("zipf:rows=4000,width=8,density=0.05,skew=1.2,seed=2"), 4);
  const std::vector<uint64_t> recv = RunExact(Backend::kInProc, inputs);
  // The owner of the hot first range receives more than any other rank.
  for (size_t r = 1; r < recv.size(); ++r) EXPECT_GT(recv[0], recv[r]) << "rank " << r;
}

TEST(SparsePsTest, ReceivedBytesArePushPlusPull) {
  // rows 30 over 3 ranks: ranges [0,10), [10,20), [20,30); width 2 = 16
  // bytes a COO row.
  std::vector<SparseTensor> inputs;
  inputs.push_back(SparseTensor::FromSorted(30, 2, {1, 11, 21}, std::vector<float>(6, 1.0f)));
  inputs.push_back(SparseTensor::FromSorted(30, 2, {1, 2}, std::vector<float>(4, 2.0f)));
  inputs.push_back(SparseTensor::FromSorted(30, 2, {25}, std::vector<float>(2, -1.0f)));
  const std::vector<uint64_t> recv = RunExact(Backend::kInProc, inputs);
  const uint64_t meta = 2 * 56;  // sizes travel in the transport's frames
  // rank 0: pushed {1, 2} from rank 1; pulls {11} and {21, 25}.
  EXPECT_EQ(recv[0], meta + 2 * 16 + 3 * 16);
  // rank 2: pushed {21} from rank 0; pulls {1, 2} and {11}.
  EXPECT_EQ(recv[2], meta + 1 * 16 + 3 * 16);
}

TEST(SparsePsTest, MoreRanksThanRowsAndGlooTcp) {
  // 5 ranks over 3 rows: two ranges are empty.
  std::vector<SparseTensor> inputs;
  for (int r = 0; r < 5; ++r) {
    inputs.push_back(SparseTensor::FromSorted(3, 4, {r % 3}, std::vector<float>(4, r + 1.0f)));
  }
  RunExact(Backend::kInProc, inputs);
  RunExact(Backend::kGlooTcp, inputs);
}

}  // namespace
}  // namespace zen
