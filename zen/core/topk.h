// zen/core/topk.h — top-k selection by magnitude with error feedback: the
// local step that turns a dense gradient into an element-sparse one (DGC).
//
// `data` is the accumulator (gradient + residual of the previous steps).
// Select() picks the k values of largest |x|, writes their indices (sorted
// ascending) and values to the outputs, and sets those positions of `data`
// to zero: what is left in `data` is the new residual (what was not sent).
// Nothing else is written; the values written out are bit-identical to the
// ones removed from `data`, so data_before == scatter(outputs) + data_after.
//
// Two methods:
//   kExact    exactly min(k, n) values: a radix select on the bit patterns
//             of |x|: a histogram of the top 11 bits; when the boundary
//             bucket holds at most n/16 values (a gradient's usual case:
//             the bucket spans 1/8 of an octave), one pass gathers its keys
//             and nth_element finds the exact boundary among them; else two
//             more histogram passes (11 + 9 bits) narrow it. Then one pass
//             collects. 3 passes over `data` (4 at most), no sort, no copy
//             of `data`; scratch of at most n/16 keys x 2, kept between calls.
//             Before that, for n >= kOnePassMin and k <= n/8, a faster path
//             is tried: a sample (as kSampled, at most n/32 positions)
//             sets a threshold a little below the k-th largest |x|, ONE
//             pass gathers the ~1.3k-1.7k values
//             above it (indices and values, room for 2k + 1024), and the
//             exact boundary is found among them; when the sample misjudged
//             (fewer than k gathered, or no room) the radix select runs.
//             Either way the result is the exact top-k.
//   kSampled  DGC's estimate: the k*s/n-th largest |x| of a strided sample
//             of s positions (random offset) is the threshold; one pass
//             gathers every |x| >= threshold (indices and values, room for
//             as many as the outputs hold), then they are written out. The
//             count lands near k: the sample is large enough that about 256 of its
//             values lie above the threshold, so the count's relative
//             spread is about 6% (within +/-20% of k in topk_test.cc on
//             Gaussian data; the benchmark's "selected/k" counter). When
//             more values than the outputs hold reach the threshold, it
//             falls back to kExact with k (the result is then exact;
//             Stats::fell_back says so).
//
// The passes that gather values above a threshold (the one-pass path's and
// the sampled method's gather, the radix select's candidate and collecting
// passes) read the values 16 at a time with a vector compare and skip a
// block none of whose values reaches the threshold (zen/core/float_scan.h):
// at ratio 1% about four blocks in five, so such a pass costs little more
// than reading the values. The radix select's histograms read every value.
//
// Ties: among equal |x| at the boundary the lowest indices win (so the
// result is deterministic and independent of the thread count). +0 and -0
// tie. NaN: |NaN| ranks above +inf (its bit pattern is larger), so a NaN is
// always selected and sent, never hidden in the residual: the synchronized
// sum turns NaN as dense allreduce would.
//
// Threads: a TopKSelector owns a small persistent worker pool (threads - 1
// workers, the caller is the last); a call wakes them, it never creates a
// thread. Scratch is kept between calls: no allocation per call in steady
// state (the sample buffer grows to its largest size once). Inputs below
// kParallelMin elements run on the calling thread. One call at a time per
// selector (not thread-safe).
//
// A CUDA backend would implement the same Select() over device spans.
//
// Usage:
//   zen::TopKSelector sel(/*threads=*/2);
//   const size_t k = zen::TopKCount(acc.size(), 0.01);
//   std::vector<int64_t> ids(k); std::vector<float> vals(k);
//   size_t got = sel.Select(acc, k, ids, vals);    // acc is now the residual
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "zen/core/error.h"

namespace zen {

enum class TopKMethod { kExact, kSampled };

struct TopKOptions {
  TopKMethod method = TopKMethod::kExact;
  // kSampled: the sample holds max(min_sample, sample_fraction * n)
  // positions (at most n).
  double sample_fraction = 0.01;
  size_t min_sample = 1024;
  // ... and at least min_sample_selected * n / k, so that that many sample
  // values lie above the threshold (relative spread of the count about
  // 1/sqrt of it: 256 -> about 6%).
  size_t min_sample_selected = 256;
  uint64_t seed = 0x5eed;  // the sample's random offset, per call
};

// ceil(ratio * n), clamped to [0, n]; 0 < ratio <= 1 selects at least one
// value of a non-empty input. InvalidArgument for a ratio outside [0, 1]
// or NaN.
size_t TopKCount(size_t n, double ratio, const Where& where = {});

class TopKSelector {
 public:
  // What the latest Select() did.
  struct Stats {
    size_t selected = 0;
    size_t k = 0;             // min(k, n) asked
    uint32_t threshold = 0;   // bit pattern of a lower bound of the |x| selected
    bool fell_back = false;   // kSampled: too many above the estimate
    bool one_pass = false;    // kExact: the sample-guided one-pass path ran
  };

  static constexpr size_t kParallelMin = size_t{1} << 16;
  // kExact tries the sample-guided one-pass path from this many values on
  // (a model's small matrices too: 8k-16k values select 3x faster that way
  // than by the radix select's three passes).
  static constexpr size_t kOnePassMin = size_t{1} << 12;

  // threads: 0 -> hardware concurrency; the pool has threads - 1 workers.
  explicit TopKSelector(int threads = 1, TopKOptions options = {});
  ~TopKSelector();
  TopKSelector(const TopKSelector&) = delete;
  TopKSelector& operator=(const TopKSelector&) = delete;

  // Selects from `data` (see above) and returns the number written to
  // ids/values: min(k, n) for kExact; for kSampled the count at or above the
  // estimated threshold (at most ids.size()). ids and values must hold at
  // least min(k, n) entries and be equally long (InvalidArgument naming
  // `where` otherwise).
  size_t Select(std::span<float> data, size_t k, std::span<int64_t> ids,
                std::span<float> values, const Where& where = {});

  const Stats& stats() const { return stats_; }
  const TopKOptions& options() const { return options_; }
  void set_options(const TopKOptions& options) { options_ = options; }
  int threads() const { return threads_; }

 private:
  struct Impl;
  size_t SelectExact(std::span<float> data, size_t k, std::span<int64_t> ids,
                     std::span<float> values);
  size_t SampleSize(size_t n, size_t k) const;
  uint32_t SampleKey(std::span<const float> data, size_t s, size_t rank);
  bool Gather(std::span<const float> data, int count, uint32_t low, size_t room, size_t& total);
  bool SelectExactBySample(std::span<float> data, size_t k, std::span<int64_t> ids,
                           std::span<float> values);
  uint32_t ResolveCandidates(std::span<float> data, int count, uint32_t bucket,
                             size_t candidates, size_t need);
  size_t SelectSampled(std::span<float> data, size_t k, std::span<int64_t> ids,
                       std::span<float> values);

  int threads_;
  TopKOptions options_;
  Stats stats_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zen
