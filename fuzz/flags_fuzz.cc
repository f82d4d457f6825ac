// libFuzzer target: the CLI's option parser (tools/zen/flags.h) on argument
// vectors made from the input (NUL-separated), with the flag sets of
// `zen bench`: every outcome is a parse or a UsageError; Int and Double of
// any parsed value either return a value or raise UsageError (numbers
// beyond int64, "1e30", "nan", "-0x8" included). Anything else (an escaped
// std:: exception, UB in a conversion, a crash) is a finding.
#include <cstdint>
#include <string>
#include <vector>

#include "tools/zen/flags.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args(1);
  for (size_t i = 0; i < std::min<size_t>(size, 4096); ++i) {
    if (data[i] == 0) {
      args.emplace_back();
    } else {
      args.back() += static_cast<char>(data[i]);
    }
  }
  static const std::set<std::string> kValues = {"world", "iters", "warmup", "schemes",
                                                "synthetic", "timeout-s", "threads", "rank"};
  static const std::set<std::string> kSwitches = {"quiet", "progress"};
  try {
    const zen::cli::Flags flags(args, kValues, kSwitches, args.size() % 3);
    if (flags.help()) return 0;
    for (const std::string& name : kValues) {
      try {
        (void)flags.Int(name, 1);
      } catch (const zen::cli::UsageError&) {
      }
      try {
        (void)flags.Double(name, 1.0);
      } catch (const zen::cli::UsageError&) {
      }
    }
  } catch (const zen::cli::UsageError&) {
  }
  return 0;
}
