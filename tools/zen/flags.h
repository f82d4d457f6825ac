// tools/zen/flags.h — a small "--key value" / "--switch" parser for the
// subcommands. Unknown flags are an error naming the flag.
//
// Usage:
//   Flags f(args, {"world", "trace", "iters"}, {"quiet"});
//   int world = f.Int("world", 8);
//   bool quiet = f.Has("quiet");
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tools/zen/commands.h"

namespace zen::cli {

class Flags {
 public:
  // values: flags that take a value; switches: flags that do not.
  Flags(Args args, std::set<std::string> values, std::set<std::string> switches);

  bool Has(const std::string& name) const;
  std::optional<std::string> Get(const std::string& name) const;
  std::string Str(const std::string& name, const std::string& fallback) const;
  int64_t Int(const std::string& name, int64_t fallback) const;
  double Double(const std::string& name, double fallback) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> switches_;
  std::vector<std::string> positional_;
};

// Splits "a,b,c" into its items (empty items dropped).
std::vector<std::string> SplitList(const std::string& text);

}  // namespace zen::cli
