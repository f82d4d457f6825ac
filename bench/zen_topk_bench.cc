// zen_topk_bench — top-k selection by magnitude with error feedback
// (zen/core/topk.h) in GB/s of dense gradient (n x 4 bytes per call), next
// to a memcpy of the same buffer measured in the same run.
//
//   BM_Memcpy     copy of the buffer: the memory-bandwidth ceiling
//   BM_TopK       Select() on a Gaussian buffer refreshed before each call
//                 (the refresh, a memcpy, is excluded with PauseTiming)
//   BM_TopKLayer  the same on one layer-sized buffer (n = 320,000 values)
// Arguments: method (0 exact, 1 sampled), ratio in 1/10000, n in 2^20
// elements (BM_TopKLayer: in elements), threads. Counters: bytes_per_second (GB/s of gradient, wall
// clock), GBps_per_core (gradient bytes per CPU-second of all the process's
// threads: the per-core figure, unaffected by other load on a shared
// machine; workers block, they do not spin) and selected/k (how close to k
// the sampled threshold lands).
//
// Usage:
//   build/bin/zen_topk_bench --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <cstring>
#include <ctime>
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

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void BM_Memcpy(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0)) << 20;
  const auto& src = Gaussian(n);
  std::vector<float> dst(n);
  double cpu = 0;
  for (auto _ : state) {
    const double c0 = ProcessCpuSeconds();
    std::memcpy(dst.data(), src.data(), n * sizeof(float));
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
    cpu += ProcessCpuSeconds() - c0;
  }
  state.counters["GBps_per_core"] = static_cast<double>(state.iterations()) *
                                    static_cast<double>(n * sizeof(float)) / cpu / 1e9;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(n * sizeof(float)));
}
BENCHMARK(BM_Memcpy)->Arg(4)->Arg(16)->UseRealTime();

// Arguments 0, 1 and 3 of both benchmarks below: method, ratio, threads.
void RunTopK(benchmark::State& state, size_t n) {
  TopKOptions opt;
  opt.method = state.range(0) == 0 ? TopKMethod::kExact : TopKMethod::kSampled;
  const double ratio = static_cast<double>(state.range(1)) / 1e4;
  const int threads = static_cast<int>(state.range(3));
  const auto& src = Gaussian(n);
  std::vector<float> data(src);
  const size_t k = TopKCount(n, ratio);
  std::vector<int64_t> ids(2 * k + 1);
  std::vector<float> values(2 * k + 1);
  TopKSelector sel(threads, opt);
  double selected = 0, cpu = 0;
  for (int warm = 0; warm < 2; ++warm) {
    data = src;
    sel.Select(data, k, ids, values);
  }
  for (auto _ : state) {
    state.PauseTiming();
    std::memcpy(data.data(), src.data(), n * sizeof(float));
    state.ResumeTiming();
    const double c0 = ProcessCpuSeconds();
    selected += static_cast<double>(sel.Select(data, k, ids, values));
    cpu += ProcessCpuSeconds() - c0;
  }
  // Gradient bytes per CPU-second of all the process's threads: the per-core
  // figure, unaffected by other load on a shared machine.
  state.counters["GBps_per_core"] = static_cast<double>(state.iterations()) *
                                    static_cast<double>(n * sizeof(float)) / cpu / 1e9;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(n * sizeof(float)));
  state.counters["selected/k"] =
      selected / static_cast<double>(state.iterations()) / static_cast<double>(k);
}
void BM_TopK(benchmark::State& state) { RunTopK(state, static_cast<size_t>(state.range(2)) << 20); }
BENCHMARK(BM_TopK)
    ->ArgNames({"method", "ratio_e4", "n_Mi", "threads"})
    ->ArgsProduct({{0, 1}, {100, 1000}, {4, 16}, {1, 2}})
    ->UseRealTime();

// One layer of a real model (320,000 values: a 5000 x 64 embedding or
// output layer of examples/train_topk.py; 8,192 and 16,384: its attention
// and feed-forward matrices), where a call's fixed costs (the sample, the
// boundary search) weigh against one pass over the values.
void BM_TopKLayer(benchmark::State& state) { RunTopK(state, static_cast<size_t>(state.range(2))); }
BENCHMARK(BM_TopKLayer)
    ->ArgNames({"method", "ratio_e4", "n", "threads"})
    ->ArgsProduct({{0, 1}, {100}, {8'192, 16'384, 320'000}, {1}})
    ->UseRealTime();

}  // namespace
}  // namespace zen

BENCHMARK_MAIN();
