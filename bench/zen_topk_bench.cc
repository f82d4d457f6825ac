// zen_topk_bench — top-k selection by magnitude with error feedback
// (zen/core/topk.h) in GB/s of dense gradient (n x 4 bytes per call), next
// to a memcpy of the same buffer measured in the same run.
//
//   BM_Memcpy     copy of the buffer: the memory-bandwidth ceiling
//   BM_TopK       Select() on a Gaussian buffer refreshed before each call
//                 (the refresh, a memcpy, is excluded with PauseTiming)
// Arguments: method (0 exact, 1 sampled), ratio in 1/10000, n in 2^20
// elements, threads. Counters: bytes_per_second (GB/s of gradient) and, for
// sampled, selected/k (how close to k the threshold lands). On a shared
// machine, compare CPU time (exact for threads = 1) rather than real time;
// "per core" is the threads = 1 figure.
//
// Usage:
//   build/bin/zen_topk_bench --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "zen/core/topk.h"

namespace zen {
namespace {

const std::vector<float>& Gaussian(size_t n) {
  static std::vector<float> cache;
  if (cache.size() != n) {
    cache.resize(n);
    std::mt19937_64 rng(n);
    std::normal_distribution<float> g(0.0f, 1e-3f);
    for (float& x : cache) x = g(rng);
  }
  return cache;
}

void BM_Memcpy(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0)) << 20;
  const auto& src = Gaussian(n);
  std::vector<float> dst(n);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), n * sizeof(float));
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(n * sizeof(float)));
}
BENCHMARK(BM_Memcpy)->Arg(4)->Arg(16)->UseRealTime();

void BM_TopK(benchmark::State& state) {
  TopKOptions opt;
  opt.method = state.range(0) == 0 ? TopKMethod::kExact : TopKMethod::kSampled;
  const double ratio = static_cast<double>(state.range(1)) / 1e4;
  const size_t n = static_cast<size_t>(state.range(2)) << 20;
  const int threads = static_cast<int>(state.range(3));
  const auto& src = Gaussian(n);
  std::vector<float> data(src);
  const size_t k = TopKCount(n, ratio);
  std::vector<int64_t> ids(2 * k + 1);
  std::vector<float> values(2 * k + 1);
  TopKSelector sel(threads, opt);
  double selected = 0;
  for (int warm = 0; warm < 2; ++warm) {
    data = src;
    sel.Select(data, k, ids, values);
  }
  for (auto _ : state) {
    state.PauseTiming();
    std::memcpy(data.data(), src.data(), n * sizeof(float));
    state.ResumeTiming();
    selected += static_cast<double>(sel.Select(data, k, ids, values));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(n * sizeof(float)));
  state.counters["selected/k"] =
      selected / static_cast<double>(state.iterations()) / static_cast<double>(k);
}
BENCHMARK(BM_TopK)
    ->ArgNames({"method", "ratio_e4", "n_Mi", "threads"})
    ->ArgsProduct({{0, 1}, {100, 1000}, {4, 16}, {1, 2}})
    ->UseRealTime();

}  // namespace
}  // namespace zen

BENCHMARK_MAIN();
