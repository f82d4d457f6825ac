// zen — command-line entry point. `zen --help` lists the subcommands.
//
// Conventions (tests/cli_test.cc): `zen -h|--help|help` prints the usage to
// stdout and exits 0, as does `<command> -h|--help`; `zen --version` and
// `zen version` print "zen <version>" (zen/version.h, from CMake's
// project(VERSION)); an unknown command, flag or a stray argument prints one
// line to stderr and exits 2; any other failure exits 1 (or, after SIGINT /
// SIGTERM, dies of that signal once the workers are stopped and the
// temporary files removed).
//
// This is the only place that reads the environment (commands.h).
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "tools/zen/commands.h"
#include "tools/zen/flags.h"
#include "tools/zen/launcher.h"
#include "zen/core/error.h"
#include "zen/version.h"

extern char** environ;

namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(zen::cli::Args, const zen::cli::Environment&);
};

constexpr Command kCommands[] = {
    {"bench", "run schemes on N real worker processes and print a table", zen::cli::RunBench},
    {"schemes", "list the registered synchronization schemes", zen::cli::RunSchemes},
    {"analyze", "characterize a gradient trace (density, overlap, skew)", zen::cli::RunAnalyze},
    {"simulate", "predict scheme times at larger world sizes", zen::cli::RunSimulate},
    {"testbed", "bring the multi-host testbed (namespaces, shaped links) up or down",
     zen::cli::RunTestbed},
};

void Usage(std::FILE* out) {
  std::fprintf(out, "usage: zen <command> [options]\n       zen --version\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(out, "  %-10s %s\n", "version", "print the version");
  std::fprintf(out, "\n`zen <command> --help` describes a command's options.\n");
}

// The variables the tool understands: its own (ZEN_*), those of external
// launchers (torchrun, Open MPI, MPICH/PMI, Slurm), TMPDIR and GLIBC_TUNABLES
// (only recorded in reports: zen sets no allocator tuning).
bool Known(const std::string& name) {
  static const char* const kPrefixes[] = {"ZEN_", "OMPI_", "PMI_", "PMIX_", "SLURM_", "TORCHELASTIC_"};
  static const char* const kNames[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                       "MASTER_ADDR", "MASTER_PORT", "TMPDIR", "GLIBC_TUNABLES"};
  for (const char* p : kPrefixes) {
    if (name.rfind(p, 0) == 0) return true;
  }
  for (const char* n : kNames) {
    if (name == n) return true;
  }
  return false;
}

zen::cli::Environment ReadEnvironment() {
  zen::cli::Environment env;
  for (char** e = environ; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (!eq || eq[1] == '\0') continue;
    std::string name(*e, static_cast<size_t>(eq - *e));
    if (Known(name)) env.vars[name] = eq + 1;
  }
  return env;
}

int RunCommand(const Command& c, zen::cli::Args args, const zen::cli::Environment& env) {
  try {
    return c.run(args, env);
  } catch (const zen::cli::Interrupted& e) {
    // Workers are stopped and temporary files removed (unwound); die of the
    // signal so that the caller sees how this process ended.
    std::fflush(stdout);
    std::fprintf(stderr, "zen %s: %s\n", c.name, e.what());
    signal(e.signal(), SIG_DFL);
    raise(e.signal());
    return 128 + e.signal();
  } catch (const zen::cli::UsageError& e) {
    std::fprintf(stderr, "zen %s: %s\n", c.name, e.what());
    return 2;
  } catch (const zen::InvalidArgument& e) {
    std::fprintf(stderr, "zen %s: %s\n", c.name, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zen %s: error: %s\n", c.name, e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    Usage(stderr);
    return 2;
  }
  const std::string first = argv[1];
  const std::vector<std::string> rest(argv + 2, argv + argc);
  if (first == "-h" || first == "--help" || first == "help") {
    if (first == "help" && !rest.empty()) {  // `zen help bench` = `zen bench --help`
      for (const auto& c : kCommands) {
        if (rest[0] == c.name) {
          const std::vector<std::string> help = {"--help"};
          return RunCommand(c, help, {});
        }
      }
      std::fprintf(stderr, "zen: unknown command '%s' (see zen --help)\n", rest[0].c_str());
      return 2;
    }
    Usage(stdout);
    return 0;
  }
  if (first == "--version" || first == "-V" || first == "version") {
    if (!rest.empty() && rest[0] != "-h" && rest[0] != "--help") {
      std::fprintf(stderr, "zen %s: unexpected argument '%s'\n", first.c_str(), rest[0].c_str());
      return 2;
    }
    if (!rest.empty()) {
      std::printf("usage: zen --version | zen version\n  Prints the version of zen.\n");
      return 0;
    }
    std::printf("zen %s\n", zen::kVersion);
    return 0;
  }
  for (const auto& c : kCommands) {
    if (first == c.name) return RunCommand(c, rest, ReadEnvironment());
  }
  if (first.size() > 1 && first[0] == '-') {
    std::fprintf(stderr, "zen: unknown option '%s' (see zen --help)\n", first.c_str());
  } else {
    std::fprintf(stderr, "zen: unknown command '%s' (see zen --help)\n", first.c_str());
  }
  return 2;
}
