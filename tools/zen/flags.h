// tools/zen/flags.h — the option parser of the subcommands, with the
// conventions of common command-line tools:
//   --key value, --key=value   a flag that takes a value
//   --switch                   a flag that does not
//   -h, --help                 always known; wins over every other argument
//                              (even malformed ones), so `zen bench -h`
//                              never starts anything
//   --                         everything after it is positional
// Unknown flags (also single-dash ones such as -x), missing values and more
// positional arguments than the command takes are errors (UsageError, exit
// status 2 in main.cc) naming the argument.
//
// Usage:
//   Flags f(args, {"world", "trace", "iters"}, {"quiet"}, /*max_positional=*/0);
//   if (f.help()) { std::fputs(kHelp, stdout); return 0; }
//   int world = f.Int("world", 8);
//   bool quiet = f.Has("quiet");
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tools/zen/commands.h"
#include "zen/core/error.h"

namespace zen::cli {

// A wrong command line (unknown flag, stray argument, bad value): main.cc
// prints it to stderr and exits with status 2.
class UsageError : public InvalidArgument {
 public:
  explicit UsageError(const std::string& what) : InvalidArgument(what) {}
};

class Flags {
 public:
  // values: flags that take a value; switches: flags that do not ("help" is
  // always one); max_positional: how many non-flag arguments are allowed.
  Flags(Args args, std::set<std::string> values, std::set<std::string> switches,
        size_t max_positional = 0);

  bool help() const { return help_; }
  bool Has(const std::string& name) const;
  std::optional<std::string> Get(const std::string& name) const;
  std::string Str(const std::string& name, const std::string& fallback) const;
  int64_t Int(const std::string& name, int64_t fallback) const;
  double Double(const std::string& name, double fallback) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  bool help_ = false;
  std::map<std::string, std::string> values_;
  std::set<std::string> switches_;
  std::vector<std::string> positional_;
};

// Splits "a,b,c" into its items (empty items dropped).
std::vector<std::string> SplitList(const std::string& text);

}  // namespace zen::cli
