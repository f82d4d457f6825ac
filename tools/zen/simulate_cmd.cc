// Placeholder until the simulate subcommand lands.
#include <cstdio>

#include "tools/zen/commands.h"

namespace zen::cli {
int RunSimulate(Args) {
  std::fprintf(stderr, "zen simulate: not built yet\n");
  return 2;
}
}  // namespace zen::cli
