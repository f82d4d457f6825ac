// End-to-end: `zen bench` starts real worker processes that talk over Gloo
// TCP on loopback; every scheme's result must match the dense reference on
// every rank, and the byte figures must come from real traffic.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "zen/analysis/auto_scheme.h"

#ifndef ZEN_CLI
#error "ZEN_CLI must name the zen binary"
#endif

namespace {

struct BenchRun {
  int status = -1;
  nlohmann::json report;
};

BenchRun Bench(const std::string& args) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("zen-bench-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string json = (dir / "report.json").string();
  const std::string cmd = std::string(ZEN_CLI) + " bench --quiet --json " + json + " " + args +
                          " > " + (dir / "stdout").string() + " 2>&1";
  BenchRun run;
  run.status = std::system(cmd.c_str());
  std::ifstream in(json);
  if (in) run.report = nlohmann::json::parse(in);
  std::filesystem::remove_all(dir);
  return run;
}

TEST(BenchMultiProcess, EverySchemeExactOnEveryRank) {
  const BenchRun run = Bench(
      "--world 3 --iters 2 --warmup 1 --synthetic zipf:rows=20000,width=16,density=0.02,skew=1.1");
  ASSERT_EQ(run.status, 0);
  ASSERT_EQ(run.report["world_size"], 3);
  const auto ids = zen::AllSchemes().ids();
  ASSERT_EQ(run.report["results"].size(), ids.size());
  for (const auto& r : run.report["results"]) {
    SCOPED_TRACE(r["scheme"].get<std::string>());
    ASSERT_FALSE(r.contains("error")) << r["error"];
    EXPECT_LE(r["max_rel_error"].get<double>(), 1e-5);
    EXPECT_EQ(r["rows_mismatch"].get<int64_t>(), 0);
    EXPECT_GT(r["bytes_recv_max"].get<double>(), 0);
    EXPECT_GE(r["time_s_median"].get<double>(), r["time_s_min"].get<double>());
  }
}

TEST(BenchMultiProcess, AgSparseReceivesEveryOtherRanksCoo) {
  // Measured bytes against the definition: each rank receives the other
  // ranks' COO streams (8-byte id + 4 x width value bytes per row) plus the
  // size exchange and the metadata record.
  const BenchRun run = Bench(
      "--world 4 --iters 1 --warmup 0 --schemes agsparse "
      "--synthetic zipf:rows=50000,width=8,density=0.01,skew=0.5");
  ASSERT_EQ(run.status, 0);
  const auto& t = run.report["tensor"];
  const auto& r = run.report["results"][0];
  double total_nnz = 0;
  for (const auto& v : t["nnz_per_rank"]) total_nnz += v.get<double>();
  const double row_bytes = 8 + 4 * 8;
  for (size_t k = 0; k < 4; ++k) {
    const double others = total_nnz - t["nnz_per_rank"][k].get<double>();
    const double recv = r["bytes_recv_per_rank"][k].get<double>();
    EXPECT_GE(recv, others * row_bytes);
    EXPECT_LE(recv, others * row_bytes + 3 * 128);
  }
}

TEST(BenchMultiProcess, BadSchemeNameFailsBeforeSpawning) {
  const BenchRun run = Bench("--world 2 --schemes nosuch --synthetic zipf:rows=100");
  EXPECT_NE(run.status, 0);
}

}  // namespace
