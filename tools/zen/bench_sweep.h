// tools/zen/bench_sweep.h — `zen bench --sweep`: one synthetic workload per
// size, from small to large, like nccl-tests' -b/-e/-f, each measured with
// the same workers and communicator.
//
//   --sweep rows      rows = FROM, FROM*F, ... <= TO   (default 4096:4194304:4)
//   --sweep density   density = FROM, FROM*F, ... <= TO (default 0.0001:0.3:4)
//   --sweep-range FROM:TO:F overrides the range; --synthetic SPEC gives the
//   other parameters (width, skew, seed, and density or rows).
//
// The table adds, per scheme and size, nccl-tests' bandwidths next to zen's
// bound ratio: size = rows x width x 4 bytes (the dense gradient, what a
// dense AllReduce would reduce), algbw = size / time, busbw = algbw x
// 2(n-1)/n (AllReduce's bus factor), so schemes and sizes compare on one
// scale; recv/LB = received bytes over the must-receive lower bound.
//
// Usage:
//   std::vector<SyntheticSpec> points = SweepPoints(flags);   // empty: no sweep
//   nlohmann::json sweep = {{"sweep", "rows"}, {"points", reports}};
//   PrintSweep(sweep);
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/zen/flags.h"
#include "zen/workload/synthetic.h"

namespace zen::cli {

// The specs of a --sweep (empty without one). UsageError for a bad kind or
// range, or more than 64 points.
std::vector<SyntheticSpec> SweepPoints(const Flags& flags);

// Adds "size_bytes", "algbw_GBps" and "busbw_GBps" to every result of one
// point's report.
void AddBandwidths(nlohmann::json& report);

// The sweep table: one line per size and scheme, after the header lines
// unless `header` is false (rows printed one at a time as they complete).
void PrintSweep(const nlohmann::json& sweep, bool header = true);

}  // namespace zen::cli
