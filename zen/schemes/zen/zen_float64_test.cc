// `zen` on float64 tensors: summed in float64, exactly. Sync, SyncInto and
// SyncDense on 1..8 ranks, element-sparse and wide rows (the grouped pull),
// skewed, empty and dense inputs, hash and range ownership, every pull
// encoding; values float32 would lose (1e300 + 1e-300, 1e40, 1e10 + 1 -
// 1e10, 2 x FLT_MAX). Each result is compared with two references written
// here and in zen/testing: the rank-order float64 sum of the inputs (zen's
// servers add contributions in rank order, so equal bit for bit) and
// DenseReference (relative error <= 1e-12, the same rows).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "zen/core/error.h"
#include "zen/schemes/zen/zen.h"
#include "zen/testing/ranks.h"
#include "zen/testing/reference.h"

namespace zen {
namespace {

using testing::Backend;

enum class Input { kSkewed, kOneRankEmpty, kAllEmpty, kDense, kSpecial };

std::string InputName(Input in) {
  switch (in) {
    case Input::kSkewed: return "skewed";
    case Input::kOneRankEmpty: return "oneempty";
    case Input::kAllEmpty: return "allempty";
    case Input::kDense: return "dense";
    case Input::kSpecial: return "special";
  }
  return "?";
}

// Values float32 cannot hold or sum: each row of kSpecial cycles through
// them, and the other inputs mix them in.
const std::vector<double> kHuge = {1e300, 1e40, 1e10, 2.0 * FLT_MAX, -1e300, 1e-300};

// Per rank, a float64 tensor of `rows` x `width`.
std::vector<SparseTensor> MakeInputs(int world, int64_t rows, int64_t width, Input in,
                                     uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<SparseTensor> out;
  for (int r = 0; r < world; ++r) {
    std::map<int64_t, bool> picked;
    const bool empty = in == Input::kAllEmpty || (in == Input::kOneRankEmpty && r == world / 2);
    if (!empty) {
      const int64_t want = in == Input::kDense ? rows : std::max<int64_t>(1, rows / 8);
      for (int64_t k = 0; k < want; ++k) {
        // Skewed: u^4 puts most ids near 0 (a few hot rows on every rank).
        const double u = unit(rng);
        const int64_t id = in == Input::kDense ? k
                                               : std::min<int64_t>(rows - 1, static_cast<int64_t>(
                                                                                 u * u * u * u *
                                                                                 static_cast<double>(rows)));
        picked[id] = true;
      }
    }
    std::vector<int64_t> ids;
    std::vector<double> values;
    for (const auto& [id, unused] : picked) {
      ids.push_back(id);
      for (int64_t c = 0; c < width; ++c) {
        double v = 1.0 + unit(rng) * 1e-9;  // float32 keeps 7 digits of it
        if (in == Input::kSpecial || (id + c + r) % 5 == 0) {
          // 1e10 on rank 0, 1 on rank 1, -1e10 on rank 2 (1e10 + 1 - 1e10),
          // else one of kHuge, sign by rank.
          const size_t k = static_cast<size_t>(id + c) % kHuge.size();
          v = r == 0 ? kHuge[k] : r == 1 ? 1.0 : r == 2 ? -kHuge[k] : kHuge[(k + 1) % kHuge.size()];
        }
        values.push_back(v);
      }
    }
    out.push_back(SparseTensor::FromSorted(rows, width, std::move(ids), std::move(values), "f64"));
  }
  return out;
}

// The rank-order float64 sum, dense: each element's first contribution,
// then the others added in rank order (zen's order).
std::vector<double> RankOrderSum(const std::vector<SparseTensor>& inputs) {
  const int64_t rows = inputs[0].rows(), width = inputs[0].width();
  const size_t w = static_cast<size_t>(width);
  std::vector<double> sum(static_cast<size_t>(rows) * w, 0.0);
  std::vector<bool> seen(static_cast<size_t>(rows), false);
  for (const SparseTensor& t : inputs) {
    const std::span<const double> v = t.values<double>();
    for (size_t i = 0; i < t.nnz(); ++i) {
      const size_t id = static_cast<size_t>(t.ids()[i]);
      for (size_t c = 0; c < w; ++c) {
        sum[id * w + c] = seen[id] ? sum[id * w + c] + v[i * w + c] : v[i * w + c];
      }
      seen[id] = true;
    }
  }
  return sum;
}

struct Case {
  int world;
  int64_t width;
  Input input;
  ZenOwnership ownership = ZenOwnership::kHash;
  EncodingChoice pull = EncodingChoice::kAuto;
  int64_t rows = 0;  // 0: 5000 for width 1, else 300
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  const char* pulls[] = {"auto", "coo", "bitmap", "coo32", "compact", "ef"};
  std::string name = "n";
  name += std::to_string(c.world);
  name += "_w";
  name += std::to_string(c.width);
  name += "_";
  name += InputName(c.input);
  if (c.ownership == ZenOwnership::kRange) name += "_range";
  name += "_";
  name += pulls[static_cast<int>(c.pull)];
  if (c.rows != 0) {
    name += "_r";
    name += std::to_string(c.rows);
  }
  return name;
}

class ZenFloat64 : public ::testing::TestWithParam<Case> {};

// Sync, SyncInto (with and without a divisor) and SyncDense of the same
// inputs, each against both references.
TEST_P(ZenFloat64, SumsInFloat64) {
  const Case c = GetParam();
  const int64_t rows = c.rows != 0 ? c.rows : c.width == 1 ? 5000 : 300;
  const std::vector<SparseTensor> inputs =
      MakeInputs(c.world, rows, c.width, c.input, 7 + static_cast<uint64_t>(c.world));
  const std::vector<double> want = RankOrderSum(inputs);
  const DenseReference reference(inputs);
  std::mutex mu;
  int grouped = 0;  // ranks whose pull was grouped
  testing::RunRanks(Backend::kInProc, c.world, [&](Communicator& comm) {
    const size_t r = static_cast<size_t>(comm.rank());
    ZenConfig config;
    config.ownership = c.ownership;
    config.pull_encoding = c.pull;
    ZenScheme scheme({}, config);
    const SparseTensor sum = scheme.Sync(comm, inputs[r]);
    const ZenStats stats = scheme.last_stats();
    std::vector<double> into(want.size(), 7.0);
    scheme.SyncInto(comm, inputs[r], into);
    std::vector<double> halved(want.size(), 7.0);
    scheme.SyncInto(comm, inputs[r], halved, 2.0);
    std::vector<double> dense = inputs[r].ToDense<double>();
    scheme.SyncDense(comm, dense, rows, c.width, "dense");
    std::lock_guard lock(mu);
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_EQ(sum.dtype(), DType::kFloat64);
    // A grouped pull (zen.h) leaves sole rows out of what it sends.
    if (stats.pull_rows_sent < stats.served_rows * (c.world - 1)) ++grouped;
    const Agreement a = reference.Compare(sum);
    EXPECT_EQ(a.rows_mismatch, 0);
    EXPECT_LE(a.max_rel_error, 1e-12);
    EXPECT_EQ(sum.ToDense<double>(), want);
    EXPECT_EQ(into, want);
    EXPECT_LE(reference.CompareDense(std::span<const double>(into)).max_rel_error, 1e-12);
    for (size_t k = 0; k < want.size(); ++k) ASSERT_EQ(halved[k], want[k] / 2.0) << k;
    // The dense path sums the non-zero rows: a row of zeros a rank listed
    // is not in it, and is zero either way.
    EXPECT_EQ(dense, want);
  });
  // Wide skewed rows on several ranks take the grouped pull somewhere.
  if (c.width == 33 && c.input == Input::kSkewed && c.world > 1) {
    EXPECT_GT(grouped, 0);
  }
}

std::vector<Case> Cases() {
  std::vector<Case> out;
  for (const int n : {1, 2, 3, 5, 8}) {
    for (const int64_t w : {int64_t{1}, int64_t{4}, int64_t{33}}) {
      for (const Input in : {Input::kSkewed, Input::kOneRankEmpty, Input::kDense}) {
        out.push_back({n, w, in});
      }
    }
  }
  // Width 1 over enough rows for permuted blocks (ElementBlockBits > 0).
  out.push_back({2, 1, Input::kSkewed, ZenOwnership::kHash, EncodingChoice::kAuto, 1 << 16});
  out.push_back({3, 1, Input::kDense, ZenOwnership::kHash, EncodingChoice::kAuto, 1 << 15});
  for (const int64_t w : {int64_t{1}, int64_t{8}}) {
    out.push_back({4, w, Input::kSpecial});
    out.push_back({3, w, Input::kAllEmpty});
    out.push_back({4, w, Input::kSkewed, ZenOwnership::kRange});
    for (const EncodingChoice e : {EncodingChoice::kCoo, EncodingChoice::kHashBitmap,
                                   EncodingChoice::kCoo32, EncodingChoice::kEliasFano}) {
      out.push_back({3, w, Input::kSkewed, ZenOwnership::kHash, e});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Grid, ZenFloat64, ::testing::ValuesIn(Cases()), CaseName);

// The values float32 loses, one row each, on 3 ranks: exact in float64.
TEST(ZenFloat64Values, WhatFloat32Loses) {
  // Row 1: 1e300 + 1e-300 (both kept); row 2: 1e40 + 1e40; row 3: 1e10 +
  // 1 - 1e10 = 1; row 4: FLT_MAX x 2 + FLT_MAX = 3 FLT_MAX (inf in float32).
  const std::vector<std::vector<int64_t>> ids = {{1, 2, 3, 4}, {2, 3, 4, 5}, {3, 5}};
  const std::vector<std::vector<double>> values = {
      {1e300, 1e40, 1e10, 2.0 * FLT_MAX}, {1e40, 1.0, FLT_MAX, 1e-300}, {-1e10, 1e300}};
  std::vector<double> want(8, 0.0);
  want[1] = 1e300;
  want[2] = 2e40;
  want[3] = 1.0;
  want[4] = 3.0 * static_cast<double>(FLT_MAX);
  want[5] = 1e-300 + 1e300;
  std::mutex mu;
  testing::RunRanks(Backend::kInProc, 3, [&](Communicator& comm) {
    const size_t r = static_cast<size_t>(comm.rank());
    ZenScheme scheme;
    const SparseTensor local = SparseTensor::FromSorted(8, 1, ids[r], values[r], "v");
    const SparseTensor sum = scheme.Sync(comm, local);
    std::lock_guard lock(mu);
    EXPECT_EQ(sum.ToDense<double>(), want);
    EXPECT_TRUE(std::isfinite(sum.ToDense<double>()[4]));
  });
  // 1e300 + 1e-300 keeps 1e-300 in another element of the same row.
  testing::RunRanks(Backend::kInProc, 2, [&](Communicator& comm) {
    ZenScheme scheme;
    const SparseTensor local =
        comm.rank() == 0 ? SparseTensor::FromSorted(4, 2, {1}, std::vector<double>{1e300, 0.0})
                         : SparseTensor::FromSorted(4, 2, {1}, std::vector<double>{0.0, 1e-300});
    const SparseTensor sum = scheme.Sync(comm, local);
    std::lock_guard lock(mu);
    EXPECT_EQ(sum.values<double>()[0], 1e300);
    EXPECT_EQ(sum.values<double>()[1], 1e-300);
  });
}

// Half-width wire values are float32's: a float64 call asking them is
// InvalidArgument on every rank, naming float64, and the next call works.
TEST(ZenFloat64Values, NarrowWireValuesAreRefusedOnEveryRank) {
  std::mutex mu;
  int raised = 0;
  testing::RunRanks(Backend::kInProc, 3, [&](Communicator& comm) {
    ZenScheme scheme;
    const SparseTensor local = SparseTensor::FromSorted(10, 2, {comm.rank()},
                                                        std::vector<double>{1.0, 2.0}, "t");
    SyncOptions options;
    options.values = WireValues::kBfloat16;
    try {
      scheme.Sync(comm, local, options);
    } catch (const InvalidArgument& e) {
      std::lock_guard lock(mu);
      ++raised;
      EXPECT_NE(std::string(e.what()).find("float64"), std::string::npos) << e.what();
    }
    const SparseTensor sum = scheme.Sync(comm, local);
    std::lock_guard lock(mu);
    EXPECT_EQ(sum.nnz(), 3u);
  });
  EXPECT_EQ(raised, 3);
}

// Float32 calls after float64 ones on the same object (one workspace)
// still sum in float32, and the other way round.
TEST(ZenFloat64Values, DtypesAlternateOnOneObject) {
  std::mutex mu;
  testing::RunRanks(Backend::kInProc, 4, [&](Communicator& comm) {
    ZenScheme scheme;
    const int64_t r = comm.rank();
    for (int round = 0; round < 3; ++round) {
      for (const int64_t width : {int64_t{1}, int64_t{16}}) {
        std::vector<int64_t> ids = {r, 10 + r, 40};
        std::vector<double> v64(ids.size() * static_cast<size_t>(width), 1e10);
        std::vector<float> v32(ids.size() * static_cast<size_t>(width), 0.5f);
        if (r == 1) std::fill(v64.begin(), v64.end(), 1.0);
        if (r == 2) std::fill(v64.begin(), v64.end(), -1e10);
        const SparseTensor s64 =
            scheme.Sync(comm, SparseTensor::FromSorted(64, width, ids, v64, "a"));
        const SparseTensor s32 =
            scheme.Sync(comm, SparseTensor::FromSorted(64, width, ids, v32, "b"));
        std::lock_guard lock(mu);
        // Row 40: 1e10 + 1 - 1e10 + 1e10 = 1e10 + 1 (rank 3 adds 1e10).
        EXPECT_EQ(s64.values<double>()[s64.nnz() * static_cast<size_t>(width) - 1], 1e10 + 1.0);
        EXPECT_EQ(s32.values<float>()[s32.nnz() * static_cast<size_t>(width) - 1], 2.0f);
      }
    }
  });
}

}  // namespace
}  // namespace zen
