// Placeholder until the analyze subcommand lands.
#include <cstdio>

#include "tools/zen/commands.h"

namespace zen::cli {
int RunAnalyze(Args) {
  std::fprintf(stderr, "zen analyze: not built yet\n");
  return 2;
}
}  // namespace zen::cli
