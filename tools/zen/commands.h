// tools/zen/commands.h — the subcommands of the `zen` tool. Each lives in its
// own file (<name>_cmd.cc) and is listed once in main.cc's table.
#pragma once

#include <span>
#include <string>

namespace zen::cli {

using Args = std::span<const std::string>;

int RunSchemes(Args args);   // schemes_cmd.cc: list the registry
int RunBench(Args args);     // bench_cmd.cc: multi-process benchmark
int RunAnalyze(Args args);   // analyze_cmd.cc: sparsity analyzer on a trace
int RunSimulate(Args args);  // simulate_cmd.cc: cost-model extrapolation
int RunTestbed(Args args);   // testbed_cmd.cc: multi-host testbed up/down/status

}  // namespace zen::cli
