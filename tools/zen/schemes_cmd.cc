// `zen schemes`: the registry, one line per scheme.
#include <cstdio>

#include "tools/zen/commands.h"
#include "tools/zen/flags.h"
#include "tools/zen/registry_view.h"

namespace zen::cli {

int RunSchemes(Args args, const Environment& env) {
  Flags flags(args, {}, {});
  if (flags.help()) {
    std::printf("usage: zen schemes\n  Lists the registered synchronization schemes.\n");
    return 0;
  }
  const SchemeRegistry registry = CliSchemes(env);
  for (const SchemeInfo& s : registry.schemes()) {
    std::printf("%-12s %s\n", s.id.c_str(), s.description.c_str());
  }
  return 0;
}

}  // namespace zen::cli
