// Tests of zen/core/topk.h against an independent reference: a stable sort of
// all indices by |x| (descending; NaN above everything, ties by index), on a
// copy of the input.
#include "zen/core/topk.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace zen {
namespace {

// |x| ordering of the reference: NaN > +inf > ... > 0 (+0 == -0), computed
// with float comparisons, not bit patterns.
bool Larger(float a, float b) {
  const bool na = std::isnan(a), nb = std::isnan(b);
  if (na || nb) return na && !nb;
  return std::fabs(a) > std::fabs(b);
}

struct Reference {
  std::vector<int64_t> ids;
  std::vector<float> values;
  std::vector<float> residual;
};

Reference Expected(const std::vector<float>& input, size_t k) {
  std::vector<int64_t> order(input.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return Larger(input[static_cast<size_t>(a)], input[static_cast<size_t>(b)]);
  });
  order.resize(std::min(k, input.size()));
  std::sort(order.begin(), order.end());
  Reference r{order, {}, input};
  for (int64_t i : order) {
    r.values.push_back(input[static_cast<size_t>(i)]);
    r.residual[static_cast<size_t>(i)] = 0.0f;
  }
  return r;
}

uint32_t Bits(float x) { return std::bit_cast<uint32_t>(x); }

void ExpectBitEqual(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(Bits(a[i]), Bits(b[i])) << what << " at " << i << ": " << a[i] << " vs " << b[i];
  }
}

void CheckExact(TopKSelector& sel, const std::vector<float>& input, size_t k) {
  std::vector<float> data = input;
  const size_t cap = std::min(k, input.size());
  std::vector<int64_t> ids(cap + 3, -7);
  std::vector<float> values(cap + 3, -7.0f);
  const size_t got = sel.Select(data, k, ids, values);
  const Reference ref = Expected(input, k);
  ASSERT_EQ(got, ref.ids.size()) << "n " << input.size() << " k " << k;
  ids.resize(got);
  values.resize(got);
  EXPECT_EQ(ids, ref.ids) << "n " << input.size() << " k " << k;
  ExpectBitEqual(values, ref.values, "values");
  ExpectBitEqual(data, ref.residual, "residual");
  EXPECT_EQ(sel.stats().selected, got);
}

std::vector<float> Gaussian(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = g(rng);
  return v;
}

TEST(TopK, ExactMatchesReferenceOnGaussianData) {
  for (int threads : {1, 2, 3}) {
    TopKSelector sel(threads);
    for (size_t n : {size_t{1}, size_t{7}, size_t{100}, size_t{5000}, size_t{200'003}}) {
      const auto input = Gaussian(n, n * 31 + static_cast<size_t>(threads));
      for (size_t k : {size_t{1}, size_t{2}, n / 100, n / 10, n / 2, n - 1, n}) {
        SCOPED_TRACE(testing::Message() << "threads " << threads << " n " << n << " k " << k);
        CheckExact(sel, input, k);
      }
    }
  }
}

TEST(TopK, TiesTakeTheLowestIndicesWhateverTheThreadCount) {
  std::mt19937_64 rng(5);
  const float levels[] = {-2.0f, -1.0f, -0.0f, 0.0f, 1.0f, 2.0f, 0.5f, -0.5f};
  std::vector<float> input(150'001);
  for (float& x : input) x = levels[rng() % 8];
  for (int threads : {1, 2, 4}) {
    TopKSelector sel(threads);
    for (size_t k : {size_t{1}, size_t{10}, size_t{37'000}, size_t{75'000}, size_t{149'999}}) {
      SCOPED_TRACE(testing::Message() << "threads " << threads << " k " << k);
      CheckExact(sel, input, k);
    }
  }
  // All equal (all zero): the first k.
  std::vector<float> zeros(100'000, 0.0f);
  TopKSelector sel(2);
  CheckExact(sel, zeros, 333);
}

TEST(TopK, NanRanksAboveInfinityAndIsAlwaysSent) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> input = Gaussian(100'000, 9);
  input[17] = -nan;
  input[99'000] = nan;
  input[5] = -inf;
  input[70'000] = inf;
  input[3] = std::numeric_limits<float>::denorm_min();
  TopKSelector sel(2);
  for (size_t k : {size_t{1}, size_t{2}, size_t{3}, size_t{4}, size_t{1000}}) {
    SCOPED_TRACE(k);
    CheckExact(sel, input, k);
  }
  std::vector<float> data = input;
  std::vector<int64_t> ids(2);
  std::vector<float> values(2);
  ASSERT_EQ(sel.Select(data, 2, ids, values), 2u);
  EXPECT_EQ(ids, (std::vector<int64_t>{17, 99'000}));
  EXPECT_TRUE(std::isnan(values[0]) && std::isnan(values[1]));
}

TEST(TopK, ExactOnePassPathWithTiesAndNanMatchesReference) {
  // Large enough that the sample-guided one-pass path runs (k = 1% of 1M);
  // runs of equal values and NaN/inf on the way.
  auto input = Gaussian(1'000'000, 21);
  for (size_t i = 7; i < input.size(); i += 7) input[i] = input[i - 1];
  input[123] = std::numeric_limits<float>::quiet_NaN();
  input[999'999] = -std::numeric_limits<float>::infinity();
  for (int threads : {1, 3}) {
    TopKSelector sel(threads);
    for (size_t k : {size_t{10'000}, size_t{50'000}}) {
      SCOPED_TRACE(testing::Message() << "threads " << threads << " k " << k);
      CheckExact(sel, input, k);
      EXPECT_TRUE(sel.stats().one_pass);
    }
  }
  // A parameter below 256 / ratio values (an embedding gradient of 320k
  // values at 1%): the sample is capped at n / 32 and the one-pass path
  // still runs, exactly.
  {
    const auto grad = Gaussian(320'000, 5);
    TopKSelector sel(1);
    for (size_t k : {size_t{32}, size_t{320}, size_t{3'200}}) {
      SCOPED_TRACE(testing::Message() << "320k, k " << k);
      CheckExact(sel, grad, k);
      EXPECT_TRUE(sel.stats().one_pass);
    }
  }
  // Ties over an eighth of the values: the one-pass path overflows its room
  // and the radix select gives the same exact answer.
  TopKSelector sel(2);
  std::vector<float> steps(1'000'000);
  for (size_t i = 0; i < steps.size(); ++i) steps[i] = static_cast<float>(i % 8);
  CheckExact(sel, steps, 10'000);
  EXPECT_FALSE(sel.stats().one_pass);
}

TEST(TopK, SmallLayersTakeTheOnePassPathExactly) {
  // A model's attention and feed-forward matrices (4k-16k values) select on
  // the one-pass path too; the passes skip blocks of 16 values below their
  // threshold, so large values sit at block edges, fill whole blocks and
  // end the input here, with ties among them.
  for (size_t n : {TopKSelector::kOnePassMin, size_t{8'192}, size_t{16'387}}) {
    auto input = Gaussian(n, n);
    for (size_t i = 15; i + 1 < n; i += 211) input[i] = input[i + 1] = 40.0f + (i % 3);
    for (size_t i = 1'600; i < 1'632; ++i) input[i] = -50.0f;  // two whole blocks
    input[n - 1] = 60.0f;
    TopKSelector sel(1);
    for (size_t k : {size_t{1}, n / 100, n / 100 + 7, n / 8}) {
      SCOPED_TRACE(testing::Message() << "n " << n << " k " << k);
      CheckExact(sel, input, k);
      EXPECT_TRUE(sel.stats().one_pass);
    }
  }
  // Ties at the boundary filling whole blocks early, the largest values at
  // the very end: the collecting pass meets blocks with more values at the
  // boundary than places left, and finishes one value at a time.
  for (size_t n : {size_t{4'000}, size_t{20'000}}) {
    auto input = Gaussian(n, n + 1);
    for (size_t i = 160; i < 260; ++i) input[i] = (i % 2 ? 10.0f : -10.0f);
    for (size_t i = n - 5; i < n; ++i) input[i] = 20.0f;
    TopKSelector sel(1);
    for (size_t k : {size_t{6}, size_t{50}, size_t{104}}) {
      SCOPED_TRACE(testing::Message() << "ties, n " << n << " k " << k);
      CheckExact(sel, input, k);
    }
  }
  // Below kOnePassMin the radix select runs, with the same answer.
  const auto small = Gaussian(TopKSelector::kOnePassMin - 1, 3);
  TopKSelector sel(1);
  CheckExact(sel, small, 40);
  EXPECT_FALSE(sel.stats().one_pass);
}

TEST(TopK, ZeroAllAndMoreThanAll) {
  const auto input = Gaussian(1000, 3);
  TopKSelector sel(2);
  CheckExact(sel, input, 0);
  CheckExact(sel, input, 1000);
  // k > n selects all n.
  std::vector<float> data = input;
  std::vector<int64_t> ids(1000);
  std::vector<float> values(1000);
  EXPECT_EQ(sel.Select(data, 5000, ids, values), 1000u);
  EXPECT_TRUE(std::all_of(data.begin(), data.end(), [](float x) { return x == 0.0f; }));
  // Empty input.
  std::vector<float> empty;
  EXPECT_EQ(sel.Select(empty, 3, {}, {}), 0u);
}

TEST(TopK, RejectsOutputsTooSmallOrUnequal) {
  std::vector<float> data = Gaussian(100, 1);
  std::vector<int64_t> ids(4);
  std::vector<float> values(4);
  std::vector<float> five(5);
  TopKSelector sel;
  try {
    sel.Select(data, 5, ids, values, Where{3, "fc.weight"});
    FAIL() << "no throw";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("fc.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("k is 5"), std::string::npos) << e.what();
  }
  EXPECT_THROW(sel.Select(data, 4, ids, five), InvalidArgument);
  // Nothing was written.
  ExpectBitEqual(data, Gaussian(100, 1), "data after a refused call");
}

TEST(TopK, CountRoundsUpAndHandlesHugeSizes) {
  EXPECT_EQ(TopKCount(1000, 0.01), 10u);
  EXPECT_EQ(TopKCount(1001, 0.01), 11u);
  EXPECT_EQ(TopKCount(5, 1e-9), 1u);
  EXPECT_EQ(TopKCount(5, 0.0), 0u);
  EXPECT_EQ(TopKCount(0, 0.5), 0u);
  EXPECT_EQ(TopKCount(5, 1.0), 5u);
  // Beyond int32 and near the top of size_t: no overflow, no precision loss.
  EXPECT_EQ(TopKCount(3'000'000'000ull, 0.01), 30'000'000u);
  EXPECT_EQ(TopKCount(size_t{1} << 40, 0.5), size_t{1} << 39);
  const size_t max = std::numeric_limits<size_t>::max();
  EXPECT_EQ(TopKCount(max, 1.0), max);
  EXPECT_LE(TopKCount(max, 0.5), max / 2 + 1);
  EXPECT_THROW(TopKCount(10, -0.1), InvalidArgument);
  EXPECT_THROW(TopKCount(10, 1.5), InvalidArgument);
  EXPECT_THROW(TopKCount(10, std::nan("")), InvalidArgument);
}

TEST(TopK, SampledThresholdLandsNearKAndKeepsTheOrder) {
  const size_t n = 1'000'000, k = 10'000;
  const auto input = Gaussian(n, 11);
  TopKOptions opt;
  opt.method = TopKMethod::kSampled;
  TopKSelector sel(2, opt);
  for (int call = 0; call < 8; ++call) {
    std::vector<float> data = input;
    std::vector<int64_t> ids(2 * k);
    std::vector<float> values(2 * k);
    const size_t got = sel.Select(data, k, ids, values);
    SCOPED_TRACE(testing::Message() << "call " << call << " got " << got);
    EXPECT_FALSE(sel.stats().fell_back);
    EXPECT_GE(got, k * 8 / 10);
    EXPECT_LE(got, k * 12 / 10);
    std::printf("sampled: selected/k = %.3f\n", static_cast<double>(got) / k);
    // Everything selected is at least as large as everything left, the
    // indices ascend, and selected + residual == input bit for bit.
    float smallest = INFINITY;
    for (size_t j = 0; j < got; ++j) {
      if (j > 0) {
        ASSERT_LT(ids[j - 1], ids[j]);
      }
      const size_t i = static_cast<size_t>(ids[j]);
      ASSERT_EQ(Bits(values[j]), Bits(input[i]));
      ASSERT_EQ(data[i], 0.0f);
      smallest = std::min(smallest, std::fabs(values[j]));
      data[i] = values[j];
    }
    ExpectBitEqual(data, input, "selected + residual");
    std::vector<float> residual = input;
    for (size_t j = 0; j < got; ++j) residual[static_cast<size_t>(ids[j])] = 0.0f;
    for (float x : residual) ASSERT_LT(std::fabs(x), smallest);
    // The same as the exact top-`got`.
    const Reference ref = Expected(input, got);
    std::vector<int64_t> head(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(got));
    EXPECT_EQ(head, ref.ids);
  }
}

TEST(TopK, SampledFallsBackToExactWhenTheOutputsOverflow) {
  // Half the values are 1.0: the sampled threshold is 1.0 and 50% reach it.
  std::vector<float> input(100'000, 0.25f);
  for (size_t i = 0; i < input.size(); i += 2) input[i] = 1.0f;
  TopKOptions opt;
  opt.method = TopKMethod::kSampled;
  TopKSelector sel(2, opt);
  CheckExact(sel, input, 1000);  // outputs hold 1003 < 50000: exact
  EXPECT_TRUE(sel.stats().fell_back);
}

TEST(TopK, IndicesBeyondInt32OnAHugeInput) {
  // 2^31 + 2^20 floats (8.6 GB of address space) of untouched zero pages:
  // only the pages written below use memory.
  const size_t n = (size_t{1} << 31) + (size_t{1} << 20);
  void* p = mmap(nullptr, n * sizeof(float), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) GTEST_SKIP() << "cannot reserve 8.6 GB of address space";
  std::span<float> data(static_cast<float*>(p), n);
  data[12] = 3.0f;
  data[(size_t{1} << 31) + 5] = -4.0f;
  data[n - 1] = 2.0f;
  TopKSelector sel(2);
  std::vector<int64_t> ids(2);
  std::vector<float> values(2);
  ASSERT_EQ(sel.Select(data, 2, ids, values), 2u);
  EXPECT_EQ(ids, (std::vector<int64_t>{12, (int64_t{1} << 31) + 5}));
  EXPECT_EQ(values, (std::vector<float>{3.0f, -4.0f}));
  EXPECT_EQ(data[(size_t{1} << 31) + 5], 0.0f);
  EXPECT_EQ(data[n - 1], 2.0f);
  munmap(p, n * sizeof(float));
}

}  // namespace
}  // namespace zen
