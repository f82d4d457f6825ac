#include "tools/zen/bench_sweep.h"

#include <cmath>
#include <cstdio>

#include "zen/core/error.h"

namespace zen::cli {
namespace {

struct Range {
  double from, to, factor;
};

Range ParseRange(const std::string& text) {
  const std::vector<std::string> parts = [&] {
    std::vector<std::string> out;
    size_t start = 0;
    while (true) {
      const size_t colon = text.find(':', start);
      out.push_back(text.substr(start, colon == std::string::npos ? std::string::npos : colon - start));
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
    return out;
  }();
  if (parts.size() != 3) throw UsageError("--sweep-range " + text + ": expected FROM:TO:FACTOR");
  Range r{};
  double* fields[] = {&r.from, &r.to, &r.factor};
  for (size_t i = 0; i < 3; ++i) {
    size_t used = 0;
    try {
      *fields[i] = std::stod(parts[i], &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != parts[i].size() || !std::isfinite(*fields[i])) {
      throw UsageError("--sweep-range " + text + ": '" + parts[i] + "' is not a number");
    }
  }
  if (!(r.from > 0 && r.to >= r.from && r.factor > 1)) {
    throw UsageError("--sweep-range " + text + ": needs 0 < FROM <= TO and FACTOR > 1");
  }
  return r;
}

}  // namespace

std::vector<SyntheticSpec> SweepPoints(const Flags& flags) {
  const auto kind = flags.Get("sweep");
  if (!kind) {
    if (flags.Has("sweep-range")) throw UsageError("--sweep-range needs --sweep rows|density");
    return {};
  }
  if (*kind != "rows" && *kind != "density") {
    throw UsageError("--sweep " + *kind + ": expected rows or density");
  }
  if (flags.Has("trace")) throw UsageError("--sweep runs synthetic workloads; it takes no --trace");
  const SyntheticSpec base = ParseSyntheticSpec(flags.Str("synthetic", "zipf:width=64,density=0.01,skew=1.1"));
  const bool rows = *kind == "rows";
  const Range r = ParseRange(flags.Str("sweep-range", rows ? "4096:4194304:4" : "0.0001:0.3:4"));
  if (!rows && r.to > 1) throw UsageError("--sweep density: densities must be <= 1");
  std::vector<SyntheticSpec> out;
  for (double x = r.from; x <= r.to * (1 + 1e-9); x *= r.factor) {
    if (out.size() == 64) throw UsageError("--sweep: more than 64 sizes; raise FACTOR");
    SyntheticSpec s = base;
    if (rows) {
      if (x >= 9.0e18) throw UsageError("--sweep rows: " + std::to_string(x) + " rows is too many");
      s.rows = static_cast<int64_t>(std::llround(x));
    } else {
      s.density = x;
    }
    out.push_back(s);
  }
  return out;
}

void AddBandwidths(nlohmann::json& report) {
  const auto& t = report["tensor"];
  const double size = t["rows"].get<double>() * t["width"].get<double>() * 4;
  const double n = report["world_size"].get<double>();
  for (auto& r : report["results"]) {
    if (r.contains("error")) continue;
    const double time = r["time_s_median"].get<double>();
    r["size_bytes"] = size;
    if (time <= 0) continue;
    r["algbw_GBps"] = size / time / 1e9;
    r["busbw_GBps"] = size / time / 1e9 * (n > 1 ? 2 * (n - 1) / n : 1.0);
  }
}

void PrintSweep(const nlohmann::json& sweep, bool header) {
  const auto& points = sweep["points"];
  if (points.empty()) return;
  const auto& first = points[0];
  if (header) {
  std::printf("sweep     %s of %s, world %d, %d iterations after %d warm-up\n",
              sweep["sweep"].get<std::string>().c_str(),
              first["tensor"]["source"].get<std::string>().c_str(), first["world_size"].get<int>(),
              first["iters"].get<int>(), first["warmup"].get<int>());
  std::printf("size = rows x width x 4 (dense bytes); algbw = size / time; busbw = algbw x 2(n-1)/n\n\n");
  std::printf("%12s %10s %12s %12s  %-12s %11s %11s %11s %8s %10s %9s\n", "rows", "density",
              "nnz/rank", "size B", "scheme", "median ms", "algbw GB/s", "busbw GB/s", "recv/LB",
              "max relerr", "rows bad");
  }
  for (const auto& p : points) {
    const auto& t = p["tensor"];
    double nnz = 0;
    for (const auto& v : t["nnz_per_rank"]) nnz += v.get<double>();
    nnz /= p["world_size"].get<double>();
    const double rows = t["rows"].get<double>();
    const double bound = t["lower_bound_bytes_max"].get<double>();
    for (const auto& r : p["results"]) {
      const std::string name = r["scheme"].get<std::string>();
      std::printf("%12.0f %10.2e %12.0f %12.0f  %-12s", rows, nnz / rows, nnz,
                  rows * t["width"].get<double>() * 4, name.c_str());
      if (r.contains("error")) {
        std::printf(" error: %s\n", r["error"].get<std::string>().c_str());
        continue;
      }
      char ratio[16] = "n/a";
      if (r.contains("bytes_recv_max") && bound > 0) {
        std::snprintf(ratio, sizeof ratio, "%.2f", r["bytes_recv_max"].get<double>() / bound);
      }
      std::printf(" %11.3f %11.3f %11.3f %8s %10.2e %9lld\n", 1e3 * r["time_s_median"].get<double>(),
                  r.value("algbw_GBps", 0.0), r.value("busbw_GBps", 0.0), ratio,
                  r["max_rel_error"].get<double>(), r["rows_mismatch"].get<long long>());
    }
  }
}

}  // namespace zen::cli
