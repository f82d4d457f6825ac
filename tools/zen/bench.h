// tools/zen/bench.h — pieces of `zen bench`: the workload, one worker's
// measurement loop, the launcher of worker processes, and the report.
//
// Every rank regenerates (synthetic) or reads (trace) all ranks' inputs, so
// each can check its result against the independent reference
// (zen/testing/reference.h, memory proportional to the non-zeros); timing
// and byte figures are measured per rank (wall clock around Sync, the
// communicator's byte counters) and gathered to rank 0, which prints.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/zen/commands.h"
#include "tools/zen/flags.h"
#include "zen/comm/communicator.h"
#include "zen/core/sparse_tensor.h"

namespace zen::cli {

struct Workload {
  std::string source;  // "trace:PATH#TENSOR" or the synthetic spec
  std::vector<SparseTensor> per_rank;
};

// From --trace FILE [--tensor NAME] or --synthetic SPEC, else the shipped
// default trace ($ZEN_DEFAULT_TRACE, else found next to the executable; a
// synthetic fallback when it is not installed).
Workload LoadWorkload(const Flags& flags, int world, const Environment& env);

struct BenchConfig {
  Environment env;  // what main() passed in (ZEN_SCHEME, ZEN_LOG for `auto`)
  std::vector<std::string> schemes;
  int iters = 5;
  int warmup = 1;
  bool progress = false;  // rank 0 shows what runs on stderr (in place on a terminal)
  std::string point;      // the sweep's size point running, for the progress ("" = none)
  // Rank 0: called with each scheme's combined row (and the tensor's
  // summary) as soon as every rank has measured it.
  std::function<void(const nlohmann::json& row, const nlohmann::json& tensor)> on_row;
  int threads = 0;
  std::string wire_iface;  // testbed: interface whose counters give wire bytes
  // The result's form: false, a sorted sparse tensor (Scheme::Sync); true,
  // written into a dense buffer of rows x width (Scheme::SyncInto, the
  // top-k hook's contract), allocated once per scheme.
  bool output_dense = false;
  // Off (--no-agreement): each scheme skips its metadata round per call.
  bool check_agreement = true;
};

// Runs every scheme on this rank and returns the gathered report (JSON as
// documented in docs/benchmark.md), the same on every rank.
nlohmann::json RunWorker(Communicator& comm, const Workload& workload, const BenchConfig& config);

// InvalidArgument naming the shape, the bytes and `memory_bytes` when
// `processes` float buffers of rows x width (--output dense, one per worker)
// do not fit memory_bytes or overflow: refused up front, not a bare
// std::bad_alloc or an OOM kill.
void CheckDenseOutputFits(int64_t rows, int64_t width, uint64_t processes, uint64_t memory_bytes);

// Combines the per-rank measurements of one scheme (or peer) into a report
// row: slowest rank per iteration, max / mean bytes over ranks.
nlohmann::json CombineRanks(const std::vector<nlohmann::json>& ranks);

// Prints the human-readable table of a report.
void PrintReport(const nlohmann::json& report);

// Results further than this from the reference (max element error over the
// max |reference| element) are failures.
inline constexpr double kMaxRelError = 1e-5;

// Every failure of a report, one line each: a scheme or peer that raised, a
// result with rows mismatched or a relative error above kMaxRelError. Empty
// when every result is exact; `zen bench` exits non-zero otherwise, in every
// mode and on every rank.
std::vector<std::string> ReportFailures(const nlohmann::json& report);

}  // namespace zen::cli
