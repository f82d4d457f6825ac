#include "zen/workload/synthetic.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <new>
#include <sstream>
#include <stdexcept>
#include <unordered_set>

#include "zen/core/checked.h"
#include "zen/core/error.h"

namespace zen {
namespace {

double ParseDouble(std::string_view key, std::string_view value) {
  try {
    size_t used = 0;
    double v = std::stod(std::string(value), &used);
    if (used != value.size()) throw std::invalid_argument("trailing");
    return v;
  } catch (const std::exception&) {
    throw InvalidArgument("synthetic spec: " + std::string(key) + "=" + std::string(value) +
                          " is not a number");
  }
}

int64_t ParseInt(std::string_view key, std::string_view value) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || p != value.data() + value.size()) {
    // Accept scientific notation for large sizes (rows=1e6).
    double d = ParseDouble(key, value);
    if (d != std::floor(d)) {
      throw InvalidArgument("synthetic spec: " + std::string(key) + "=" + std::string(value) +
                            " is not an integer");
    }
    // Doubles at or beyond 2^63 (1e300, inf) do not convert: UB before.
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) {
      throw InvalidArgument("synthetic spec: " + std::string(key) + "=" + std::string(value) +
                            " is outside the int64 range");
    }
    v = static_cast<int64_t>(d);
  }
  return v;
}

// A seed is any uint64 (ToString prints it so; seeds from 2^63 on must
// parse back), or a negative int64 taken modulo 2^64 as before.
uint64_t ParseSeed(std::string_view key, std::string_view value) {
  uint64_t u = 0;
  auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), u);
  if (ec == std::errc() && p == value.data() + value.size()) return u;
  return static_cast<uint64_t>(ParseInt(key, value));
}

// v.resize(n) where running out of memory is InvalidArgument naming the
// rank, the spec and the bytes, never std::bad_alloc / std::length_error.
template <typename T>
void Allocate(std::vector<T>& v, size_t n, const SyntheticSpec& spec, int rank,
              std::string_view what) {
  // Refused up front when more than the machine has: overcommit would grant
  // it, and the process would be killed when the pages are touched.
  if (const uint64_t memory = MachineMemoryBytes(); n > memory / sizeof(T)) {
    throw InvalidArgument(Where{rank, "synthetic"}, ToString(spec), ": ", what, " needs ", n,
                          " x ", sizeof(T), " bytes: more than this machine's ", memory,
                          " bytes of memory");
  }
  try {
    v.resize(n);
  } catch (const std::bad_alloc&) {
    throw InvalidArgument(Where{rank, "synthetic"}, ToString(spec), ": ", what, " needs ", n,
                          " x ", sizeof(T), " bytes: out of memory");
  } catch (const std::length_error&) {
    throw InvalidArgument(Where{rank, "synthetic"}, ToString(spec), ": ", what, " needs ", n,
                          " x ", sizeof(T), " bytes: more than a vector can hold");
  }
}

void Validate(const SyntheticSpec& s) {
  if (s.kind != "zipf") throw InvalidArgument("synthetic spec: unknown kind '" + s.kind + "'");
  ValidateShape(s.rows, s.width, "synthetic");
  if (!(s.density >= 0 && s.density <= 1)) {
    throw InvalidArgument("synthetic spec: density=" + std::to_string(s.density) +
                          " is outside [0, 1]");
  }
  if (!(s.skew >= 0)) {
    throw InvalidArgument("synthetic spec: skew=" + std::to_string(s.skew) + " must be >= 0");
  }
}

}  // namespace

SyntheticSpec ParseSyntheticSpec(std::string_view text) {
  SyntheticSpec s;
  const size_t colon = text.find(':');
  s.kind = std::string(text.substr(0, colon));
  std::string_view rest = colon == std::string_view::npos ? "" : text.substr(colon + 1);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? "" : rest.substr(comma + 1);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      throw InvalidArgument("synthetic spec: '" + std::string(item) + "' is not key=value");
    }
    std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "rows") s.rows = ParseInt(key, value);
    else if (key == "width") s.width = ParseInt(key, value);
    else if (key == "density") s.density = ParseDouble(key, value);
    else if (key == "skew") s.skew = ParseDouble(key, value);
    else if (key == "seed") s.seed = ParseSeed(key, value);
    else throw InvalidArgument("synthetic spec: unknown key '" + std::string(key) + "'");
  }
  Validate(s);
  return s;
}

std::string ToString(const SyntheticSpec& s) {
  std::ostringstream os;
  os << s.kind << ":rows=" << s.rows << ",width=" << s.width << ",density=" << s.density
     << ",skew=" << s.skew << ",seed=" << s.seed;
  return os.str();
}

namespace {

// The rows a rank holds (GenerateSyntheticRank's nnz).
int64_t SyntheticNnz(const SyntheticSpec& spec) {
  const double want = spec.density * static_cast<double>(spec.rows);
  return want >= static_cast<double>(spec.rows) ? spec.rows : std::llround(want);
}

uint64_t SaturatingMul(uint64_t a, uint64_t b) {
  uint64_t out = 0;
  return __builtin_mul_overflow(a, b, &out) ? UINT64_MAX : out;
}

uint64_t SaturatingAdd(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }


// ---- Weighted sampling without replacement in O(nnz) memory ----
//
// Row r has weight w_r = (r + 1)^-skew. Efraimidis-Spirakis: row r draws the
// key E_r / w_r with E_r ~ Exp(1), i.e. an Exp(w_r) variable, and the nnz
// smallest keys win (the same law as drawing rows one at a time with
// probability proportional to weight among those left). The first `head`
// rows (the heavy ones) get explicit keys. The tail's keys are generated in
// increasing order instead of row by row: the smallest of independent
// Exp(w_r) is Exp(sum of the w_r) and belongs to row r with probability
// proportional to w_r, and by memorylessness the next one follows from the
// rows left alike. A tail row is drawn by rejection-inversion (Hoermann and
// Derflinger 1996, exact for a discrete power law, O(1) per draw) and drawn
// again when already taken; with head >= 4 nnz the taken tail rows hold a
// small share of the tail's weight, so redraws are few. Memory: 16 bytes per
// head row plus O(nnz), whatever rows is.

// H(x) = integral of x^-s: (x^(1-s) - 1) / (1 - s), log x at s = 1.
double PowIntegral(double x, double s) {
  const double lx = std::log(x), t = (1 - s) * lx;
  return (std::abs(t) < 1e-8 ? 1 + t / 2 : std::expm1(t) / t) * lx;
}

double PowIntegralInverse(double y, double s) {
  const double t = y * (1 - s);
  return std::exp((std::abs(t) < 1e-8 ? 1 - t / 2 : std::log1p(t) / t) * y);
}

// Draws k in [first, last] (k >= 1) with probability proportional to k^-s.
class PowerLawSampler {
 public:
  PowerLawSampler(double first, double last, double s)
      : first_(first), last_(last), s_(s),
        low_(PowIntegral(first + 0.5, s) - std::pow(first, -s)),
        high_(PowIntegral(last + 0.5, s)) {}

  template <typename Rng>
  double operator()(Rng& rng) const {
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    while (true) {
      const double u = high_ + unit(rng) * (low_ - high_);
      const double x = PowIntegralInverse(u, s_);
      const double k = std::clamp(std::floor(x + 0.5), first_, last_);
      if (u >= PowIntegral(k + 0.5, s_) - std::pow(k, -s_)) return k;
    }
  }

 private:
  double first_, last_, s_, low_, high_;
};

// Sum of k^-s over [first, last]: the first 4096 terms added, the rest by
// the midpoint integral (relative error below s (s + 1) / (24 4096^2)).
double PowerSum(double first, double last, double s) {
  double sum = 0;
  double k = first;
  for (; k <= last && k < first + 4096; k += 1) sum += std::pow(k, -s);
  if (k <= last) sum += PowIntegral(last + 0.5, s) - PowIntegral(k - 0.5, s);
  return sum;
}

std::vector<int64_t> SampleRows(const SyntheticSpec& spec, int64_t nnz, int rank,
                                std::mt19937_64& rng) {
  std::exponential_distribution<double> exp1(1.0);
  const int64_t head = std::min<int64_t>(spec.rows, std::max<int64_t>(int64_t{4} * nnz, 1024));
  std::vector<std::pair<double, int64_t>> keys;  // (key, row)
  Allocate(keys, static_cast<size_t>(head), spec, rank, "the sampling keys (4 per row drawn)");
  for (int64_t r = 0; r < head; ++r) {
    keys[static_cast<size_t>(r)] = {exp1(rng) * std::pow(static_cast<double>(r + 1), spec.skew),
                                    r};
  }
  // The head's nnz-th smallest key: tail keys beyond it cannot win.
  double bound = std::numeric_limits<double>::infinity();
  if (head >= nnz) {
    std::nth_element(keys.begin(), keys.begin() + (nnz - 1), keys.end());
    bound = keys[static_cast<size_t>(nnz - 1)].first;
    keys.resize(static_cast<size_t>(nnz));
  }
  if (head < spec.rows) {
    // Rows head..rows-1 are k = row + 1 in [head + 1, rows].
    const double first = static_cast<double>(head) + 1, last = static_cast<double>(spec.rows);
    const PowerLawSampler draw(first, last, spec.skew);
    double left = PowerSum(first, last, spec.skew), key = 0;
    std::unordered_set<int64_t> taken;
    for (int64_t i = 0; i < nnz; ++i) {
      key += exp1(rng) / left;
      if (key >= bound) break;
      int64_t row = 0;
      do row = static_cast<int64_t>(draw(rng)) - 1;
      while (!taken.insert(row).second);
      left -= std::pow(static_cast<double>(row + 1), -spec.skew);
      keys.emplace_back(key, row);
    }
  }
  std::nth_element(keys.begin(), keys.begin() + (nnz - 1), keys.end());
  std::vector<int64_t> ids;
  ids.reserve(static_cast<size_t>(nnz));
  for (int64_t i = 0; i < nnz; ++i) ids.push_back(keys[static_cast<size_t>(i)].second);
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace

SparseTensor GenerateSyntheticRank(const SyntheticSpec& spec, int rank) {
  Validate(spec);
  // density x rows rounds to at most rows; for rows near 2^63 the double is
  // 2^63, which llround cannot return.
  const int64_t nnz = SyntheticNnz(spec);
  std::mt19937_64 rng(spec.seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(rank) + 1);
  std::vector<int64_t> ids;
  if (nnz >= spec.rows) {
    Allocate(ids, static_cast<size_t>(spec.rows), spec, rank, "the ids of every row");
    std::iota(ids.begin(), ids.end(), int64_t{0});
  } else if (nnz > 0) {
    ids = SampleRows(spec, nnz, rank, rng);
  }
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<float> values;
  Allocate(values,
           CheckedMul(ids.size(), static_cast<size_t>(spec.width), Where{rank, "synthetic"},
                      "synthetic values: nnz x width"),
           spec, rank, "the values");
  for (float& v : values) {
    do v = value(rng);
    while (v == 0.0f);  // a present row is never all zero, so dense paths see it
  }
  return SparseTensor::FromSorted(spec.rows, spec.width, std::move(ids), std::move(values),
                                  "synthetic");
}


uint64_t SyntheticTensorBytes(const SyntheticSpec& spec) {
  Validate(spec);
  const auto nnz = static_cast<uint64_t>(SyntheticNnz(spec));
  const uint64_t row = SaturatingAdd(sizeof(int64_t),
                                     SaturatingMul(static_cast<uint64_t>(spec.width), sizeof(float)));
  return SaturatingMul(nnz, row);
}

uint64_t SyntheticPeakBytes(const SyntheticSpec& spec) {
  // The head's keys (16 bytes each, at least 1024 and 4 per row drawn, at
  // most one per row) and the tail's taken set and keys (about 64 bytes per
  // row drawn).
  const int64_t nnz = SyntheticNnz(spec);
  const bool sampling = nnz > 0 && nnz < spec.rows;
  const uint64_t head = static_cast<uint64_t>(
      std::min<int64_t>(spec.rows, std::max<int64_t>(nnz > INT64_MAX / 4 ? INT64_MAX : 4 * nnz, 1024)));
  const uint64_t keys = SaturatingAdd(SaturatingMul(head, 16),
                                      SaturatingMul(static_cast<uint64_t>(nnz), 64));
  return SaturatingAdd(SyntheticTensorBytes(spec), sampling ? keys : 0);
}

void CheckSyntheticFits(const SyntheticSpec& spec, uint64_t tensors, uint64_t memory_bytes) {
  const uint64_t one = SyntheticTensorBytes(spec);
  const uint64_t need = SaturatingAdd(SaturatingMul(tensors, one), SyntheticPeakBytes(spec) - one);
  if (need > memory_bytes) {
    throw InvalidArgument(Where{-1, "synthetic"}, ToString(spec), ": ", tensors,
                          " tensors of ", one, " bytes (ids and values) need ",
                          need == UINT64_MAX ? std::string("more than 2^64") : std::to_string(need),
                          " bytes, more than this machine's ", memory_bytes,
                          " bytes of memory");
  }
}

uint64_t MachineMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return UINT64_MAX;
  return SaturatingMul(static_cast<uint64_t>(pages), static_cast<uint64_t>(page));
}

std::vector<SparseTensor> GenerateSynthetic(const SyntheticSpec& spec, int world) {
  CheckSyntheticFits(spec, static_cast<uint64_t>(std::max(world, 1)), MachineMemoryBytes());
  std::vector<SparseTensor> out;
  out.reserve(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) out.push_back(GenerateSyntheticRank(spec, r));
  return out;
}

}  // namespace zen
