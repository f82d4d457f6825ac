// The online profiler against the exact offline profile, its schedule, its
// documented cost, and rank agreement.
#include "zen/analysis/profiler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>

#include "zen/testing/ranks.h"
#include "zen/testing/scripted_communicator.h"
#include "zen/workload/synthetic.h"

namespace zen {
namespace {

using testing::Backend;

std::vector<WorkloadProfile> MeasureOnAllRanks(const std::vector<SparseTensor>& inputs,
                                               const ProfilerOptions& options,
                                               std::vector<uint64_t>* recv = nullptr) {
  const int n = static_cast<int>(inputs.size());
  std::vector<WorkloadProfile> out(static_cast<size_t>(n));
  if (recv) recv->assign(static_cast<size_t>(n), 0);
  testing::RunRanks(Backend::kInProc, n, [&](Communicator& comm) {
    const size_t r = static_cast<size_t>(comm.rank());
    out[r] = MeasureProfile(comm, inputs[r], options);
    if (recv) (*recv)[r] = comm.counters().total_recv();
  });
  return out;
}

TEST(ProfilerTest, ExactWhenTheSampleHoldsEverything) {
  const auto inputs = GenerateSynthetic(
      ParseSyntheticSpec("zipf:rows=10000,width=8,density=0.02,skew=1.1,seed=7"), 4);
  const WorkloadProfile exact = ProfileInputs(inputs);
  const auto online = MeasureOnAllRanks(inputs, ProfilerOptions{});
  for (const WorkloadProfile& p : online) {
    EXPECT_EQ(p.sparsity.gamma, exact.sparsity.gamma);
    EXPECT_EQ(p.sparsity.density, exact.sparsity.density);
    EXPECT_EQ(p.sparsity.skewness, exact.sparsity.skewness);
    EXPECT_EQ(p.union_row_share, exact.union_row_share);
    EXPECT_EQ(p.block_gamma_n, exact.block_gamma_n);
  }
  // Independent check of the exact profile on a hand-built case: rank 0 rows
  // {0, 1}, rank 1 rows {1, 2, 3}: union 4 over a mean of 2.5 -> gamma(2) 1.6.
  std::vector<SparseTensor> hand{SparseTensor::FromSorted(8, 1, {0, 1}, {1, 1}),
                                 SparseTensor::FromSorted(8, 1, {1, 2, 3}, {1, 1, 1})};
  const WorkloadProfile h = ProfileInputs(hand);
  EXPECT_DOUBLE_EQ(h.sparsity.density, 2.5 / 8);
  EXPECT_DOUBLE_EQ(h.sparsity.gamma[1], 1.6);
  EXPECT_DOUBLE_EQ(h.sparsity.skewness, 2.0);  // all 5 rows in the first half
  EXPECT_DOUBLE_EQ(h.row_share[0], 1.0);
}

TEST(ProfilerTest, SampledGammaIsCloseToExact) {
  const auto inputs = GenerateSynthetic(
      ParseSyntheticSpec("zipf:rows=200000,width=4,density=0.05,skew=0.8,seed=8"), 8);
  const WorkloadProfile exact = ProfileInputs(inputs);
  ProfilerOptions options;
  options.sample_ids = 1500;  // about 15% of each rank's 10000 rows
  std::vector<uint64_t> recv;
  const auto online = MeasureOnAllRanks(inputs, options, &recv);
  for (size_t k = 0; k < exact.sparsity.gamma.size(); ++k) {
    EXPECT_NEAR(online[0].sparsity.gamma[k] / exact.sparsity.gamma[k], 1.0, 0.10) << "k " << k + 1;
  }
  EXPECT_NEAR(online[0].block_gamma_n / exact.block_gamma_n, 1.0, 0.10);
  for (const auto& p : online) EXPECT_EQ(p.sparsity.gamma, online[0].sparsity.gamma);
  // Documented cost: 8 (n-1) + 8 (n-1) + sum over peers of 8 (2 + 2n + sampled).
  const int n = 8;
  for (size_t r = 0; r < recv.size(); ++r) {
    EXPECT_LE(recv[r], 16u * (n - 1) + 8u * (n - 1) * (2 + 2 * n + 2 * options.sample_ids));
    EXPECT_GE(recv[r], 16u * (n - 1) + 8u * (n - 1) * (2 + 2 * n));
  }
}

TEST(ProfilerTest, ScheduleProfilesWarmupThenEveryK) {
  ProfileSchedule s{/*warmup_calls=*/2, /*every=*/4};
  std::vector<int64_t> measured;
  for (int64_t c = 0; c < 10; ++c) {
    if (s.ShouldProfile(c)) measured.push_back(c);
  }
  EXPECT_EQ(measured, (std::vector<int64_t>{0, 1, 4, 8}));
  ProfileSchedule once{1, 0};
  EXPECT_TRUE(once.ShouldProfile(0));
  EXPECT_FALSE(once.ShouldProfile(500));

  const auto inputs = GenerateSynthetic(ParseSyntheticSpec("zipf:rows=500,width=2,density=0.1"), 2);
  std::vector<int64_t> counts(2);
  testing::RunRanks(Backend::kInProc, 2, [&](Communicator& comm) {
    ProfilerOptions options;
    options.schedule = s;
    Profiler profiler(options);
    for (int c = 0; c < 10; ++c) profiler.Observe(comm, inputs[static_cast<size_t>(comm.rank())]);
    counts[static_cast<size_t>(comm.rank())] = profiler.measurements();
  });
  EXPECT_EQ(counts, (std::vector<int64_t>{4, 4}));
}

// A peer's summary is received data: counts that lie (negative, past the
// rows, not adding up to the rows it announced) are a FormatError naming the
// peer, not signed overflow while the ranks' counts are added (a regression
// test: zen_fuzz_batch found UBSan's "signed integer overflow" in Shares).
TEST(ProfilerTest, PeerSummaryThatLiesIsFormatError) {
  const SparseTensor local =
      GenerateSyntheticRank(ParseSyntheticSpec("zipf:rows=3000,width=3,density=0.05,seed=7"), 0);
  // The summary's words, world 2: nnz, blocks, rows per range (2), blocks
  // per range (2), then the sampled ids. The peer mirrors rank 0's summary
  // with one word replaced.
  struct Lie {
    const char* what;
    size_t word;
    std::function<int64_t(const std::vector<int64_t>&)> value;
  };
  const Lie lies[] = {
      {"rows", 2, [](const auto&) { return INT64_MAX - 1; }},
      {"rows", 2, [](const auto& v) { return -v[3]; }},
      {"rows", 3, [](const auto& v) { return v[3] + 1; }},
      {"blocks", 1, [](const auto&) { return INT64_MAX; }},
      {"blocks", 4, [](const auto&) { return INT64_MAX; }},
      {"blocks", 5, [](const auto& v) { return v[5] - 1; }},
      {"announced", 0, [](const auto& v) { return v[0] - 1; }},
      {"rows, outside [0, 3000]", 0, [](const auto&) { return int64_t{3001}; }},
  };
  for (const Lie& lie : lies) {
    int lied = 0;
    testing::ScriptedComm comm([&](Tag, size_t, std::deque<ByteBuffer>& sent) {
      ByteBuffer b = std::move(sent.front());
      sent.pop_front();
      if (b.size() > sizeof(int64_t)) {  // the summary (nnz alone is one word)
        std::vector<int64_t> v(b.size() / sizeof(int64_t));
        std::memcpy(v.data(), b.data(), b.size());
        v[lie.word] = lie.value(v);
        std::memcpy(b.data(), v.data(), b.size());
        ++lied;
      }
      return b;
    });
    try {
      MeasureProfile(comm, local, ProfilerOptions{});
      ADD_FAILURE() << "a summary with word " << lie.word << " lying was accepted";
    } catch (const FormatError& e) {
      EXPECT_EQ(lied, 1);
      const std::string what = e.what();
      EXPECT_NE(what.find("from rank 1"), std::string::npos) << what;
      EXPECT_NE(what.find(lie.what), std::string::npos) << what;
    }
  }
}

TEST(ExtrapolationTest, PowerFitRecoversTheExponentAndTheCapHolds) {
  std::vector<double> g;
  for (int k = 1; k <= 8; ++k) g.push_back(std::pow(k, 0.6));
  EXPECT_NEAR(FitPower(g).beta, 0.6, 1e-12);
  EXPECT_NEAR(FitPower(g).max_rel_residual, 0, 1e-12);
  // Disjoint ranks: the union grows like k; identical ranks: not at all.
  std::vector<SparseTensor> disjoint, same;
  for (int r = 0; r < 4; ++r) {
    disjoint.push_back(SparseTensor::FromSorted(100, 1, {r * 2, r * 2 + 1}, {1, 1}));
    same.push_back(SparseTensor::FromSorted(100, 1, {5, 6}, {1, 1}));
  }
  const Extrapolation d = FitExtrapolation(disjoint), s = FitExtrapolation(same);
  EXPECT_EQ(d.gamma, (std::vector<double>{1, 2, 3, 4}));
  EXPECT_NEAR(d.rows_fit.beta, 1, 1e-12);
  EXPECT_EQ(s.gamma, (std::vector<double>{1, 1, 1, 1}));
  // Exact at n <= K (the profile of the first n ranks), capped at rows / nnz past K.
  EXPECT_EQ(d.At(3).sparsity.gamma, ProfileInputs(std::span(disjoint).first(3)).sparsity.gamma);
  const WorkloadProfile far = d.At(200);
  EXPECT_DOUBLE_EQ(far.sparsity.gamma[9], 10);
  EXPECT_DOUBLE_EQ(far.sparsity.gamma[199], 50);  // 100 rows / 2 per rank
  EXPECT_THROW(FitExtrapolation({disjoint[0]}), InvalidArgument);
}

}  // namespace
}  // namespace zen
