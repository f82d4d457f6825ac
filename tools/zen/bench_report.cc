// The human-readable table of `zen bench`.
#include <cmath>
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

// A byte field of a result row, "n/a" when it was not measured (peers have
// no payload counters; wire counters exist only on the testbed).
std::string BytesOf(const nlohmann::json& r, const char* key) {
  return r.contains(key) ? Bytes(r[key].get<double>()) : "n/a";
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
  std::printf("limit     a rank must receive at least %s (max over ranks)", Bytes(bound).c_str());
  const double bound_s = report.value("lower_bound_time_s", 0.0);
  if (report.contains("link")) {
    std::printf(" = %.3f ms at %s\n", 1e3 * bound_s, report["link"]["rate"].get<std::string>().c_str());
    std::printf("testbed   %d hosts, each link shaped to %s both ways; wire = bytes through the\n"
                "          host's interface per iteration (TCP/IP + Gloo framing, barriers)\n",
                report["link"]["hosts"].get<int>(), report["link"]["rate"].get<std::string>().c_str());
  } else {
    std::printf("\n");
  }
  std::printf("timing    %d iterations after %d warm-up; time = slowest rank per iteration\n",
              report["iters"].get<int>(), report["warmup"].get<int>());
  if (report.value("output", "sparse") == "dense") {
    std::printf("output    dense: each scheme writes the sum into a buffer of rows x width "
                "(SyncInto)\n");
  }
  if (!report.value("check_agreement", true)) {
    std::printf("agreement off: the schemes skip their metadata round per call (--no-agreement)\n");
  }
  std::printf("\n");
  const bool wire = report.contains("link");
  std::printf("%-18s %11s %11s %11s %11s %11s %11s %8s", "scheme", "median ms", "min ms",
              "sent max", "sent mean", "recv max", "recv mean", "recv/LB");
  if (wire) std::printf(" %11s %11s %7s", "wire recv", "wire sent", "t/LB");
  std::printf(" %10s %9s\n", "max relerr", "rows bad");
  for (const auto& r : report["results"]) {
    const std::string name = r["scheme"].get<std::string>();
    if (r.contains("error")) {
      std::printf("%-18s error: %s\n", name.c_str(), r["error"].get<std::string>().c_str());
      continue;
    }
    char ratio[16] = "n/a";
    if (r.contains("bytes_recv_max") && bound > 0) {
      std::snprintf(ratio, sizeof ratio, "%.2f", r["bytes_recv_max"].get<double>() / bound);
    }
    std::printf("%-18s %11.3f %11.3f %11s %11s %11s %11s %8s", name.c_str(),
                1e3 * r["time_s_median"].get<double>(), 1e3 * r["time_s_min"].get<double>(),
                BytesOf(r, "bytes_sent_max").c_str(), BytesOf(r, "bytes_sent_mean").c_str(),
                BytesOf(r, "bytes_recv_max").c_str(), BytesOf(r, "bytes_recv_mean").c_str(), ratio);
    if (wire) {
      std::printf(" %11s %11s %7.2f", BytesOf(r, "wire_bytes_recv_max").c_str(),
                  BytesOf(r, "wire_bytes_sent_max").c_str(), r.value("time_over_bound", 0.0));
    }
    std::printf(" %10.2e %9lld\n", r["max_rel_error"].get<double>(),
                r["rows_mismatch"].get<long long>());
  }
  // What auto ran in the measured iterations, and how it got there.
  for (const auto& r : report["results"]) {
    if (!r.contains("auto") || !r["auto"].contains("chosen")) continue;
    const auto& a = r["auto"];
    std::printf("\n%s ran %s: ", r["scheme"].get<std::string>().c_str(),
                a["chosen"].get<std::string>().c_str());
    if (a.value("measured", false)) {
      std::printf("fastest of its timed shortlist (median ms:");
      for (const auto& t : a["trials"]) {
        std::printf(" %s %.3f (%zu call%s%s)", t["scheme"].get<std::string>().c_str(),
                    1e3 * t["median_s"].get<double>(), t["times_s"].size(),
                    t["times_s"].size() == 1 ? "" : "s", t.value("dropped", false) ? ", dropped" : "");
      }
      std::printf("; %d trial calls added to the warm-up; the model predicted %s)\n",
                  a.value("extra_warmup_calls", 0), a["predicted"].get<std::string>().c_str());
    } else {
      std::printf("the cost model's choice (nothing else shortlisted)\n");
    }
  }
}

std::vector<std::string> ReportFailures(const nlohmann::json& report) {
  std::vector<std::string> out;
  if (report.contains("points")) {  // a --sweep: every size's failures
    for (const auto& p : report["points"]) {
      const std::string size = "rows " + std::to_string(p["tensor"]["rows"].get<long long>()) + ", ";
      for (const std::string& f : ReportFailures(p)) out.push_back(size + f);
    }
    return out;
  }
  if (!report.contains("results")) return {"the report holds no results"};
  for (const auto& r : report["results"]) {
    const std::string name = r.value("scheme", std::string("?"));
    if (r.contains("error")) {
      out.push_back(name + ": error: " + r["error"].get<std::string>());
      continue;
    }
    const int64_t bad = r.value("rows_mismatch", int64_t{0});
    // NaN or absent is a failure too: "not (err <= tol)".
    const double err = r.contains("max_rel_error") && r["max_rel_error"].is_number()
                           ? r["max_rel_error"].get<double>()
                           : NAN;
    if (bad != 0 || !(err <= kMaxRelError)) {
      char line[160];
      std::snprintf(line, sizeof line, "%s: inexact result: rows bad %lld, max relerr %.3g (limit %.0e)",
                    name.c_str(), static_cast<long long>(bad), err, kMaxRelError);
      out.push_back(line);
    }
  }
  return out;
}

}  // namespace zen::cli
