// zen_local_bench — throughput of ZEN's local (per-rank) work on a dense
// gradient buffer, in GB/s of gradient data (rows x width x 4 bytes per
// iteration), next to a memcpy of the same buffer measured in the same run.
//
//   BM_Memcpy          copy of the buffer: the memory-bandwidth ceiling
//   BM_Extract         non-zero rows -> per-server partitions (PartitionDense)
//   BM_LocalPipeline   extract + partition, then encode every partition as
//                      the push (COO) and the pull (hash bitmap) would, and
//                      decode both back
//   BM_Permutation     the row permutation's batched inverse (0) or forward
//                      (1) over 41k element words (id above a value's bits),
//                      for row counts near and far below a power of two
//                      (where more results walk their cycle); ns per word
//   BM_RowIndex        one element-sparse message's index (COO32, bitmap,
//                      Elias-Fano): encode, parse (validation), ForEach;
//                      ns per row, at a pull's (37.5k of 512.5k positions)
//                      and a push's (5.1k) density for 4.1M rows, 8 ranks
//   BM_ResultSort      the element path's sort of a result (8 pull messages
//                      of (id, value) words, distinct ids, 212k or 400k in
//                      all, of 4.1M or 10M rows), writing ids and values:
//                      bucketed as each message is added and ranked by
//                      bucket (by_bucket 1), or the LSD radix sort after
//                      the last message (0): ms in all and ms after the
//                      last message (what a receiver waits for once its
//                      last pull is in)
// Arguments: partitioner (0 counting, 1 hierarchical), density in 1/10000,
// shape (0: 4M x 1, 1: 128K x 32), threads. 8 servers. Steady state: two
// warm-up calls precede the timed loop. On a shared machine, compare CPU
// time (exact for threads = 1) rather than real time.
//
// Usage:
//   build/bin/zen_local_bench --benchmark_filter=Extract --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>

#include "zen/core/radix_sort.h"
#include "zen/core/row_permutation.h"
#include "zen/schemes/zen/decoded_rows.h"
#include "zen/schemes/zen/hierarchical_hash.h"
#include "zen/schemes/zen/partitioner.h"
#include "zen/schemes/zen/row_codec.h"

namespace zen {
namespace {

constexpr int kServers = 8;

struct Shape {
  int64_t rows;
  int64_t width;
};
constexpr Shape kShapes[] = {{int64_t{1} << 22, 1}, {int64_t{1} << 17, 32}};

// A buffer with `density` of its rows non-zero, drawn at random (a fixed
// seed per shape and density).
const std::vector<float>& Gradient(int shape, int density_e4) {
  static std::vector<float> cache;
  static int cached_shape = -1, cached_density = -1;
  if (shape != cached_shape || density_e4 != cached_density) {
    const Shape s = kShapes[shape];
    cache.assign(static_cast<size_t>(s.rows * s.width), 0.0f);
    std::mt19937_64 rng(static_cast<uint64_t>(shape * 100000 + density_e4));
    std::bernoulli_distribution keep(density_e4 / 1e4);
    std::uniform_real_distribution<float> value(0.5f, 1.5f);
    for (int64_t r = 0; r < s.rows; ++r) {
      if (!keep(rng)) continue;
      for (int64_t k = 0; k < s.width; ++k)
        cache[static_cast<size_t>(r * s.width + k)] = value(rng);
    }
    cached_shape = shape;
    cached_density = density_e4;
  }
  return cache;
}

std::unique_ptr<Partitioner> Make(int64_t kind, int threads) {
  return MakePartitioner(kind == 0 ? "counting" : "hierarchical", threads);
}

void SetLabels(benchmark::State& state, const Partitions& p, const Shape& s) {
  state.SetBytesProcessed(state.iterations() * s.rows * s.width *
                          static_cast<int64_t>(sizeof(float)));
  state.counters["nnz"] = static_cast<double>(p.total());
}

void BM_Memcpy(benchmark::State& state) {
  const Shape s = kShapes[state.range(0)];
  const std::vector<float>& src = Gradient(static_cast<int>(state.range(0)), 100);
  std::vector<float> dst(src.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size() * sizeof(float));
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * s.rows * s.width *
                          static_cast<int64_t>(sizeof(float)));
}

void BM_Extract(benchmark::State& state) {
  const int shape = static_cast<int>(state.range(2));
  const Shape s = kShapes[shape];
  const std::vector<float>& g = Gradient(shape, static_cast<int>(state.range(1)));
  auto part = Make(state.range(0), static_cast<int>(state.range(3)));
  const RowOwner owner = RowOwner::Permuted(42, s.rows, kServers);
  Partitions p;
  // Steady state: the first call sizes the tables from a sample, the second
  // from the exact count; buffers are reused from then on.
  for (int warm = 0; warm < 2; ++warm) part->PartitionDense(g, s.rows, s.width, owner, p);
  for (auto _ : state) {
    part->PartitionDense(g, s.rows, s.width, owner, p);
    benchmark::DoNotOptimize(p.ids.data());
  }
  SetLabels(state, p, s);
  state.SetLabel(std::string(part->name()));
  if (auto* hh = dynamic_cast<HierarchicalHashPartitioner*>(part.get())) {
    state.counters["serial"] = static_cast<double>(hh->last_stats().in_serial);
    state.counters["spilled"] = static_cast<double>(hh->last_stats().spilled);
  }
}

void BM_LocalPipeline(benchmark::State& state) {
  const int shape = static_cast<int>(state.range(2));
  const Shape s = kShapes[shape];
  const std::vector<float>& g = Gradient(shape, static_cast<int>(state.range(1)));
  auto part = Make(state.range(0), static_cast<int>(state.range(3)));
  const RowOwner owner = RowOwner::Permuted(42, s.rows, kServers);
  const HashDomains domains(owner);
  Partitions p;
  std::vector<std::byte> msg;
  DecodedRows back;
  for (int warm = 0; warm < 2; ++warm) part->PartitionDense(g, s.rows, s.width, owner, p);
  for (auto _ : state) {
    part->PartitionDense(g, s.rows, s.width, owner, p);
    for (int j = 0; j < kServers; ++j) {
      const int64_t dsize = domains.size(j);
      EncodeRows(dsize, s.width, p.positions_of(j), p.values_of(j), EncodingChoice::kCoo, msg);
      DecodeRows(msg, dsize, j, s.width, Where{}, back);
      EncodeRows(dsize, s.width, p.positions_of(j), p.values_of(j), EncodingChoice::kHashBitmap,
                 msg);
      DecodeRows(msg, dsize, j, s.width, Where{}, back);
      benchmark::DoNotOptimize(back.values.data());
    }
  }
  SetLabels(state, p, s);
  state.SetLabel(std::string(part->name()));
}

void Args(benchmark::internal::Benchmark* b) {
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int shape : {0, 1}) {
    for (int density_e4 : {10, 100, 500, 2000, 5000}) {
      for (int threads : {1, hw}) {
        for (int kind : {0, 1}) b->Args({kind, density_e4, shape, threads});
        if (hw == 1) break;
      }
    }
  }
  b->ArgNames({"hier", "dens_e4", "shape", "threads"});
  b->UseRealTime();
  b->Unit(benchmark::kMillisecond);
}

void BM_Permutation(benchmark::State& state) {
  const int64_t rows = state.range(0);
  const bool forward = state.range(1) == 1;
  constexpr size_t kWords = 41000;  // one rank's top-1% of 4.1M
  const RowPermutation pi(42, rows);
  std::mt19937_64 rng(7);
  std::vector<uint64_t> words(kWords), work(kWords);
  for (uint64_t& w : words) w = (rng() % static_cast<uint64_t>(rows)) << 32 | (rng() & 0xffffffffu);
  for (auto _ : state) {
    state.PauseTiming();
    work = words;
    state.ResumeTiming();
    if (forward) {
      pi.ForwardInPlace(work, 32);
    } else {
      pi.InverseInPlace(work, 32);
    }
    benchmark::DoNotOptimize(work.data());
  }
  state.counters["ns_per_word"] = benchmark::Counter(
      static_cast<double>(kWords), benchmark::Counter::kIsIterationInvariantRate |
                                       benchmark::Counter::kInvert);
  state.counters["in_range"] =
      static_cast<double>(rows) / std::ldexp(1.0, pi.bits());
}

// One element-sparse row message (width 1) of `count` rows of a domain of
// `domain` positions (uniformly spread) in encoding `enc` (0 COO32, 1 hash
// bitmap, 2 Elias-Fano): encode (0), ParseRows with its validation (1), or
// ForEach over the parsed message (2); ns per row and the message's bytes.
void BM_RowIndex(benchmark::State& state) {
  const int64_t domain = state.range(0), want = state.range(1);
  const EncodingChoice enc = state.range(2) == 0   ? EncodingChoice::kCoo32
                             : state.range(2) == 1 ? EncodingChoice::kHashBitmap
                                                   : EncodingChoice::kEliasFano;
  const int64_t step = state.range(3);
  std::mt19937_64 rng(11);
  std::bernoulli_distribution keep(static_cast<double>(want) / static_cast<double>(domain));
  std::vector<int64_t> positions;
  for (int64_t p = 0; p < domain; ++p) {
    if (keep(rng)) positions.push_back(p);
  }
  const std::vector<float> values(positions.size(), 1.0f);
  std::vector<std::byte> msg;
  EncodeRows(domain, 1, positions, values, enc, msg);
  const RowsMessage parsed = ParseRows(msg, domain, 0, 1, Where{});
  uint64_t sink = 0;
  for (auto _ : state) {
    if (step == 0) {
      EncodeRows(domain, 1, positions, values, enc, msg);
    } else if (step == 1) {
      benchmark::DoNotOptimize(ParseRows(msg, domain, 0, 1, Where{}).count);
    } else {
      parsed.ForEach([&](size_t i, int64_t p) { sink += static_cast<uint64_t>(p) ^ i; });
    }
    benchmark::DoNotOptimize(sink);
  }
  state.counters["ns_per_row"] = benchmark::Counter(
      static_cast<double>(positions.size()),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.counters["bytes"] = static_cast<double>(msg.size());
}

void BM_ResultSort(benchmark::State& state) {
  const int64_t rows = state.range(0);
  const size_t total = static_cast<size_t>(state.range(1));
  const bool by_bucket = state.range(2) == 1;
  constexpr size_t kParts = 8;
  std::mt19937_64 rng(5);
  // Distinct ids (a pull's union is), at random, each above a value's bits.
  std::vector<uint32_t> pool(static_cast<size_t>(rows));
  std::iota(pool.begin(), pool.end(), uint32_t{0});
  std::vector<uint64_t> words(total), scratch;
  for (size_t i = 0; i < total; ++i) {
    std::swap(pool[i], pool[i + static_cast<size_t>(rng() % (pool.size() - i))]);
    words[i] = uint64_t{pool[i]} << 32 | (rng() & 0xffffffffu);
  }
  std::vector<int64_t> ids(total);
  std::vector<float> values(total);
  IncrementalWordSort sort;
  double after_last = 0;
  for (auto _ : state) {
    // Announcing more parts than the bucket starts allow takes the LSD path.
    sort.Reset(32, KeyBits(rows), by_bucket ? kParts : IncrementalWordSort::kMaxBucketStarts);
    for (size_t q = 0; q < kParts; ++q) {
      sort.Add(std::span<const uint64_t>(words).subspan(q * total / kParts, total / kParts));
    }
    const auto t0 = std::chrono::steady_clock::now();
    sort.Sort(scratch, [&](size_t i, uint64_t x) {
      ids[i] = static_cast<int64_t>(x >> 32);
      const uint32_t bits = static_cast<uint32_t>(x);
      std::memcpy(&values[i], &bits, sizeof(bits));
    });
    after_last += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    benchmark::DoNotOptimize(ids.data());
  }
  state.counters["after_last_ms"] = benchmark::Counter(
      after_last * 1e3, benchmark::Counter::kAvgIterations);
}

BENCHMARK(BM_ResultSort)
    ->Args({4100000, 212680, 0})
    ->Args({4100000, 212680, 1})
    ->Args({10000000, 400000, 0})
    ->Args({10000000, 400000, 1})
    ->ArgNames({"rows", "words", "by_bucket"})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RowIndex)
    ->ArgsProduct({{512500}, {37500, 5100}, {0, 1, 2}, {0, 1, 2}})
    ->ArgNames({"domain", "rows", "enc", "step"})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Permutation)
    ->ArgsProduct({{714120, 1048577, 4100000, int64_t{1} << 22}, {0, 1}})
    ->ArgNames({"rows", "fwd"})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Memcpy)->Arg(0)->Arg(1)->ArgName("shape")->UseRealTime()->Unit(
    benchmark::kMillisecond);
BENCHMARK(BM_Extract)->Apply(Args);
BENCHMARK(BM_LocalPipeline)->Apply(Args);

}  // namespace
}  // namespace zen

BENCHMARK_MAIN();
