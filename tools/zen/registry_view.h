// tools/zen/registry_view.h — the registry the CLI offers: every scheme of
// the library, `auto` included. The CLI is an edge: it maps the environment
// (ZEN_SCHEME, ZEN_LOG; zen/analysis/auto_scheme.h) onto `auto`'s options,
// which the library itself never reads.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "zen/analysis/auto_scheme.h"
#include "zen/schemes/registry.h"

namespace zen::cli {

inline std::optional<std::string> Environment(std::string_view name) {
  const char* v = std::getenv(std::string(name).c_str());
  return v ? std::optional<std::string>(v) : std::nullopt;
}

inline SchemeRegistry CliSchemes() { return AllSchemes(AutoOptionsFromVariables(Environment)); }

}  // namespace zen::cli
