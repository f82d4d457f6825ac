// zen — command-line entry point. `zen help` lists the subcommands.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "tools/zen/commands.h"
#include "zen/core/error.h"

namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(zen::cli::Args);
};

constexpr Command kCommands[] = {
    {"bench", "run schemes on N real worker processes and print a table", zen::cli::RunBench},
    {"schemes", "list the registered synchronization schemes", zen::cli::RunSchemes},
    {"analyze", "characterize a gradient trace (density, overlap, skew)", zen::cli::RunAnalyze},
    {"simulate", "predict scheme times at larger world sizes", zen::cli::RunSimulate},
    {"testbed", "bring the multi-host testbed (namespaces, shaped links) up or down",
     zen::cli::RunTestbed},
};

void Usage() {
  std::fprintf(stderr, "usage: zen <command> [options]\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(stderr, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(stderr, "\n`zen <command> --help` describes a command's options.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "help" || std::string(argv[1]) == "--help") {
    Usage();
    return argc < 2 ? 2 : 0;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  for (const auto& c : kCommands) {
    if (argv[1] != std::string(c.name)) continue;
    try {
      return c.run(args);
    } catch (const zen::InvalidArgument& e) {
      std::fprintf(stderr, "zen %s: %s\n", c.name, e.what());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "zen %s: error: %s\n", c.name, e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "zen: unknown command '%s'\n\n", argv[1]);
  Usage();
  return 2;
}
