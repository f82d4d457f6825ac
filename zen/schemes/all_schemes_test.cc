// Every registered scheme, over every backend, world size, width, density and
// skew of the foundation grid, against the independent dense reference.
// New schemes join this grid by being registered.
#include <gtest/gtest.h>

#include <bit>
#include <cctype>
#include <cstdint>
#include <mutex>
#include <tuple>

#include "zen/testing/ranks.h"
#include "zen/core/reduce.h"
#include "zen/schemes/registry.h"
#include "zen/testing/reference.h"
#include "zen/workload/synthetic.h"

namespace zen {
namespace {

using testing::Backend;

// density < 0 encodes "one rank empty, the others at 1e-3".
constexpr double kOneRankEmpty = -1;

struct Case {
  std::string scheme;
  Backend backend;
  int world;
  int64_t width;
  double density;
  double skew;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string d = c.density == kOneRankEmpty ? "oneempty"
                  : c.density == 0           ? "empty"
                                             : std::to_string(static_cast<int>(c.density * 1e4)) + "e4";
  std::string name = c.scheme + "_" + testing::BackendName(c.backend) + "_n" +
                     std::to_string(c.world) + "_w" + std::to_string(c.width) + "_d" + d + "_s" +
                     std::to_string(static_cast<int>(c.skew * 10));
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

std::vector<SparseTensor> Inputs(const Case& c, int64_t rows) {
  SyntheticSpec spec;
  spec.rows = rows;
  spec.width = c.width;
  spec.skew = c.skew;
  spec.seed = 42;
  spec.density = c.density == kOneRankEmpty ? 1e-3 : c.density;
  std::vector<SparseTensor> in = GenerateSynthetic(spec, c.world);
  if (c.density == kOneRankEmpty) in[static_cast<size_t>(c.world) / 2] = SparseTensor::Empty(rows, c.width);
  return in;
}

class AllSchemesTest : public ::testing::TestWithParam<Case> {};

TEST_P(AllSchemesTest, SparseSyncEqualsDenseReference) {
  const Case& c = GetParam();
  const int64_t rows = c.width == 1 ? 20000 : 1500;
  const std::vector<SparseTensor> inputs = Inputs(c, rows);
  const DenseReference reference(inputs);
  const SchemeRegistry registry = BuiltinSchemes();
  std::mutex mu;
  testing::RunRanks(c.backend, c.world, [&](Communicator& comm) {
    auto scheme = registry.Create(c.scheme);
    // Two calls: the second must work on the same communicator (caches, tags).
    for (int call = 0; call < 2; ++call) {
      const SparseTensor sum = scheme->Sync(comm, inputs[static_cast<size_t>(comm.rank())]);
      const Agreement a = reference.Compare(sum);
      std::lock_guard lock(mu);
      EXPECT_LE(a.max_rel_error, 1e-5) << "rank " << comm.rank() << " call " << call;
      EXPECT_EQ(a.rows_mismatch, 0) << "rank " << comm.rank() << " call " << call;
    }
  });
}

TEST_P(AllSchemesTest, DenseBufferSyncEqualsDenseReference) {
  const Case& c = GetParam();
  const int64_t rows = c.width == 1 ? 20000 : 1500;
  const std::vector<SparseTensor> inputs = Inputs(c, rows);
  const DenseReference reference(inputs);
  const SchemeRegistry registry = BuiltinSchemes();
  std::mutex mu;
  testing::RunRanks(c.backend, c.world, [&](Communicator& comm) {
    auto scheme = registry.Create(c.scheme);
    std::vector<float> buffer = inputs[static_cast<size_t>(comm.rank())].ToDense();
    scheme->SyncDense(comm, buffer, rows, c.width, "bucket");
    const Agreement a = reference.CompareDense(buffer);
    std::lock_guard lock(mu);
    EXPECT_LE(a.max_rel_error, 1e-5) << "rank " << comm.rank();
    EXPECT_EQ(a.rows_mismatch, 0) << "rank " << comm.rank();
  });
}

std::vector<Case> Grid() {
  std::vector<Case> out;
  for (const std::string& scheme : BuiltinSchemes().ids()) {
    for (int world : {1, 2, 3, 5, 8}) {
      for (int64_t width : {1, 64}) {
        for (double density : {0.0, kOneRankEmpty, 1e-3, 0.3, 1.0}) {
          for (double skew : {0.0, 1.1}) {
            out.push_back({scheme, Backend::kInProc, world, width, density, skew});
          }
          // Real TCP on the skewed half of the grid.
          out.push_back({scheme, Backend::kGlooTcp, world, width, density, 1.1});
        }
      }
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Grid, AllSchemesTest, ::testing::ValuesIn(Grid()), CaseName);

// A scheme whose entry says rank_order returns, on every rank, the ranks'
// values added in ascending rank order, bit for bit: the independent
// reference is that order written out, ((x0 + x1) + x2) + ..., per element.
TEST(RankOrder, SchemesThatSaySoSumInAscendingRankOrderBitForBit) {
  int flagged = 0;
  for (const SchemeInfo& info : BuiltinSchemes().schemes()) {
    if (!info.rank_order) continue;
    ++flagged;
    for (int world : {3, 4, 8}) {
      for (int64_t width : {1, 8}) {
        SCOPED_TRACE(info.id + " n=" + std::to_string(world) + " width " + std::to_string(width));
        SyntheticSpec spec;
        spec.rows = width == 1 ? 20000 : 3000;
        spec.width = width;
        spec.density = 0.3;
        spec.skew = 1.1;
        spec.seed = 17;
        const std::vector<SparseTensor> inputs = GenerateSynthetic(spec, world);
        std::vector<float> want = inputs[0].ToDense();
        for (int r = 1; r < world; ++r) {
          const std::vector<float> x = inputs[static_cast<size_t>(r)].ToDense();
          for (size_t e = 0; e < want.size(); ++e) want[e] = want[e] + x[e];
        }
        std::mutex mu;
        testing::RunRanks(Backend::kInProc, world, [&](Communicator& comm) {
          const std::vector<float> got =
              info.factory({})->Sync(comm, inputs[static_cast<size_t>(comm.rank())]).ToDense();
          std::lock_guard lock(mu);
          ASSERT_EQ(got.size(), want.size());
          int64_t differ = 0;
          for (size_t e = 0; e < want.size(); ++e) {
            differ += std::bit_cast<uint32_t>(got[e]) != std::bit_cast<uint32_t>(want[e]);
          }
          EXPECT_EQ(differ, 0) << "rank " << comm.rank();
        });
      }
    }
  }
  EXPECT_GE(flagged, 1);
}

}  // namespace
}  // namespace zen
