// tools/zen/commands.h — the subcommands of the `zen` tool. Each lives in its
// own file (<name>_cmd.cc) and is listed once in main.cc's table.
//
// main() is the only place that reads the process environment: it copies
// the variables the tool understands (Environment::kKnown) into an
// Environment that it hands to the command, so commands and tests see
// configuration passed in.
//
// Usage (a command):
//   int RunFoo(Args args, const Environment& env) {
//     Flags flags(args, {"x"}, {});
//     std::string py = env.Get("ZEN_PYTHON").value_or("/usr/bin/python3");
//   }
#pragma once

#include <map>
#include <optional>
#include <span>
#include <string>

namespace zen::cli {

using Args = std::span<const std::string>;

struct Environment {
  std::map<std::string, std::string> vars;  // name -> value (set and non-empty)

  std::optional<std::string> Get(const std::string& name) const {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  }
};

int RunSchemes(Args args, const Environment& env);   // schemes_cmd.cc: list the registry
int RunBench(Args args, const Environment& env);     // bench_cmd.cc: multi-process benchmark
int RunAnalyze(Args args, const Environment& env);   // analyze_cmd.cc: sparsity analyzer
int RunSimulate(Args args, const Environment& env);  // simulate_cmd.cc: cost-model extrapolation
int RunTestbed(Args args, const Environment& env);   // testbed_cmd.cc: testbed up/down/status

}  // namespace zen::cli
