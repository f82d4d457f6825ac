// zen/core/topk.cc — see topk.h.
#include "zen/core/topk.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <thread>
#include <utility>

#include "zen/core/checked.h"
#include "zen/core/float_scan.h"
#include "zen/core/worker_pool.h"

namespace zen {
namespace {

// Runs body(i) for i = begin, begin + 1, ... while more(1) holds and i < end,
// except that it is run only for the values whose key is at least `low`, in
// blocks of kSkipBlock values: `body` must be a no-op for a value below
// `low`, apart from writes that later calls overwrite, and writes at most
// one slot per call; more(c) says whether there is room for c more calls.
// A block whose values at or above `low` outnumber the room left is done one
// value at a time, each call checked, and the
// scan goes on by blocks after it. Returns where it stopped. The passes that
// gather the few values above a threshold (1-2% of a gradient at ratio 1%)
// thus read each block with four vector compares and write only what they
// take.
constexpr size_t kSkipBlock = 16;  // KeysAtLeast16

template <class More, class Body>
size_t ScanAbove(const float* d, size_t begin, size_t end, uint32_t low, More more, Body body) {
  size_t i = begin;
  for (; end - i >= kSkipBlock; i += kSkipBlock) {
    uint32_t mask = KeysAtLeast16(d + i, low);
    if (mask == 0) continue;  // most blocks
    // Room for the whole block, else (rarely) for the values it takes.
    if (more(kSkipBlock) || more(static_cast<size_t>(std::popcount(mask)))) {
      for (; mask != 0; mask &= mask - 1) body(i + static_cast<size_t>(std::countr_zero(mask)));
      continue;
    }
    for (size_t j = i; j < i + kSkipBlock; ++j) {
      if (!more(1)) return j;
      body(j);
    }
  }
  for (; i < end && more(1); ++i) body(i);
  return i;
}

// Radix levels over the 31 bits of |x|: shift of each level's digit and its
// width. A key's prefix after level L is key >> kShift[L].
constexpr int kLevels = 3;
constexpr std::array<int, kLevels> kShift = {20, 9, 0};
constexpr std::array<int, kLevels> kBits = {11, 11, 9};
constexpr size_t kBuckets = size_t{1} << 11;

struct Part {
  size_t begin = 0, end = 0;
  std::array<size_t, kBuckets> hist{};
  size_t above = 0;  // selected: prefix strictly above the boundary
  size_t quota = 0;  // selected among keys with the boundary prefix
  size_t offset = 0; // first output slot
};

// Histogram of the level-`level` digit of the keys in [begin, end) whose
// prefix above that digit equals `prefix`.
void Histogram(const float* data, Part& part, int level, uint32_t prefix) {
  part.hist.fill(0);
  const int shift = kShift[level];
  const uint32_t mask = (1u << kBits[level]) - 1;
  // Two interleaved uint32 tables (L1-resident) against store-to-load
  // stalls on runs of one bucket, flushed every 2^30 elements.
  std::array<std::array<uint32_t, kBuckets>, 2> h;
  constexpr size_t kBlock = size_t{1} << 30;
  for (size_t b = part.begin; b < part.end; b += kBlock) {
    const size_t e = std::min(part.end, b + kBlock);
    h[0].fill(0);
    h[1].fill(0);
    if (level == 0) {
      size_t i = b;
      for (; i + 2 <= e; i += 2) {
        ++h[0][FloatKey(data[i]) >> shift];
        ++h[1][FloatKey(data[i + 1]) >> shift];
      }
      if (i < e) ++h[0][FloatKey(data[i]) >> shift];
    } else {
      const int above = kShift[level - 1];
      for (size_t i = b; i < e; ++i) {
        const uint32_t key = FloatKey(data[i]);
        if ((key >> above) == prefix) ++h[0][(key >> shift) & mask];
      }
    }
    for (size_t j = 0; j < kBuckets; ++j) part.hist[j] += size_t{h[0][j]} + h[1][j];
  }
}

// Writes the selected values of one part: prefix (key >> shift) above
// `prefix`, and the first part.quota ones equal to it; zeroes them in data.
// Branch-free: every element is written to the next output slot, which only
// advances when it is taken; the loop ends when the part's slots are full,
// so no write leaves them.
void Collect(float* data, const Part& part, int shift, uint32_t prefix, int64_t* ids,
             float* values) {
  const size_t first = part.offset;
  const size_t last = part.offset + part.above + part.quota;
  size_t out = first;
  size_t quota = part.quota;
  ScanAbove(
      data, part.begin, part.end, prefix << shift,
      [&](size_t room) { return last - out >= room; },
      [&](size_t i) {
        const float x = data[i];
        const uint32_t hi = FloatKey(x) >> shift;
        const size_t eq = hi == prefix;
        const size_t take =
            static_cast<size_t>(hi > prefix) | (eq & static_cast<size_t>(quota > 0));
        ids[out] = static_cast<int64_t>(i);
        values[out] = x;
        out += take;
        quota -= eq & take;
      });
  for (size_t j = first; j < last; ++j) data[static_cast<size_t>(ids[j])] = 0.0f;
}

}  // namespace

struct TopKSelector::Impl {
  explicit Impl(int threads) : pool(threads), parts(static_cast<size_t>(threads)) {}
  WorkerPool pool;  // threads - 1 workers, started by the first parallel call
  std::vector<Part> parts;
  std::vector<uint32_t> sample;
  std::vector<uint32_t> candidates, sorted;  // keys of the boundary bucket
  std::vector<int64_t> cand_ids;            // SelectExactBySample's candidates
  std::vector<float> cand_values;
  std::vector<size_t> cand_count;
  uint64_t rng = 0;

  int Split(size_t n) {
    const int count = n < kParallelMin ? 1 : pool.size();
    for (int t = 0; t < count; ++t) {
      parts[static_cast<size_t>(t)].begin = n * static_cast<size_t>(t) / static_cast<size_t>(count);
      parts[static_cast<size_t>(t)].end =
          n * static_cast<size_t>(t + 1) / static_cast<size_t>(count);
    }
    return count;
  }

  // Output offsets from above + quota, in part order (ascending indices).
  size_t Offsets(int count) {
    size_t at = 0;
    for (int t = 0; t < count; ++t) {
      Part& p = parts[static_cast<size_t>(t)];
      p.offset = at;
      at += p.above + p.quota;
    }
    return at;
  }

  uint64_t Next() {  // splitmix64
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

size_t TopKCount(size_t n, double ratio, const Where& where) {
  if (!(ratio >= 0.0 && ratio <= 1.0)) {
    throw InvalidArgument(where, "top-k ratio must lie in [0, 1], got ", ratio);
  }
  if (ratio == 0.0 || n == 0) return 0;
  // long double keeps n exact up to 2^64; the product is at most n.
  // ceil, except that a product within rounding error of an integer is that
  // integer (0.01 * 3e9 is 30000000.0000000006 in binary).
  const long double x = static_cast<long double>(n) * static_cast<long double>(ratio);
  const long double near = std::nearbyint(x);
  const long double k = std::fabs(x - near) <= x * 1e-15L ? near : std::ceil(x);
  if (k >= static_cast<long double>(n)) return n;
  return std::max<size_t>(1, static_cast<size_t>(k));
}

TopKSelector::TopKSelector(int threads, TopKOptions options)
    : threads_(CheckedThreads(threads, "TopKSelector: threads")),
      options_(options),
      impl_(std::make_unique<Impl>(threads_)) {
  impl_->rng = options_.seed;
}

TopKSelector::~TopKSelector() = default;

size_t TopKSelector::Select(std::span<float> data, size_t k, std::span<int64_t> ids,
                            std::span<float> values, const Where& where) {
  const size_t n = data.size();
  k = std::min(k, n);
  if (ids.size() != values.size()) {
    throw InvalidArgument(where, "top-k outputs differ in length: ", ids.size(), " ids, ",
                          values.size(), " values");
  }
  if (ids.size() < k) {
    throw InvalidArgument(where, "top-k outputs hold ", ids.size(), " entries, k is ", k,
                          " (of ", n, " values)");
  }
  // Indices are int64 on the wire: n itself must fit.
  if (n > static_cast<size_t>(INT64_MAX)) {
    throw InvalidArgument(where, "top-k input of ", n, " values exceeds int64 indices");
  }
  stats_ = Stats{};
  stats_.k = k;
  if (k == 0) return 0;
  if (k == n) {
    for (size_t i = 0; i < n; ++i) {
      ids[i] = static_cast<int64_t>(i);
      values[i] = data[i];
    }
    std::fill(data.begin(), data.end(), 0.0f);
    stats_.selected = n;
    return n;
  }
  if (options_.method == TopKMethod::kSampled) return SelectSampled(data, k, ids, values);
  return SelectExact(data, k, ids, values);
}

uint32_t TopKSelector::ResolveCandidates(std::span<float> data, int count, uint32_t bucket,
                                         size_t candidates, size_t need) {
  Impl& im = *impl_;
  im.candidates.resize(candidates);
  im.sorted.resize(candidates);
  size_t at = 0;
  for (int t = 0; t < count; ++t) {
    Part& p = im.parts[static_cast<size_t>(t)];
    p.offset = at;  // into candidates; Offsets() resets it for the outputs
    at += p.hist[bucket];
  }
  const float* d = data.data();
  const int shift = kShift[0];
  im.pool.Run(count, [&](int t) {
    const Part& p = im.parts[static_cast<size_t>(t)];
    uint32_t* out = im.candidates.data() + p.offset;
    size_t j = 0;
    const size_t last = p.hist[bucket];
    ScanAbove(
        d, p.begin, p.end, bucket << shift, [&](size_t room) { return last - j >= room; },
        [&](size_t i) {
          const uint32_t key = FloatKey(d[i]);
          out[j] = key;
          j += (key >> shift) == bucket;
        });
  });
  // The need-th largest candidate key is the boundary.
  std::copy(im.candidates.begin(), im.candidates.end(), im.sorted.begin());
  std::nth_element(im.sorted.begin(), im.sorted.begin() + static_cast<std::ptrdiff_t>(need - 1),
                   im.sorted.end(), std::greater<>());
  const uint32_t boundary = im.sorted[need - 1];
  size_t left = need;
  for (int t = 0; t < count; ++t) {  // above first, then ties lowest-first
    Part& p = im.parts[static_cast<size_t>(t)];
    const uint32_t* c = im.candidates.data() + p.offset;
    size_t gt = 0;
    for (size_t j = 0; j < p.hist[bucket]; ++j) gt += c[j] > boundary;
    p.above += gt;
    left -= gt;
  }
  for (int t = 0; t < count; ++t) {
    Part& p = im.parts[static_cast<size_t>(t)];
    const uint32_t* c = im.candidates.data() + p.offset;
    size_t eq = 0;
    for (size_t j = 0; j < p.hist[bucket]; ++j) eq += c[j] == boundary;
    p.quota = std::min(eq, left);
    left -= p.quota;
  }
  return boundary;
}

size_t TopKSelector::SampleSize(size_t n, size_t k) const {
  const double want = options_.sample_fraction * static_cast<double>(n);
  // At least min_sample_selected sample values above the threshold: the
  // count's relative spread is about 1 / sqrt(that).
  const long double for_k = std::ceil(static_cast<long double>(options_.min_sample_selected) *
                                      static_cast<long double>(n) / static_cast<long double>(k));
  size_t s = std::max(options_.min_sample, want > 0 ? static_cast<size_t>(want) : size_t{0});
  if (for_k < static_cast<long double>(n)) s = std::max(s, static_cast<size_t>(for_k));
  return std::clamp<size_t>(s, 1, n);
}

// The `rank`-th largest key (1-based) of a strided sample of s positions.
uint32_t TopKSelector::SampleKey(std::span<const float> data, size_t s, size_t rank) {
  Impl& im = *impl_;
  const size_t n = data.size();
  const size_t stride = n / s;
  const size_t start = static_cast<size_t>(im.Next() % stride);
  im.sample.resize(s);
  for (size_t j = 0; j < s; ++j) im.sample[j] = FloatKey(data[start + j * stride]);
  rank = std::clamp<size_t>(rank, 1, s);
  std::nth_element(im.sample.begin(), im.sample.begin() + static_cast<std::ptrdiff_t>(rank - 1),
                   im.sample.end(), std::greater<>());
  return im.sample[rank - 1];
}

// Exact top-k in one pass over data when a sample predicts the boundary: a
// threshold a little below the sample's estimate of the k-th largest |x|
// gathers about 1.3 k candidates (indices and values, in index order); the
// exact boundary is found among them. Returns false (nothing written, data
// untouched) when the candidates are fewer than k or overflow their room
// (about 2k): then the radix select runs.
// Gathers (index, value) of every |x| with key >= low into the candidate
// scratch, per part in index order, with room for about `room` in all
// (split in proportion to the parts' lengths). False when a part runs out
// of room (nothing is written to data either way).
bool TopKSelector::Gather(std::span<const float> data, int count, uint32_t low, size_t room,
                          size_t& total) {
  Impl& im = *impl_;
  const size_t n = data.size();
  size_t base = 0;
  for (int t = 0; t < count; ++t) {
    Part& p = im.parts[static_cast<size_t>(t)];
    p.offset = base;
    p.quota = room * (p.end - p.begin) / n + 256;  // reused: the part's room
    base += p.quota;
  }
  im.cand_ids.resize(base);
  im.cand_values.resize(base);
  im.cand_count.assign(static_cast<size_t>(count), 0);
  std::atomic<bool> overflow{false};
  const float* d = data.data();
  im.pool.Run(count, [&](int t) {
    const Part& p = im.parts[static_cast<size_t>(t)];
    int64_t* ci = im.cand_ids.data() + p.offset;
    float* cv = im.cand_values.data() + p.offset;
    size_t out = 0;
    const size_t stopped = ScanAbove(
        d, p.begin, p.end, low, [&](size_t room) { return p.quota - out >= room; },
        [&](size_t i) {
          const float x = d[i];
          ci[out] = static_cast<int64_t>(i);
          cv[out] = x;
          out += FloatKey(x) >= low;
        });
    im.cand_count[static_cast<size_t>(t)] = out;
    if (out == p.quota && stopped < p.end) overflow.store(true, std::memory_order_relaxed);
  });
  total = 0;
  for (int t = 0; t < count; ++t) total += im.cand_count[static_cast<size_t>(t)];
  return !overflow.load();
}

bool TopKSelector::SelectExactBySample(std::span<float> data, size_t k, std::span<int64_t> ids,
                                       std::span<float> values) {
  Impl& im = *impl_;
  const size_t n = data.size();
  // The sampled method's sample, capped at n / 32: a larger one costs more
  // than it saves. The cap (it binds below about 256 / ratio values, e.g. a
  // 320k-value embedding gradient at 1%) only widens the spread of the
  // threshold, which the margin below absorbs; a misjudged threshold falls
  // back to the radix select, so the result is exact either way.
  const size_t s = std::min(SampleSize(n, k), n / 32);
  const long double ks = static_cast<long double>(k) * s / static_cast<long double>(n);
  const size_t rank = static_cast<size_t>(std::ceil(ks * 1.3L + 3.0L * std::sqrt(ks) + 8.0L));
  if (rank >= s) return false;
  const uint32_t low = std::max<uint32_t>(SampleKey(data, s, rank), 1);
  const int count = im.Split(n);
  size_t total = 0;
  if (!Gather(data, count, low, std::min(n, 2 * k + 1024), total) || total < k) return false;

  im.sorted.resize(total);
  size_t at = 0;
  for (int t = 0; t < count; ++t) {
    const Part& p = im.parts[static_cast<size_t>(t)];
    for (size_t j = 0; j < im.cand_count[static_cast<size_t>(t)]; ++j)
      im.sorted[at++] = FloatKey(im.cand_values[p.offset + j]);
  }
  std::nth_element(im.sorted.begin(), im.sorted.begin() + static_cast<std::ptrdiff_t>(k - 1),
                   im.sorted.end(), std::greater<>());
  const uint32_t boundary = im.sorted[k - 1];
  size_t ties = k;  // k minus the candidates strictly above the boundary
  for (size_t j = 0; j < total; ++j) ties -= im.sorted[j] > boundary;
  size_t out = 0;
  for (int t = 0; t < count; ++t) {
    const Part& p = im.parts[static_cast<size_t>(t)];
    for (size_t j = 0; j < im.cand_count[static_cast<size_t>(t)]; ++j) {
      const float x = im.cand_values[p.offset + j];
      const uint32_t key = FloatKey(x);
      if (key > boundary || (key == boundary && ties > 0)) {
        if (key == boundary) --ties;
        const int64_t i = im.cand_ids[p.offset + j];
        ids[out] = i;
        values[out] = x;
        data[static_cast<size_t>(i)] = 0.0f;
        ++out;
      }
    }
  }
  stats_.selected = out;
  stats_.threshold = boundary;
  stats_.one_pass = true;
  return true;
}

size_t TopKSelector::SelectExact(std::span<float> data, size_t k, std::span<int64_t> ids,
                                 std::span<float> values) {
  Impl& im = *impl_;
  if (data.size() >= kOnePassMin && k <= data.size() / 8 &&
      SelectExactBySample(data, k, ids, values)) {
    return stats_.selected;
  }
  const int count = im.Split(data.size());
  float* d = data.data();
  uint32_t prefix = 0;  // key >> kShift[level] of the boundary bucket
  size_t need = k;      // still to take among keys with that prefix
  int level = 0;
  for (int t = 0; t < count; ++t) im.parts[static_cast<size_t>(t)].above = 0;
  for (;; ++level) {
    const uint32_t parent = prefix;
    im.pool.Run(count, [&](int t) {
      Histogram(d, im.parts[static_cast<size_t>(t)], level, parent);
    });
    std::array<size_t, kBuckets> total{};
    for (int t = 0; t < count; ++t)
      for (size_t j = 0; j < kBuckets; ++j) total[j] += im.parts[static_cast<size_t>(t)].hist[j];
    size_t above = 0;
    size_t b = kBuckets;
    while (b-- > 0) {
      if (above + total[b] >= need) break;
      above += total[b];
    }
    // b is the boundary digit: buckets above it are taken whole.
    for (int t = 0; t < count; ++t) {
      Part& p = im.parts[static_cast<size_t>(t)];
      for (size_t j = b + 1; j < kBuckets; ++j) p.above += p.hist[j];
      p.quota = p.hist[b];
    }
    need -= above;
    prefix = (parent << kBits[level]) | static_cast<uint32_t>(b);
    if (need == total[b]) break;  // the whole bucket: quotas are its counts
    if (level == 0 && total[b] <= std::max<size_t>(data.size() / 16, 4096)) {
      // A small boundary bucket: gather its keys in one pass and find the
      // exact boundary among them (3 passes over data instead of 4).
      prefix = ResolveCandidates(data, count, static_cast<uint32_t>(b), total[b], need);
      level = kLevels - 1;
      break;
    }
    if (level + 1 == kLevels) {   // equal keys: lowest indices first
      size_t left = need;
      for (int t = 0; t < count; ++t) {
        Part& p = im.parts[static_cast<size_t>(t)];
        p.quota = std::min(p.quota, left);
        left -= p.quota;
      }
      break;
    }
  }
  const size_t got = im.Offsets(count);
  const int shift = kShift[level];
  im.pool.Run(count, [&](int t) {
    Collect(d, im.parts[static_cast<size_t>(t)], shift, prefix, ids.data(), values.data());
  });
  stats_.selected = got;
  stats_.threshold = prefix << shift;
  return got;
}

size_t TopKSelector::SelectSampled(std::span<float> data, size_t k, std::span<int64_t> ids,
                                   std::span<float> values) {
  Impl& im = *impl_;
  const size_t n = data.size();
  const size_t s = SampleSize(n, k);
  // The ks-th largest key of the sample: ks / s == k / n, rounded up.
  const size_t ks = static_cast<size_t>(
      std::ceil(static_cast<long double>(k) * s / static_cast<long double>(n)));
  const uint32_t estimate = SampleKey(data, s, ks);
  // A zero threshold means more than k/n of the sample is zero: take the
  // non-zeros then, never zeros.
  const uint32_t threshold = std::max<uint32_t>(estimate, 1);
  // One pass gathers everything at or above the threshold (room: the
  // outputs); too many -> the exact selection of k.
  const int count = im.Split(n);
  size_t total = 0;
  if (!Gather(data, count, threshold, ids.size(), total) || total > ids.size()) {
    const size_t exact = SelectExact(data, k, ids, values);
    stats_.fell_back = true;
    return exact;
  }
  size_t out = 0;
  for (int t = 0; t < count; ++t) {
    const Part& p = im.parts[static_cast<size_t>(t)];
    for (size_t j = 0; j < im.cand_count[static_cast<size_t>(t)]; ++j, ++out) {
      const int64_t i = im.cand_ids[p.offset + j];
      ids[out] = i;
      values[out] = im.cand_values[p.offset + j];
      data[static_cast<size_t>(i)] = 0.0f;
    }
  }
  stats_.selected = total;
  stats_.threshold = threshold;
  return total;
}

}  // namespace zen
