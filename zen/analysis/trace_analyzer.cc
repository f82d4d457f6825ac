#include "zen/analysis/trace_analyzer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>
#include <ostream>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "zen/core/error.h"

namespace zen {
namespace {

// Union of all ranks' ids with, per union row, how many ranks hold it.
struct Multiplicity {
  std::vector<int64_t> ids;
  std::vector<int> count;
};

Multiplicity CountMultiplicity(RankIds ids) {
  std::vector<int64_t> all;
  size_t total = 0;
  for (const auto& r : ids) total += r.size();
  all.reserve(total);
  for (const auto& r : ids) all.insert(all.end(), r.begin(), r.end());
  std::sort(all.begin(), all.end());
  Multiplicity m;
  for (size_t i = 0; i < all.size();) {
    size_t j = i;
    while (j < all.size() && all[j] == all[i]) ++j;
    m.ids.push_back(all[i]);
    m.count.push_back(static_cast<int>(j - i));
    i = j;
  }
  return m;
}

int64_t IntersectionSize(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  int64_t n = 0;
  for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    if (a[i] < b[j]) {
      ++i;
    } else if (b[j] < a[i]) {
      ++j;
    } else {
      ++n, ++i, ++j;
    }
  }
  return n;
}

// First row of even range j of [0, rows) split into parts: ceil(j rows / parts).
int64_t RangeBegin(int64_t rows, int parts, int j) {
  const unsigned __int128 num = static_cast<unsigned __int128>(j) * static_cast<uint64_t>(rows);
  return static_cast<int64_t>((num + static_cast<uint64_t>(parts) - 1) /
                              static_cast<uint64_t>(parts));
}

double MaxOverMean(const std::vector<double>& v) {
  if (v.empty()) return 1;
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  return mean == 0 ? 1 : *std::max_element(v.begin(), v.end()) / mean;
}

double Mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

}  // namespace

std::vector<double> Densification(RankIds ids) {
  const int n = static_cast<int>(ids.size());
  std::vector<double> gamma(static_cast<size_t>(n), 1.0);
  if (n == 0) return gamma;
  const Multiplicity m = CountMultiplicity(ids);
  std::vector<int64_t> hist(static_cast<size_t>(n) + 1, 0);  // rows held by exactly c ranks
  for (int c : m.count) ++hist[static_cast<size_t>(c)];
  double total = 0;
  for (int c = 1; c <= n; ++c) total += static_cast<double>(c) * static_cast<double>(hist[c]);
  const double mean = total / n;
  if (mean == 0) return gamma;
  std::vector<double> expect(static_cast<size_t>(n), 0.0);  // E|I_S| for |S| = k (index k-1)
  for (int c = 1; c <= n; ++c) {
    if (hist[static_cast<size_t>(c)] == 0) continue;
    double miss = 1;  // C(n - c, k) / C(n, k), built up one factor per k
    for (int k = 1; k <= n; ++k) {
      miss = k > n - c ? 0.0 : miss * static_cast<double>(n - c - k + 1) / (n - k + 1);
      expect[static_cast<size_t>(k) - 1] += static_cast<double>(hist[c]) * (1 - miss);
    }
  }
  for (int k = 1; k <= n; ++k) gamma[static_cast<size_t>(k) - 1] = expect[k - 1] / mean;
  return gamma;
}

OverlapStats PairwiseOverlap(RankIds ids, int bins) {
  if (bins < 1)
    throw InvalidArgument("PairwiseOverlap: bins must be >= 1, got " + std::to_string(bins));
  OverlapStats s;
  s.histogram.assign(static_cast<size_t>(bins), 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    for (size_t j = i + 1; j < ids.size(); ++j) {
      const size_t small = std::min(ids[i].size(), ids[j].size());
      if (small == 0) {
        ++s.skipped_pairs;
        continue;
      }
      s.ratios.push_back(static_cast<double>(IntersectionSize(ids[i], ids[j])) /
                         static_cast<double>(small));
    }
  }
  if (s.ratios.empty()) return s;
  std::vector<double> sorted = s.ratios;
  std::sort(sorted.begin(), sorted.end());
  s.min = sorted.front();
  s.max = sorted.back();
  const size_t h = sorted.size() / 2;
  s.median = sorted.size() % 2 ? sorted[h] : (sorted[h - 1] + sorted[h]) / 2;
  s.mean = Mean(sorted);
  for (double r : s.ratios) {
    const int b = std::min(bins - 1, static_cast<int>(std::floor(r * bins)));
    ++s.histogram[static_cast<size_t>(b)];
  }
  return s;
}

std::vector<std::vector<int64_t>> RangeCounts(RankIds ids, int64_t rows, int parts) {
  const RowOwner owner = RowOwner::Range(rows, parts);
  std::vector<std::vector<int64_t>> counts(ids.size(), std::vector<int64_t>(parts, 0));
  for (size_t r = 0; r < ids.size(); ++r) {
    for (int64_t id : ids[r]) ++counts[r][static_cast<size_t>(owner(id))];
  }
  return counts;
}

double Skewness(std::span<const int64_t> counts, int64_t rows) {
  const int parts = static_cast<int>(counts.size());
  const int64_t nnz = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  if (nnz == 0 || parts == 0) return 0;
  double best = 0;
  for (int j = 0; j < parts; ++j) {
    const int64_t size = RangeBegin(rows, parts, j + 1) - RangeBegin(rows, parts, j);
    if (size > 0) best = std::max(best, static_cast<double>(counts[j]) / static_cast<double>(size));
  }
  return best / (static_cast<double>(nnz) / static_cast<double>(rows));
}

Imbalance PartitionImbalance(RankIds ids, int64_t width, const RowOwner& owner) {
  const int servers = owner.servers();
  const double row_bytes = static_cast<double>(width) * 4 + 8;
  Imbalance out;
  out.push_bytes.assign(static_cast<size_t>(servers), 0);
  out.pull_bytes.assign(static_cast<size_t>(servers), 0);
  for (const auto& r : ids) {
    for (int64_t id : r) out.push_bytes[static_cast<size_t>(owner(id))] += row_bytes;
  }
  const double workers = static_cast<double>(ids.size());
  for (int64_t id : CountMultiplicity(ids).ids) {
    out.pull_bytes[static_cast<size_t>(owner(id))] += row_bytes * workers;
  }
  out.push = MaxOverMean(out.push_bytes);
  out.pull = MaxOverMean(out.pull_bytes);
  return out;
}

TensorAnalysis AnalyzeTensor(const std::string& name, int64_t rows, int64_t width, RankIds ids,
                             const AnalyzerOptions& options) {
  ValidateShape(rows, width, name);
  const int n = static_cast<int>(ids.size());
  if (n < 1) throw InvalidArgument(Where{-1, name}, "needs at least one rank");
  TensorAnalysis a;
  a.name = name;
  const StepName sn = ParseStepName(name);
  a.step = sn.step;
  a.base = sn.base;
  a.rows = rows;
  a.width = width;
  int64_t total = 0;
  for (const auto& r : ids) {
    a.nnz.push_back(static_cast<int64_t>(r.size()));
    a.density.push_back(static_cast<double>(r.size()) / static_cast<double>(rows));
    total += static_cast<int64_t>(r.size());
  }
  a.mean_density = Mean(a.density);
  const Multiplicity m = CountMultiplicity(ids);
  a.union_rows = static_cast<int64_t>(m.ids.size());
  a.union_density = static_cast<double>(a.union_rows) / static_cast<double>(rows);
  a.gamma = Densification(ids);
  a.overlap = PairwiseOverlap(ids, options.overlap_bins);
  a.counts8 = RangeCounts(ids, rows, 8);
  a.counts_n = RangeCounts(ids, rows, n);
  for (const auto& c : a.counts_n) a.skewness.push_back(Skewness(c, rows));
  a.mean_skewness = Mean(a.skewness);
  const std::vector<std::vector<int64_t>> union_ids{m.ids};
  a.union_skewness = Skewness(RangeCounts(union_ids, rows, n)[0], rows);
  int64_t first = 0;
  for (const auto& c : a.counts8) first += c[0];
  a.first_of_8_share = total == 0 ? 0 : static_cast<double>(first) / static_cast<double>(total);
  a.hash = PartitionImbalance(ids, width, RowOwner::Hash(options.hash_seed, n));
  a.range = PartitionImbalance(ids, width, RowOwner::Range(rows, n));
  return a;
}

namespace {

std::vector<BaseSummary> Summarize(const std::vector<TensorAnalysis>& tensors) {
  std::vector<BaseSummary> out;  // in order of first appearance
  std::unordered_map<std::string_view, size_t> where;  // base -> position in out
  for (const TensorAnalysis& t : tensors) {
    const auto [it, added] = where.try_emplace(t.base, out.size());
    if (added) out.push_back(BaseSummary{t.base, 0, t.rows, t.width});
    BaseSummary& s = out[it->second];
    ++s.tensors;
    s.mean_density += t.mean_density;
    s.union_density += t.union_density;
    s.gamma_n += t.gamma.back();
    s.mean_skewness += t.mean_skewness;
    s.first_of_8_share += t.first_of_8_share;
    s.mean_overlap += t.overlap.mean;
    s.range_push += t.range.push;
    s.range_pull += t.range.pull;
    s.hash_push += t.hash.push;
    s.hash_pull += t.hash.pull;
  }
  for (BaseSummary& s : out) {
    for (double* v :
         {&s.mean_density, &s.union_density, &s.gamma_n, &s.mean_skewness, &s.first_of_8_share,
          &s.mean_overlap, &s.range_push, &s.range_pull, &s.hash_push, &s.hash_pull}) {
      *v /= s.tensors;
    }
  }
  return out;
}

}  // namespace

TraceAnalysis AnalyzeTrace(TraceReader& reader, const AnalyzerOptions& options) {
  TraceAnalysis out;
  out.path = reader.path();
  out.world_size = reader.world_size();
  out.options = options;
  for (const TraceTensorInfo& info : reader.tensors()) {
    std::vector<std::vector<int64_t>> ids;
    ids.reserve(static_cast<size_t>(reader.world_size()));
    for (int r = 0; r < reader.world_size(); ++r) ids.push_back(reader.ReadIds(info.name, r));
    out.tensors.push_back(AnalyzeTensor(info.name, info.rows, info.width, ids, options));
  }
  out.summary = Summarize(out.tensors);
  return out;
}

// --- JSON ------------------------------------------------------------------

namespace {

using Json = nlohmann::ordered_json;

Json ImbalanceJson(const Imbalance& im) {
  return {{"push", im.push},
          {"pull", im.pull},
          {"push_bytes", im.push_bytes},
          {"pull_bytes", im.pull_bytes}};
}

Json TensorJson(const TensorAnalysis& t) {
  const OverlapStats& o = t.overlap;
  return {{"name", t.name},
          {"step", t.step},
          {"base", t.base},
          {"rows", t.rows},
          {"width", t.width},
          {"nnz", t.nnz},
          {"density", t.density},
          {"mean_density", t.mean_density},
          {"union_rows", t.union_rows},
          {"union_density", t.union_density},
          {"gamma", t.gamma},
          {"overlap",
           {{"pairs", o.ratios.size()},
            {"skipped_pairs", o.skipped_pairs},
            {"mean", o.mean},
            {"min", o.min},
            {"median", o.median},
            {"max", o.max},
            {"histogram", o.histogram},
            {"ratios", o.ratios}}},
          {"skew",
           {{"parts", t.counts_n.empty() ? 0 : t.counts_n[0].size()},
            {"skewness", t.skewness},
            {"mean_skewness", t.mean_skewness},
            {"union_skewness", t.union_skewness},
            {"first_of_8_share", t.first_of_8_share},
            {"counts_8", t.counts8},
            {"counts_n", t.counts_n}}},
          {"imbalance", {{"hash", ImbalanceJson(t.hash)}, {"range", ImbalanceJson(t.range)}}}};
}

Json SummaryJson(const BaseSummary& s) {
  return {{"base", s.base},
          {"tensors", s.tensors},
          {"rows", s.rows},
          {"width", s.width},
          {"mean_density", s.mean_density},
          {"union_density", s.union_density},
          {"gamma_n", s.gamma_n},
          {"mean_skewness", s.mean_skewness},
          {"first_of_8_share", s.first_of_8_share},
          {"mean_overlap", s.mean_overlap},
          {"range_push", s.range_push},
          {"range_pull", s.range_pull},
          {"hash_push", s.hash_push},
          {"hash_pull", s.hash_pull}};
}

}  // namespace

namespace {

// `j.dump(1)` as a member of an array at depth 2 (the layout of the whole
// document's dump(1)): each line indented two more spaces.
void WriteNested(std::ostream& out, const Json& j) {
  const std::string text = j.dump(1);
  out << "  ";
  for (char c : text) {
    out << c;
    if (c == '\n') out << "  ";
  }
}

// A top-level array member `key` of `items`, one dump per item.
template <typename T, typename F>
void WriteArray(std::ostream& out, const char* key, const std::vector<T>& items, F&& to_json) {
  out << " " << Json(key).dump() << ": [";
  if (items.empty()) {
    out << "]";
    return;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    out << (i ? ",\n" : "\n");
    WriteNested(out, to_json(items[i]));
  }
  out << "\n ]";
}

}  // namespace

void WriteAnalysisJson(const TraceAnalysis& a, std::ostream& out) {
  // The same text as one ordered_json document's dump(1), written one
  // tensor at a time: memory does not grow with a tree of every tensor.
  Json head;
  head["trace"] = a.path;
  head["world_size"] = a.world_size;
  head["hash_seed"] = a.options.hash_seed;
  head["overlap_bins"] = a.options.overlap_bins;
  out << "{\n";
  for (const auto& [k, v] : head.items()) out << " " << Json(k).dump() << ": " << v.dump(1) << ",\n";
  WriteArray(out, "summary", a.summary, SummaryJson);
  out << ",\n";
  WriteArray(out, "tensors", a.tensors, TensorJson);
  out << "\n}\n";
}

std::string AnalysisToJson(const TraceAnalysis& a) {
  std::ostringstream out;
  WriteAnalysisJson(a, out);
  return out.str();
}

// --- text ------------------------------------------------------------------

namespace {

template <typename... Args>
void Appendf(std::string& out, const char* fmt, Args... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, args...);
  out += buf;
}

void AppendTensor(std::string& out, const TensorAnalysis& t) {
  const auto [lo, hi] = std::minmax_element(t.density.begin(), t.density.end());
  const int n = static_cast<int>(t.gamma.size());
  Appendf(out, "%s  [%lld x %lld]\n", t.name.c_str(), static_cast<long long>(t.rows),
          static_cast<long long>(t.width));
  Appendf(out, "  density per rank   min %.3f%%  mean %.3f%%  max %.3f%%\n", 100 * *lo,
          100 * t.mean_density, 100 * *hi);
  Appendf(out, "  union density      %.3f%% (%lld rows), gamma(%d) = %.2f\n", 100 * t.union_density,
          static_cast<long long>(t.union_rows), n, t.gamma.back());
  out += "  gamma(k)          ";
  for (int k = 1; k <= n; k = k < 8 ? k + 1 : k * 2) Appendf(out, " k=%d:%.2f", k, t.gamma[k - 1]);
  if (n > 8 && (n & (n - 1)) != 0) Appendf(out, " k=%d:%.2f", n, t.gamma.back());
  out += "\n";
  const OverlapStats& o = t.overlap;
  Appendf(out, "  overlap ratio      mean %.3f  min %.3f  median %.3f  max %.3f  (%zu pairs)\n",
          o.mean, o.min, o.median, o.max, o.ratios.size());
  Appendf(out,
          "  skew               %.1f%% of non-zeros in the first of 8 ranges; skewness over %d "
          "ranges: mean %.2f, union %.2f\n",
          100 * t.first_of_8_share, n, t.mean_skewness, t.union_skewness);
  Appendf(out,
          "  imbalance (max/mean bytes)  range: push %.2f pull %.2f   hash: push %.3f pull %.3f\n",
          t.range.push, t.range.pull, t.hash.push, t.hash.pull);
}

}  // namespace

void WriteAnalysisText(const TraceAnalysis& a, std::ostream& stream) {
  std::string out;
  const auto flush = [&] {
    stream << out;
    out.clear();
  };
  Appendf(out, "trace %s: %d ranks, %zu tensors\n\n", a.path.c_str(), a.world_size,
          a.tensors.size());
  for (const TensorAnalysis& t : a.tensors) {
    AppendTensor(out, t);
    out += "\n";
    if (out.size() >= (size_t{1} << 16)) flush();
  }
  out += "summary (means over tensors of one name)\n";
  Appendf(out, "%-24s %5s %10s %6s %8s %8s %8s %7s %7s %6s %6s %6s %6s\n", "tensor", "steps",
          "rows", "width", "density", "union", "gamma(n)", "skew", "first8", "r.push", "r.pull",
          "h.push", "h.pull");
  for (const BaseSummary& s : a.summary) {
    Appendf(
        out, "%-24s %5d %10lld %6lld %7.3f%% %7.2f%% %8.2f %7.2f %6.1f%% %6.2f %6.2f %6.3f %6.3f\n",
        s.base.c_str(), s.tensors, static_cast<long long>(s.rows), static_cast<long long>(s.width),
        100 * s.mean_density, 100 * s.union_density, s.gamma_n, s.mean_skewness,
        100 * s.first_of_8_share, s.range_push, s.range_pull, s.hash_push, s.hash_pull);
    if (out.size() >= (size_t{1} << 16)) flush();
  }
  flush();
}

std::string FormatAnalysisText(const TraceAnalysis& a) {
  std::ostringstream out;
  WriteAnalysisText(a, out);
  return out.str();
}

}  // namespace zen
