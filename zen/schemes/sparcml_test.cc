// sparcml: recursive doubling with folding for any world size, the switch to
// the dense form, rows that sum to zero, bit-identical results on all ranks
// and the exact bytes on the wire. The registry-wide grid
// (all_schemes_test.cc) covers the density/skew/backend matrix.
#include "zen/schemes/sparcml.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <mutex>

#include "zen/testing/ranks.h"
#include "zen/core/reduce.h"
#include "zen/testing/reference.h"
#include "zen/workload/synthetic.h"

namespace zen {
namespace {

using testing::Backend;

// Rank r holds rows r*k .. r*k+k-1 (disjoint), every value r + 1.
std::vector<SparseTensor> Disjoint(int world, int64_t rows, int64_t width, int64_t k) {
  std::vector<SparseTensor> out;
  for (int r = 0; r < world; ++r) {
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < k; ++i) ids.push_back(r * k + i);
    out.push_back(SparseTensor::FromSorted(rows, width, ids,
                                           std::vector<float>(ids.size() * width, r + 1.0f)));
  }
  return out;
}

// Runs the scheme and checks every rank against the reference and against
// rank 0's result bit for bit. Returns each rank's received bytes.
std::vector<uint64_t> RunExact(Backend backend, const std::vector<SparseTensor>& inputs) {
  const int world = static_cast<int>(inputs.size());
  const DenseReference reference(inputs);
  std::vector<SparseTensor> results(inputs.size());
  std::vector<uint64_t> recv(inputs.size());
  testing::RunRanks(backend, world, [&](Communicator& comm) {
    auto scheme = SparcmlInfo().factory({});
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

TEST(SparcmlTest, AnyWorldSizeSkewedInput) {
  for (int world : {2, 3, 4, 6, 7, 9}) {
    SCOPED_TRACE(world);
    const auto inputs = GenerateSynthetic(
        ParseSyntheticSpec("zipf:rows=3000,width=8,density=0.02,skew=1.1,seed=5"), world);
    RunExact(Backend::kInProc, inputs);
  }
}

TEST(SparcmlTest, SwitchesToDenseMidwayAndKeepsZeroSumRows) {
  // 30% per rank on 6 ranks: the union crosses the dense threshold
  // (COO 12 bytes a row vs dense ~4.1 bytes a row at width 1) after stage 0.
  auto inputs =
      GenerateSynthetic(ParseSyntheticSpec("zipf:rows=4000,width=1,density=0.3,skew=0,seed=9"), 6);
  // Row 3999 present on two ranks with values that cancel.
  for (int r : {0, 1}) {
    std::vector<int64_t> ids(inputs[r].ids().begin(), inputs[r].ids().end());
    std::vector<float> values(inputs[r].values().begin(), inputs[r].values().end());
    if (ids.back() == 3999) {
      values.back() = r == 0 ? 0.5f : -0.5f;
    } else {
      ids.push_back(3999);
      values.push_back(r == 0 ? 0.5f : -0.5f);
    }
    inputs[r] = SparseTensor::FromSorted(4000, 1, ids, values);
  }
  for (int r = 2; r < 6; ++r) {
    std::vector<int64_t> ids(inputs[r].ids().begin(), inputs[r].ids().end());
    std::vector<float> values(inputs[r].values().begin(), inputs[r].values().end());
    if (!ids.empty() && ids.back() == 3999) {
      ids.pop_back();
      values.pop_back();
    }
    inputs[r] = SparseTensor::FromSorted(4000, 1, ids, values);
  }
  ASSERT_TRUE(SparcmlIsDense(2400, 4000, 1));
  ASSERT_FALSE(SparcmlIsDense(1200, 4000, 1));
  RunExact(Backend::kInProc, inputs);
}

TEST(SparcmlTest, ReceivedBytesAreHeadersPlusPartnerStreams) {
  // 6 ranks, disjoint 10-row tensors of width 4 (24 bytes a COO row). Rank
  // 0 folds rank 4 (8 + 10 rows), swaps with rank 1 holding {1, 5} (8 + 20
  // rows), then with rank 2 holding {2, 3} (8 + 20 rows). Rank 3 swaps with
  // 2 (10 rows), then with 1 holding {1, 5, 0, 4} (40 rows). Plus the
  // 56-byte metadata message from each of the 5 peers.
  const auto inputs = Disjoint(6, 1000, 4, 10);
  const std::vector<uint64_t> recv = RunExact(Backend::kInProc, inputs);
  const uint64_t meta = 5 * 56, row = 8 + 4 * 4;
  EXPECT_EQ(recv[0], meta + (8 + 10 * row) + (8 + 20 * row) + (8 + 20 * row));
  EXPECT_EQ(recv[3], meta + (8 + 10 * row) + (8 + 40 * row));
  EXPECT_EQ(recv[4], meta + 8 + 60 * row);  // extra: the result
  EXPECT_EQ(SparcmlStreamBytes(60, 1000, 4), 60 * row);
}

TEST(SparcmlTest, GlooTcp) {
  const auto inputs = GenerateSynthetic(
      ParseSyntheticSpec("zipf:rows=2000,width=16,density=0.05,skew=1.1,seed=3"), 5);
  RunExact(Backend::kGlooTcp, inputs);
}

// Sizes near int64 limits (issue 13, item 2): the dense-stream size
// saturates instead of wrapping.
TEST(SparcmlTest, DenseSizeSaturatesNearInt64Limits) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  // Before: 2^62 + 1 rows x 4 bytes wrapped to a small dense size, so a
  // 2-row COO stream of width 1 counted as "larger than dense" and was
  // densified into 2^62 floats.
  EXPECT_EQ(SparcmlDenseBytes((int64_t{1} << 62) + 1, 1), SIZE_MAX);
  EXPECT_FALSE(SparcmlIsDense(2, (int64_t{1} << 62) + 1, 1));
  EXPECT_FALSE(SparcmlIsDense(2, kMax, 1));
  EXPECT_TRUE(SparcmlIsDense(1000, 1000, 1));
  EXPECT_EQ(SparcmlStreamBytes(2, kMax, 1), 24u);
}

}  // namespace
}  // namespace zen
