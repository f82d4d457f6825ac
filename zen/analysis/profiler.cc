#include "zen/analysis/profiler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>

#include "zen/comm/collectives.h"
#include "zen/comm/peer_pattern.h"
#include "zen/core/checked.h"
#include "zen/core/error.h"
#include "zen/core/hash.h"
#include "zen/schemes/omnireduce.h"

namespace zen {
namespace {

// Blocks [first, last] that row id touches.
std::pair<int64_t, int64_t> BlocksOfRow(int64_t id, int64_t width, int64_t block_values) {
  return {id * width / block_values, ((id + 1) * width - 1) / block_values};
}

// Sorted unique blocks touched by sorted ids.
std::vector<int64_t> BlocksOf(std::span<const int64_t> ids, int64_t width, int64_t block_values) {
  std::vector<int64_t> out;
  for (int64_t id : ids) {
    const auto [b0, b1] = BlocksOfRow(id, width, block_values);
    for (int64_t b = out.empty() ? b0 : std::max(b0, out.back() + 1); b <= b1; ++b)
      out.push_back(b);
  }
  return out;
}

// Counts of sorted values in each range [bounds[o], bounds[o + 1]).
std::vector<int64_t> CountPerRange(std::span<const int64_t> sorted,
                                   const std::vector<int64_t>& bounds) {
  std::vector<int64_t> out(bounds.size() - 1);
  for (size_t o = 0; o + 1 < bounds.size(); ++o) {
    out[o] = std::lower_bound(sorted.begin(), sorted.end(), bounds[o + 1]) -
             std::lower_bound(sorted.begin(), sorted.end(), bounds[o]);
  }
  return out;
}

// Fractions of counts (or of range sizes when all counts are zero). The
// counts are added as doubles: the ranks' counts together may pass int64.
template <typename Count>
std::vector<double> Shares(const std::vector<Count>& counts, const std::vector<int64_t>& bounds) {
  double total = 0;
  for (const Count c : counts) total += static_cast<double>(c);
  std::vector<double> out(counts.size());
  const double span = static_cast<double>(bounds.back() - bounds.front());
  for (size_t o = 0; o < counts.size(); ++o) {
    out[o] = total > 0 ? static_cast<double>(counts[o]) / total
                       : static_cast<double>(bounds[o + 1] - bounds[o]) / std::max(1.0, span);
  }
  return out;
}

std::vector<int64_t> Union(const std::vector<int64_t>& a, std::span<const int64_t> b) {
  std::vector<int64_t> out;
  out.reserve(a.size() + b.size());
  std::set_union(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

std::vector<int64_t> Serialize(const RankSummary& s) {
  std::vector<int64_t> out{s.nnz, s.blocks};
  out.insert(out.end(), s.range_rows.begin(), s.range_rows.end());
  out.insert(out.end(), s.range_blocks.begin(), s.range_blocks.end());
  out.insert(out.end(), s.sampled_ids.begin(), s.sampled_ids.end());
  return out;
}

// A peer's summary, checked against what it must hold: its nnz as it
// announced in the count round, counts that are non-negative and add up
// (rows per range to nnz, blocks per range to blocks, blocks at most
// `block_count`), sampled ids increasing inside [0, rows), at most nnz of
// them. A lie is a FormatError naming the peer (its counts are added to the
// other ranks' after this).
RankSummary Deserialize(std::span<const std::byte> bytes, int n, int64_t rows,
                        int64_t announced_nnz, int64_t block_count, const Where& where,
                        int sender) {
  const size_t head = 2 + 2 * static_cast<size_t>(n);
  if (bytes.size() % sizeof(int64_t) != 0 || bytes.size() / sizeof(int64_t) < head) {
    throw FormatError(where, "profile summary from rank ", sender, " has ", bytes.size(),
                      " bytes; expected at least ", head * sizeof(int64_t));
  }
  std::vector<int64_t> v(bytes.size() / sizeof(int64_t));
  std::memcpy(v.data(), bytes.data(), bytes.size());
  RankSummary s;
  s.nnz = v[0];
  s.blocks = v[1];
  s.range_rows.assign(v.begin() + 2, v.begin() + 2 + n);
  s.range_blocks.assign(v.begin() + 2 + n, v.begin() + static_cast<std::ptrdiff_t>(head));
  s.sampled_ids.assign(v.begin() + static_cast<std::ptrdiff_t>(head), v.end());
  if (s.nnz < 0 || s.nnz > rows) {
    throw FormatError(where, "profile summary from rank ", sender, " holds ", s.nnz,
                      " rows, outside [0, ", rows, "]");
  }
  if (s.nnz != announced_nnz) {
    throw FormatError(where, "profile summary from rank ", sender, " holds ", s.nnz,
                      " rows, but the rank announced ", announced_nnz, " in the count round");
  }
  if (s.blocks < 0 || s.blocks > block_count) {
    throw FormatError(where, "profile summary from rank ", sender, " holds ", s.blocks,
                      " blocks, outside [0, ", block_count, "]");
  }
  // Each range's count in [0, total], and the counts add up to total.
  auto check_ranges = [&](const std::vector<int64_t>& counts, int64_t total, const char* what) {
    int64_t sum = 0;
    for (size_t o = 0; o < counts.size(); ++o) {
      if (counts[o] < 0 || counts[o] > total || !TryAdd(sum, counts[o], sum) || sum > total) {
        throw FormatError(where, "profile summary from rank ", sender, " counts ", counts[o], " ",
                          what, " in range ", o, "; its ranges must count its ", total, " ", what,
                          " once each");
      }
    }
    if (sum != total) {
      throw FormatError(where, "profile summary from rank ", sender, " counts ", sum, " ", what,
                        " over its ranges, not its ", total, " ", what);
    }
  };
  check_ranges(s.range_rows, s.nnz, "rows");
  check_ranges(s.range_blocks, s.blocks, "blocks");
  if (s.sampled_ids.size() > static_cast<size_t>(s.nnz)) {
    throw FormatError(where, "profile summary from rank ", sender, " samples ",
                      s.sampled_ids.size(), " ids of its ", s.nnz, " rows");
  }
  for (size_t i = 0; i < s.sampled_ids.size(); ++i) {
    const int64_t id = s.sampled_ids[i];
    if (id < 0 || id >= rows || (i > 0 && id <= s.sampled_ids[i - 1])) {
      throw FormatError(where, "profile summary from rank ", sender, " holds sampled id ", id,
                        " at position ", i, ": ids must be increasing and inside [0, ", rows, ")");
    }
  }
  return s;
}

}  // namespace

bool ProfileSchedule::ShouldProfile(int64_t call) const {
  if (call < warmup_calls) return true;
  return every > 0 && call % every == 0;
}

RankSummary Summarize(const SparseTensor& t, int n, int64_t block_values, double fraction,
                      uint64_t seed) {
  RankSummary s;
  const auto ids = t.ids();
  s.nnz = static_cast<int64_t>(ids.size());
  s.range_rows = CountPerRange(ids, BalancedChunkBounds(t.rows(), n));
  const std::vector<int64_t> blocks = BlocksOf(ids, t.width(), block_values);
  s.blocks = static_cast<int64_t>(blocks.size());
  const int64_t nb = OmniBlockCount(t.rows(), t.width(), block_values);
  s.range_blocks = CountPerRange(blocks, BalancedChunkBounds(nb, n));
  if (fraction >= 1) {
    s.sampled_ids.assign(ids.begin(), ids.end());
    return s;
  }
  const UniversalHash hash(seed, 2);
  const auto threshold = static_cast<uint64_t>(fraction * static_cast<double>(kHashPrime));
  for (int64_t id : ids) {
    const uint64_t unit = static_cast<uint64_t>(id * t.width() / block_values);
    if (hash.Raw(unit % kHashPrime) < threshold) s.sampled_ids.push_back(id);
  }
  return s;
}

WorkloadProfile CombineSummaries(std::span<const RankSummary> ranks, int64_t rows, int64_t width,
                                 int64_t block_values) {
  const int n = static_cast<int>(ranks.size());
  if (n < 1) throw InvalidArgument("CombineSummaries needs at least one rank");
  WorkloadProfile p;
  SparsityProfile& s = p.sparsity;
  s.world_size = n;
  s.rows = rows;
  s.width = width;
  p.block_values = block_values;
  const std::vector<int64_t> row_bounds = BalancedChunkBounds(rows, n);
  const int64_t nb = OmniBlockCount(rows, width, block_values);
  const std::vector<int64_t> block_bounds = BalancedChunkBounds(nb, n);

  // Added as doubles: n ranks' counts of up to `rows` each may pass int64.
  double nnz = 0, blocks = 0;
  std::vector<double> range_rows(static_cast<size_t>(n), 0);
  std::vector<double> range_blocks(static_cast<size_t>(n), 0);
  for (const RankSummary& r : ranks) {
    nnz += static_cast<double>(r.nnz);
    blocks += static_cast<double>(r.blocks);
    for (size_t o = 0; o < static_cast<size_t>(n); ++o) {
      range_rows[o] += static_cast<double>(r.range_rows[o]);
      range_blocks[o] += static_cast<double>(r.range_blocks[o]);
    }
  }
  s.density = nnz / n / static_cast<double>(rows);
  p.block_density = blocks / n / static_cast<double>(nb);
  p.row_share = Shares(range_rows, row_bounds);
  p.block_share = Shares(range_blocks, block_bounds);
  s.skewness = 0;
  for (int o = 0; o < n; ++o) {
    const double size = static_cast<double>(row_bounds[static_cast<size_t>(o) + 1] -
                                            row_bounds[static_cast<size_t>(o)]);
    if (size > 0)
      s.skewness = std::max(s.skewness,
                            p.row_share[static_cast<size_t>(o)] * static_cast<double>(rows) / size);
  }

  // gamma(k) = |union of samples of ranks < k| / mean sample size of ranks < k.
  std::vector<int64_t> united;
  double sampled = 0, sampled_blocks = 0;
  s.gamma.clear();
  std::vector<int64_t> united_blocks;
  for (int k = 1; k <= n; ++k) {
    const RankSummary& r = ranks[static_cast<size_t>(k - 1)];
    united = Union(united, r.sampled_ids);
    sampled += static_cast<double>(r.sampled_ids.size());
    const std::vector<int64_t> rb = BlocksOf(r.sampled_ids, width, block_values);
    united_blocks = Union(united_blocks, rb);
    sampled_blocks += static_cast<double>(rb.size());
    s.gamma.push_back(sampled > 0 ? static_cast<double>(united.size()) / (sampled / k) : 1.0);
  }
  s.gamma[0] = 1;
  p.union_row_share = Shares(CountPerRange(united, row_bounds), row_bounds);
  p.block_gamma_n =
      sampled_blocks > 0 ? static_cast<double>(united_blocks.size()) / (sampled_blocks / n) : 1.0;
  p.union_block_share = Shares(CountPerRange(united_blocks, block_bounds), block_bounds);
  return p;
}

WorkloadProfile ProfileInputs(std::span<const SparseTensor> per_rank, int64_t block_values) {
  if (per_rank.empty()) throw InvalidArgument("ProfileInputs needs at least one tensor");
  const int n = static_cast<int>(per_rank.size());
  std::vector<RankSummary> summaries;
  for (const SparseTensor& t : per_rank) {
    if (t.rows() != per_rank[0].rows() || t.width() != per_rank[0].width()) {
      throw InvalidArgument(Where{-1, t.name()}, "ProfileInputs: shape [", t.rows(), ", ",
                            t.width(), "] differs from [", per_rank[0].rows(), ", ",
                            per_rank[0].width(), "]");
    }
    summaries.push_back(Summarize(t, n, block_values, 1.0, 0));
  }
  return CombineSummaries(summaries, per_rank[0].rows(), per_rank[0].width(), block_values);
}

WorkloadProfile MeasureProfile(Communicator& comm, const SparseTensor& local,
                               const ProfilerOptions& options) {
  const int n = comm.size();
  const std::vector<int64_t> nnz = AllGatherInt(comm, static_cast<int64_t>(local.nnz()));
  const int64_t max_nnz = *std::max_element(nnz.begin(), nnz.end());
  const double fraction = max_nnz <= options.sample_ids ? 1.0
                                                        : static_cast<double>(options.sample_ids) /
                                                              static_cast<double>(max_nnz);
  const RankSummary mine = Summarize(local, n, options.block_values, fraction, options.seed);
  const std::vector<int64_t> wire = Serialize(mine);
  // A summary holds 2 + 2n counts and at most every row id (bounds what a
  // peer may announce).
  // 2 + 2n + rows wrapped for rows near 2^63 (a 40-byte bound: auto failed).
  int64_t words = 0;
  const bool fits = TryAdd(2 + 2 * int64_t{n}, local.rows(), words) && words <= INT64_MAX / 8;
  const int64_t bound = fits ? words * 8 : INT64_MAX;
  const std::vector<ByteBuffer> all = AllGatherV(comm, AsBytes(wire), bound);
  std::vector<RankSummary> ranks;
  const Where where{comm.rank(), local.name()};
  const int64_t block_count = OmniBlockCount(local.rows(), local.width(), options.block_values);
  for (int q = 0; q < n; ++q) {
    const size_t uq = static_cast<size_t>(q);
    ranks.push_back(q == comm.rank() ? mine
                                     : Deserialize(all[uq], n, local.rows(), nnz[uq], block_count,
                                                   where, q));
  }
  return CombineSummaries(ranks, local.rows(), local.width(), options.block_values);
}

bool Profiler::Observe(Communicator& comm, const SparseTensor& local) {
  const bool measure = options_.schedule.ShouldProfile(calls_);
  ++calls_;
  if (!measure) return false;
  profile_ = MeasureProfile(comm, local, options_);
  has_profile_ = true;
  ++measurements_;
  return true;
}

}  // namespace zen

// ---- Extrapolation ----

namespace zen {
namespace {

template <typename Key>
std::vector<double> GrowthCurve(std::span<const SparseTensor> ranks, Key key) {
  const size_t n = ranks.size();
  std::vector<std::vector<int64_t>> items;
  for (const auto& t : ranks) items.push_back(key(t));
  std::vector<double> gamma(n, 0.0);
  for (size_t s = 0; s < n; ++s) {
    std::vector<int64_t> u;
    double total = 0;
    for (size_t k = 1; k <= n; ++k) {
      const auto& next = items[(s + k - 1) % n];
      std::vector<int64_t> merged;
      std::set_union(u.begin(), u.end(), next.begin(), next.end(), std::back_inserter(merged));
      u.swap(merged);
      total += static_cast<double>(next.size());
      gamma[k - 1] +=
          total > 0 ? static_cast<double>(u.size()) / (total / static_cast<double>(k)) : 1;
    }
  }
  for (double& g : gamma) g /= static_cast<double>(n);
  return gamma;
}

std::vector<int64_t> BlocksOf(const SparseTensor& t, int64_t block_values) {
  std::vector<int64_t> out;
  for (int64_t id : t.ids()) {
    const int64_t b0 = id * t.width() / block_values,
                  b1 = ((id + 1) * t.width() - 1) / block_values;
    for (int64_t b = out.empty() ? b0 : std::max(b0, out.back() + 1); b <= b1; ++b)
      out.push_back(b);
  }
  return out;
}

}  // namespace

std::vector<double> RowGrowthCurve(std::span<const SparseTensor> ranks) {
  return GrowthCurve(ranks, [](const SparseTensor& t) {
    return std::vector<int64_t>(t.ids().begin(), t.ids().end());
  });
}

std::vector<double> BlockGrowthCurve(std::span<const SparseTensor> ranks, int64_t block_values) {
  return GrowthCurve(ranks, [&](const SparseTensor& t) { return BlocksOf(t, block_values); });
}

double PowerFit::At(double k) const { return std::pow(k, beta); }

PowerFit FitPower(std::span<const double> gamma) {
  PowerFit f;
  double sxy = 0, sxx = 0;
  for (size_t k = 2; k <= gamma.size(); ++k) {
    const double x = std::log(static_cast<double>(k)), y = std::log(std::max(gamma[k - 1], 1e-12));
    sxy += x * y;
    sxx += x * x;
  }
  f.beta = sxx > 0 ? std::clamp(sxy / sxx, 0.0, 1.0) : 1.0;
  for (size_t k = 1; k <= gamma.size(); ++k) {
    f.max_rel_residual = std::max(
        f.max_rel_residual, std::abs(f.At(static_cast<double>(k)) - gamma[k - 1]) / gamma[k - 1]);
  }
  return f;
}

WorkloadProfile Extrapolation::At(int world) const {
  if (Exact(world)) {
    return ProfileInputs(std::span<const SparseTensor>(ranks.data(), static_cast<size_t>(world)),
                         block_values);
  }
  // Range statistics at `world` ranges from the K measured ranks (their
  // copies carry no ids, so the union is the measured ranks' union).
  std::vector<RankSummary> s;
  for (const auto& t : ranks) s.push_back(Summarize(t, world, block_values, 1.0, 0));
  const size_t k = ranks.size();
  for (size_t i = k; i < static_cast<size_t>(world); ++i) {
    RankSummary copy = s[i % k];
    copy.sampled_ids.clear();
    s.push_back(std::move(copy));
  }
  WorkloadProfile p = CombineSummaries(s, ranks[0].rows(), ranks[0].width(), block_values);
  const double cap = p.sparsity.density > 0 ? 1 / p.sparsity.density : 1;
  for (int j = 1; j <= world; ++j) {
    p.sparsity.gamma[static_cast<size_t>(j - 1)] = std::min(rows_fit.At(j), cap);
  }
  const double block_cap = p.block_density > 0 ? 1 / p.block_density : 1;
  p.block_gamma_n = std::min(blocks_fit.At(world), block_cap);
  return p;
}

Extrapolation FitExtrapolation(std::vector<SparseTensor> ranks, int64_t block_values) {
  if (ranks.size() < 2) {
    throw InvalidArgument(Where{}, "extrapolation needs at least 2 measured ranks, got ",
                          ranks.size());
  }
  Extrapolation x;
  x.ranks = std::move(ranks);
  x.block_values = block_values;
  x.gamma = RowGrowthCurve(x.ranks);
  x.block_gamma = BlockGrowthCurve(x.ranks, block_values);
  x.rows_fit = FitPower(x.gamma);
  x.blocks_fit = FitPower(x.block_gamma);
  return x;
}

}  // namespace zen
