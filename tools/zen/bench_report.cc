// The human-readable table of `zen bench`.
#include <cstdio>
#include <string>

#include "tools/zen/bench.h"

namespace zen::cli {
namespace {

std::string Bytes(double b) {
  char buf[32];
  if (b >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(buf, sizeof buf, "%.2f MB", b / 1e6);
  else if (b >= 1e3) std::snprintf(buf, sizeof buf, "%.1f kB", b / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

}  // namespace

void PrintReport(const nlohmann::json& report) {
  const auto& t = report["tensor"];
  uint64_t nnz_sum = 0;
  for (const auto& v : t["nnz_per_rank"]) nnz_sum += v.get<uint64_t>();
  const double world = report["world_size"].get<double>();
  std::printf("workload  %s\n", t["source"].get<std::string>().c_str());
  std::printf("tensor    rows %lld  width %lld  mean nnz/rank %.0f  union rows %lld  world %d\n",
              t["rows"].get<long long>(), t["width"].get<long long>(), nnz_sum / world,
              t["union_rows"].get<long long>(), report["world_size"].get<int>());
  const double bound = t["lower_bound_bytes_max"].get<double>();
  std::printf("limit     a rank must receive at least %s (max over ranks)\n", Bytes(bound).c_str());
  std::printf("timing    %d iterations after %d warm-up; time = slowest rank per iteration\n\n",
              report["iters"].get<int>(), report["warmup"].get<int>());
  std::printf("%-18s %11s %11s %11s %11s %11s %11s %8s %10s %9s\n", "scheme", "median ms",
              "min ms", "sent max", "sent mean", "recv max", "recv mean", "recv/LB",
              "max relerr", "rows bad");
  for (const auto& r : report["results"]) {
    const std::string name = r["scheme"].get<std::string>();
    if (r.contains("error")) {
      std::printf("%-18s error: %s\n", name.c_str(), r["error"].get<std::string>().c_str());
      continue;
    }
    const double recv_max = r["bytes_recv_max"].get<double>();
    std::printf("%-18s %11.3f %11.3f %11s %11s %11s %11s %8.2f %10.2e %9lld\n", name.c_str(),
                1e3 * r["time_s_median"].get<double>(), 1e3 * r["time_s_min"].get<double>(),
                Bytes(r["bytes_sent_max"].get<double>()).c_str(),
                Bytes(r["bytes_sent_mean"].get<double>()).c_str(), Bytes(recv_max).c_str(),
                Bytes(r["bytes_recv_mean"].get<double>()).c_str(),
                bound > 0 ? recv_max / bound : 0.0, r["max_rel_error"].get<double>(),
                r["rows_mismatch"].get<long long>());
  }
}

}  // namespace zen::cli
