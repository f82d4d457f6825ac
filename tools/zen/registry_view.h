// tools/zen/registry_view.h — the registry the CLI offers: every scheme of
// the library, `auto` included. The CLI is an edge: it maps the environment
// (ZEN_SCHEME, ZEN_LOG; zen/analysis/auto_scheme.h) onto `auto`'s options,
// which the library itself never reads.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "tools/zen/commands.h"
#include "zen/analysis/auto_scheme.h"
#include "zen/schemes/registry.h"

namespace zen::cli {

// The registry with `auto` configured from the variables main() passed in.
inline SchemeRegistry CliSchemes(const Environment& env) {
  return AllSchemes(AutoOptionsFromVariables(
      [&env](std::string_view name) { return env.Get(std::string(name)); }));
}

}  // namespace zen::cli
