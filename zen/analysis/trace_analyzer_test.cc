#include "zen/analysis/trace_analyzer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "zen/core/error.h"
#include "zen/workload/synthetic.h"

namespace zen {
namespace {

using Ids = std::vector<std::vector<int64_t>>;

// Brute force: mean union size over every k-subset, divided by the mean size.
std::vector<double> BruteGamma(const Ids& ids) {
  const int n = static_cast<int>(ids.size());
  std::vector<double> sum(n, 0), count(n, 0);
  for (uint32_t mask = 1; mask < (1u << n); ++mask) {
    std::set<int64_t> u;
    for (int r = 0; r < n; ++r) {
      if (mask & (1u << r)) u.insert(ids[r].begin(), ids[r].end());
    }
    const int k = __builtin_popcount(mask);
    sum[k - 1] += static_cast<double>(u.size());
    count[k - 1] += 1;
  }
  double mean = 0;
  for (const auto& r : ids) mean += static_cast<double>(r.size()) / n;
  std::vector<double> g(n);
  for (int k = 0; k < n; ++k) g[k] = sum[k] / count[k] / mean;
  return g;
}

Ids SyntheticIds(int n, int64_t rows, double density, double skew, uint64_t seed) {
  Ids out;
  for (const SparseTensor& t : GenerateSynthetic({"zipf", rows, 1, density, skew, seed}, n)) {
    out.emplace_back(t.ids().begin(), t.ids().end());
  }
  return out;
}

TEST(TraceAnalyzerTest, DensificationByHand) {
  const Ids ids = {{0, 1, 2}, {1, 2, 3}, {5}};  // mean size 7/3
  const std::vector<double> g = Densification(ids);
  ASSERT_EQ(g.size(), 3u);
  EXPECT_DOUBLE_EQ(g[0], 1.0);
  EXPECT_DOUBLE_EQ(g[1], 4.0 / (7.0 / 3));  // unions 4, 4, 4
  EXPECT_DOUBLE_EQ(g[2], 5.0 / (7.0 / 3));
}

TEST(TraceAnalyzerTest, DensificationMatchesBruteForceOverAllSubsets) {
  for (double skew : {0.0, 1.2}) {
    const Ids ids = SyntheticIds(7, 3000, 0.03, skew, 5);
    const std::vector<double> got = Densification(ids), want = BruteGamma(ids);
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-9) << "k " << k + 1;
  }
  // Full overlap gives 1 everywhere; disjoint equal sets give k.
  const Ids same = {{1, 5, 9}, {1, 5, 9}, {1, 5, 9}, {1, 5, 9}};
  for (double v : Densification(same)) EXPECT_DOUBLE_EQ(v, 1.0);
  const Ids disjoint = {{0, 1}, {2, 3}, {4, 5}, {6, 7}};
  const std::vector<double> d = Densification(disjoint);
  for (size_t k = 0; k < d.size(); ++k) EXPECT_NEAR(d[k], static_cast<double>(k + 1), 1e-12);
  const Ids empty = {{}, {}};
  EXPECT_EQ(Densification(empty), (std::vector<double>{1, 1}));
}

TEST(TraceAnalyzerTest, PairwiseOverlapByHand) {
  const Ids ids = {{0, 1, 2}, {1, 2, 3, 4}, {5}, {}};
  const OverlapStats s = PairwiseOverlap(ids, 4);
  // (0,1): 2 / 3; (0,2): 0; (1,2): 0; pairs with rank 3 skipped.
  ASSERT_EQ(s.ratios.size(), 3u);
  EXPECT_DOUBLE_EQ(s.ratios[0], 2.0 / 3);
  EXPECT_EQ(s.ratios[1], 0.0);
  EXPECT_EQ(s.ratios[2], 0.0);
  EXPECT_EQ(s.skipped_pairs, 3);
  EXPECT_DOUBLE_EQ(s.mean, 2.0 / 9);
  EXPECT_EQ(s.median, 0.0);
  EXPECT_EQ(s.min, 0.0);
  EXPECT_DOUBLE_EQ(s.max, 2.0 / 3);
  EXPECT_EQ(s.histogram, (std::vector<int64_t>{2, 0, 1, 0}));
  const Ids full = {{3, 4}, {3, 4, 8}};
  EXPECT_EQ(PairwiseOverlap(full, 4).histogram, (std::vector<int64_t>{0, 0, 0, 1}));  // 1.0 in last
  EXPECT_THROW(PairwiseOverlap(full, 0), InvalidArgument);
}

TEST(TraceAnalyzerTest, RangeCountsAndSkewnessByHand) {
  const Ids ids = {{0, 1, 2, 3, 8}, {15}};
  const auto counts = RangeCounts(ids, 16, 4);  // ranges [0,4) [4,8) [8,12) [12,16)
  EXPECT_EQ(counts[0], (std::vector<int64_t>{4, 0, 1, 0}));
  EXPECT_EQ(counts[1], (std::vector<int64_t>{0, 0, 0, 1}));
  EXPECT_DOUBLE_EQ(Skewness(counts[0], 16), 1.0 / (5.0 / 16));  // range 0 is full
  EXPECT_DOUBLE_EQ(Skewness(counts[1], 16), (1.0 / 4) / (1.0 / 16));
  EXPECT_EQ(Skewness(std::vector<int64_t>{0, 0}, 16), 0.0);
  // Uneven ranges: 10 rows over 4 parts are [0,3) [3,5) [5,8) [8,10).
  const Ids one = {{3, 4}};
  EXPECT_EQ(RangeCounts(one, 10, 4)[0], (std::vector<int64_t>{0, 2, 0, 0}));
  EXPECT_DOUBLE_EQ(Skewness(RangeCounts(one, 10, 4)[0], 10), 1.0 / 0.2);
}

// Independent imbalance: per-server bytes via a map, owner evaluated per id.
std::pair<double, double> BruteImbalance(const Ids& ids, int64_t width, const RowOwner& owner) {
  std::map<int, double> push, pull;
  std::set<int64_t> u;
  for (const auto& r : ids) {
    for (int64_t id : r) push[owner(id)] += static_cast<double>(width * 4 + 8), u.insert(id);
  }
  for (int64_t id : u) pull[owner(id)] += 1;
  const auto ratio = [&](std::map<int, double>& m) {
    double mx = 0, total = 0;
    for (int s = 0; s < owner.servers(); ++s) mx = std::max(mx, m[s]), total += m[s];
    return mx / (total / owner.servers());
  };
  return {ratio(push), ratio(pull)};
}

TEST(TraceAnalyzerTest, ImbalanceMatchesBruteForce) {
  const Ids ids = SyntheticIds(8, 20000, 0.02, 1.1, 3);
  for (const RowOwner& owner : {RowOwner::Range(20000, 8), RowOwner::Hash(77, 8)}) {
    const Imbalance im = PartitionImbalance(ids, 16, owner);
    const auto [push, pull] = BruteImbalance(ids, 16, owner);
    EXPECT_NEAR(im.push, push, 1e-12);
    EXPECT_NEAR(im.pull, pull, 1e-12);
    double pushed = 0;
    for (double b : im.push_bytes) pushed += b;
    EXPECT_DOUBLE_EQ(pushed, 8 * 400 * (16 * 4 + 8.0));  // every row sent once
  }
  // Skewed ids overload the first range; the hash stays near 1.
  EXPECT_GT(PartitionImbalance(ids, 16, RowOwner::Range(20000, 8)).push, 3.0);
  EXPECT_LT(PartitionImbalance(ids, 16, RowOwner::Hash(77, 8)).push, 1.15);
  // By hand: range owner, 2 servers over 4 rows, ranks {0,1} and {1}.
  const Ids hand = {{0, 1}, {1}};
  const Imbalance h = PartitionImbalance(hand, 1, RowOwner::Range(4, 2));
  EXPECT_EQ(h.push_bytes, (std::vector<double>{36, 0}));  // 3 rows x 12 bytes
  EXPECT_EQ(h.pull_bytes, (std::vector<double>{48, 0}));  // 2 union rows x 12 bytes x 2 workers
  EXPECT_DOUBLE_EQ(h.push, 2.0);
}

std::string TempPath(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) /
          ("zen_analyzer_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

SparseTensor Rows(int64_t rows, int64_t width, std::vector<int64_t> ids) {
  std::vector<float> values(ids.size() * static_cast<size_t>(width), 1.0f);
  return SparseTensor::FromSorted(rows, width, std::move(ids), std::move(values));
}

TEST(TraceAnalyzerTest, JsonOfAHandBuiltTrace) {
  Trace t;
  t.world_size = 4;
  // 64 rows, width 2; ranks crowd the low ids.
  t.Add("step0.embedding", {Rows(64, 2, {0, 1, 2, 3, 40}), Rows(64, 2, {1, 2, 3, 9}),
                            Rows(64, 2, {0, 2, 63}), Rows(64, 2, {})});
  t.Add("step1.embedding",
        {Rows(64, 2, {5}), Rows(64, 2, {5}), Rows(64, 2, {5}), Rows(64, 2, {6})});
  const std::string path = TempPath("json");
  WriteTrace(path, t);
  TraceReader reader(path);
  const TraceAnalysis a = AnalyzeTrace(reader, {});
  const nlohmann::json j = nlohmann::json::parse(AnalysisToJson(a));
  ASSERT_EQ(j["tensors"].size(), 2u);
  const auto& s0 = j["tensors"][0];
  EXPECT_EQ(s0["name"], "step0.embedding");
  EXPECT_EQ(s0["step"], 0);
  EXPECT_EQ(s0["base"], "embedding");
  EXPECT_EQ(s0["nnz"], (std::vector<int64_t>{5, 4, 3, 0}));
  EXPECT_DOUBLE_EQ(s0["mean_density"].get<double>(), 12.0 / 4 / 64);
  EXPECT_EQ(s0["union_rows"], 7);  // {0, 1, 2, 3, 9, 40, 63}
  EXPECT_DOUBLE_EQ(s0["union_density"].get<double>(), 7.0 / 64);
  const Ids ids0 = {{0, 1, 2, 3, 40}, {1, 2, 3, 9}, {0, 2, 63}, {}};
  const std::vector<double> want_gamma = BruteGamma(ids0);
  for (size_t k = 0; k < 4; ++k) EXPECT_NEAR(s0["gamma"][k].get<double>(), want_gamma[k], 1e-12);
  // Overlaps: (0,1) 3/4, (0,2) 2/3, (1,2) 1/3; three pairs with rank 3 skipped.
  EXPECT_EQ(s0["overlap"]["pairs"], 3);
  EXPECT_EQ(s0["overlap"]["skipped_pairs"], 3);
  EXPECT_DOUBLE_EQ(s0["overlap"]["median"].get<double>(), 2.0 / 3);
  EXPECT_DOUBLE_EQ(s0["overlap"]["mean"].get<double>(), (0.75 + 2.0 / 3 + 1.0 / 3) / 3);
  // 8 ranges of 8 rows: rank 0 has 4 in range 0 and 1 in range 5.
  EXPECT_EQ(s0["skew"]["counts_8"][0], (std::vector<int64_t>{4, 0, 0, 0, 0, 1, 0, 0}));
  EXPECT_EQ(s0["skew"]["counts_n"][2], (std::vector<int64_t>{2, 0, 0, 1}));  // ranges of 16
  EXPECT_DOUBLE_EQ(s0["skew"]["first_of_8_share"].get<double>(), (4.0 + 3 + 2) / 12);
  // Rank 0 over 4 ranges of 16: 4 in range 0 -> (4/16) / (5/64).
  EXPECT_DOUBLE_EQ(s0["skew"]["skewness"][0].get<double>(), (4.0 / 16) / (5.0 / 64));
  EXPECT_DOUBLE_EQ(s0["skew"]["union_skewness"].get<double>(), (5.0 / 16) / (7.0 / 64));
  // Range partition over 4 servers: push 11 rows to server 0, 0/1/1 elsewhere... by brute force.
  const auto [push, pull] = BruteImbalance(ids0, 2, RowOwner::Range(64, 4));
  EXPECT_DOUBLE_EQ(s0["imbalance"]["range"]["push"].get<double>(), push);
  EXPECT_DOUBLE_EQ(s0["imbalance"]["range"]["pull"].get<double>(), pull);
  const auto [hpush, hpull] = BruteImbalance(ids0, 2, RowOwner::Hash(0x5EED, 4));
  EXPECT_DOUBLE_EQ(s0["imbalance"]["hash"]["push"].get<double>(), hpush);
  EXPECT_DOUBLE_EQ(s0["imbalance"]["hash"]["pull"].get<double>(), hpull);
  // step1: three ranks share row 5 -> gamma(4) = |{5, 6}| / 1 = 2.
  EXPECT_DOUBLE_EQ(j["tensors"][1]["gamma"][3].get<double>(), 2.0);
  // Summary: the mean of both steps.
  ASSERT_EQ(j["summary"].size(), 1u);
  EXPECT_EQ(j["summary"][0]["tensors"], 2);
  EXPECT_DOUBLE_EQ(j["summary"][0]["gamma_n"].get<double>(), (want_gamma[3] + 2.0) / 2);
  // The text report names every tensor.
  const std::string text = FormatAnalysisText(a);
  EXPECT_NE(text.find("step0.embedding  [64 x 2]"), std::string::npos) << text;
  EXPECT_NE(text.find("step1.embedding  [64 x 2]"), std::string::npos) << text;
}

}  // namespace
}  // namespace zen
