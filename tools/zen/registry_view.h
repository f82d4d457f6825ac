// tools/zen/registry_view.h — the registry the CLI offers: every scheme of
// the library, `auto` included once the analysis layer provides it.
#pragma once

#include "zen/analysis/auto_scheme.h"
#include "zen/schemes/registry.h"

namespace zen::cli {

inline SchemeRegistry CliSchemes() { return AllSchemes(); }

}  // namespace zen::cli
