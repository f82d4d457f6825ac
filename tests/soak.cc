// zen_soak — thousands of synchronizations of varying size, density, width,
// entry point (sparse / dense buffer / a zen::Context batch) and scheme
// (every registered one, auto included) in one set of ranks (threads over
// real Gloo TCP), each checked on every rank against the dense reference,
// with a rejected call (ranks disagreeing on rows) mixed in regularly. With
// --engine-every K, every K-th step goes through one long-lived zen::Context
// per rank (the engine every binding uses): a batch of the step's tensor as
// a sparse sum, the same into a dense buffer, and a small dense tensor.
// Resident memory (VmRSS) is sampled; after the warm-up (the first
// --warmup-percent of the syncs, default 10) it may grow by at most
// --max-rss-growth-mb. (The engine's scheme instances are a second set
// beside the direct calls', each keeping the capacity of the largest call
// it has seen: their sum reaches its plateau later, measured 2026-12-05:
// in-use heap flat at 117-120 MiB from sync 3500 to 10000 with K = 4.)
// Built with -DZEN_SANITIZE=ON (scripts/soak) it also runs under ASan, UBSan
// and, at exit, LeakSanitizer.
//
//   zen_soak [--syncs 3000] [--world 3] [--max-rss-growth-mb 64] [--seed 1]
//            [--engine-every 0] [--warmup-percent 10]
// Exit 0 when every sync matched and memory stayed bounded; 1 otherwise.
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "zen/analysis/auto_scheme.h"
#include "zen/engine/context.h"
#include "zen/testing/ranks.h"
#include "zen/core/error.h"
#include "zen/core/reduce.h"
#include "zen/testing/reference.h"
#include "zen/workload/synthetic.h"

// A small quarantine, so that ASan's own bookkeeping does not read as growth.
extern "C" const char* __asan_default_options() { return "quarantine_size_mb=16"; }

namespace {

using Clock = std::chrono::steady_clock;

int64_t VmRssKb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return -1;
}

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

struct Step {
  std::string scheme;
  bool dense = false;
  bool reject = false;  // one rank passes rows + 1: MismatchError everywhere
  bool engine = false;  // through the ranks' zen::Context, as a batch
  zen::SyntheticSpec spec;
  std::vector<zen::SparseTensor> inputs;
  std::unique_ptr<zen::DenseReference> reference;
};

Step MakeStep(int64_t i, uint64_t seed, int world, const std::vector<std::string>& schemes,
              int64_t engine_every) {
  const uint64_t h = Mix(seed * 1000003 + static_cast<uint64_t>(i));
  static constexpr int64_t kRows[] = {1, 97, 1000, 5000, 20000};
  static constexpr int64_t kWidth[] = {1, 2, 8, 32};
  static constexpr double kDensity[] = {0, 1e-3, 0.01, 0.1, 0.5, 1};
  Step s;
  s.scheme = schemes[static_cast<size_t>(i) % schemes.size()];
  s.dense = (h >> 8) % 3 == 0;
  s.reject = i % 50 == 49;
  s.engine = engine_every > 0 && !s.reject && i % engine_every == engine_every / 2;
  s.spec.rows = kRows[(h >> 12) % 5];
  s.spec.width = kWidth[(h >> 16) % 4];
  if (s.spec.rows * s.spec.width > 200000) s.spec.width = 8;  // keep one step small
  s.spec.density = kDensity[(h >> 20) % 6];
  s.spec.skew = (h >> 24) % 2 ? 1.1 : 0;
  s.spec.seed = h;
  s.inputs = zen::GenerateSynthetic(s.spec, world);
  for (auto& t : s.inputs) t.set_name("soak");
  s.reference = std::make_unique<zen::DenseReference>(s.inputs);
  return s;
}

int64_t Flag(int argc, char** argv, const char* name, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t syncs = Flag(argc, argv, "--syncs", 3000);
  const int world = static_cast<int>(Flag(argc, argv, "--world", 3));
  const int64_t max_growth_kb = Flag(argc, argv, "--max-rss-growth-mb", 64) * 1024;
  const uint64_t seed = static_cast<uint64_t>(Flag(argc, argv, "--seed", 1));
  const std::vector<std::string> schemes = zen::AllSchemes().ids();
  const int64_t engine_every = Flag(argc, argv, "--engine-every", 0);
  const int64_t warmup =
      std::max<int64_t>(1, syncs * Flag(argc, argv, "--warmup-percent", 10) / 100);

  Step step;
  std::barrier sync_point(world);
  std::mutex mu;
  int64_t failures = 0, rejected = 0, engine = 0;
  int64_t rss_start = VmRssKb(), rss_warm = 0, rss_max = 0, rss_end = 0;
  std::map<std::string, int64_t> per_scheme;
  const auto start = Clock::now();

  zen::testing::RunRanks(
      zen::testing::Backend::kGlooTcp, world,
      [&](zen::Communicator& comm) {
        zen::SchemeOptions options;
        options.threads = 1;
        const zen::SchemeRegistry registry = zen::AllSchemes();
        std::map<std::string, std::unique_ptr<zen::Scheme>> mine;
        for (const auto& id : schemes) mine[id] = registry.Create(id, options);
        zen::ContextOptions context_options;
        context_options.scheme_options = options;
        std::optional<zen::Context> context;  // borrows comm; idle between its batches
        if (engine_every > 0) context.emplace(comm, context_options);
        const size_t r = static_cast<size_t>(comm.rank());
        for (int64_t i = 0; i < syncs; ++i) {
          if (comm.rank() == 0) {
            step = MakeStep(i, seed, world, schemes, engine_every);
            const int64_t rss = VmRssKb();
            rss_max = std::max(rss_max, rss);
            if (i == warmup) rss_warm = rss;
          }
          sync_point.arrive_and_wait();  // step is ready
          zen::Scheme& scheme = *mine[step.scheme];
          const zen::SparseTensor& local = step.inputs[r];
          std::string error;
          zen::Agreement a;
          try {
            if (step.reject && comm.rank() == 1) {
              const zen::SparseTensor taller =
                  zen::SparseTensor::Empty(local.rows() + 1, local.width(), "soak");
              scheme.Sync(comm, taller);
              error = "a mismatched call was accepted";
            } else if (step.engine) {
              zen::SparseTensor sum;
              std::vector<float> into(static_cast<size_t>(local.rows() * local.width()));
              std::vector<float> bias(5, static_cast<float>(comm.rank() + 1));
              std::vector<zen::BatchTensor> batch = {
                  zen::BatchTensor::Sparse("soak", local, &sum),
                  zen::BatchTensor::SparseInto("soak.into", local, into),
                  zen::BatchTensor::Dense("soak.bias", bias, 5, 1)};
              for (zen::BatchTensor& t : batch) t.scheme = step.scheme;
              context->Sync("soak", batch);
              a = step.reference->Compare(sum);
              const zen::Agreement b = step.reference->CompareDense(into);
              a.max_rel_error = std::max(a.max_rel_error, b.max_rel_error);
              a.rows_mismatch += b.rows_mismatch;
              const float want = static_cast<float>(world * (world + 1) / 2);
              for (const float v : bias) {
                if (v != want) error = "the batch's dense tensor summed to " + std::to_string(v);
              }
            } else if (step.dense) {
              std::vector<float> buffer = local.ToDense();
              scheme.SyncDense(comm, buffer, local.rows(), local.width(), "soak");
              a = step.reference->CompareDense(buffer);
            } else {
              a = step.reference->Compare(scheme.Sync(comm, local));
            }
            if (step.reject && error.empty()) error = "a mismatched call was accepted";
          } catch (const zen::MismatchError& e) {
            if (!step.reject) error = e.what();
          } catch (const zen::Error& e) {
            error = e.what();
          }
          if (error.empty() && !step.reject && (a.max_rel_error > 1e-5 || a.rows_mismatch != 0)) {
            error = "result differs from the reference: max_rel_error " +
                    std::to_string(a.max_rel_error) + ", rows_mismatch " +
                    std::to_string(a.rows_mismatch);
          }
          {
            std::lock_guard lock(mu);
            if (!error.empty()) {
              ++failures;
              std::fprintf(
                  stderr, "sync %lld (%s, %s, rows %lld, width %lld, density %g) rank %d: %s\n",
                  static_cast<long long>(i), step.scheme.c_str(), step.dense ? "dense" : "sparse",
                  static_cast<long long>(step.spec.rows), static_cast<long long>(step.spec.width),
                  step.spec.density, comm.rank(), error.c_str());
            }
            if (comm.rank() == 0) {
              ++per_scheme[step.scheme];
              if (step.reject) ++rejected;
              if (step.engine) ++engine;
            }
          }
          sync_point.arrive_and_wait();  // everyone is done with step
        }
      },
      std::chrono::seconds(60));
  step = Step{};
  rss_end = VmRssKb();
  rss_max = std::max(rss_max, rss_end);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf(
      "zen_soak: %lld syncs (%lld rejected on purpose, %lld through zen::Context) on %d ranks in "
      "%.1f s\n",
      static_cast<long long>(syncs), static_cast<long long>(rejected),
      static_cast<long long>(engine), world, seconds);
  for (const auto& [id, n] : per_scheme)
    std::printf("  %-12s %lld\n", id.c_str(), static_cast<long long>(n));
  std::printf(
      "VmRSS: start %lld KiB, after %lld warm-up syncs %lld KiB, end %lld KiB, max %lld KiB; "
      "growth after warm-up %lld KiB (bound %lld KiB)\n",
      static_cast<long long>(rss_start), static_cast<long long>(warmup),
      static_cast<long long>(rss_warm), static_cast<long long>(rss_end),
      static_cast<long long>(rss_max), static_cast<long long>(rss_max - rss_warm),
      static_cast<long long>(max_growth_kb));
  bool ok = failures == 0;
  if (failures)
    std::printf("FAILED: %lld rank-syncs differ or raised\n", static_cast<long long>(failures));
  if (rss_max - rss_warm > max_growth_kb) {
    std::printf("FAILED: resident memory grew by %lld KiB after the warm-up\n",
                static_cast<long long>(rss_max - rss_warm));
    ok = false;
  }
  return ok ? 0 : 1;
}
