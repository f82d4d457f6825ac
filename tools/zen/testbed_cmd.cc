// zen testbed — bring the multi-host testbed up or down by hand (for
// scripts that run their own workers; `zen bench --testbed NxRATE` manages
// its own). scripts/testbed runs this command: one implementation
// (testbed.h) serves both.
#include <cstdio>
#include <string>

#include "tools/zen/commands.h"
#include "tools/zen/testbed.h"
#include "zen/core/error.h"

namespace zen::cli {
namespace {

constexpr char kUsage[] =
    "usage: zen testbed up N RATE [TAG]   e.g. zen testbed up 8 500mbit\n"
    "       zen testbed down [TAG]        remove it (always safe to run)\n"
    "       zen testbed status            list what exists\n"
    "\n"
    "An N-host network on one machine (root, iproute2): host i (0-based) is the\n"
    "network namespace zentb<TAG>-h<i> with loopback up and one interface zentb0\n"
    "addressed 10.77.0.<i+1>/24; its veth peer zentb<TAG>-v<i> sits on the bridge\n"
    "zentb<TAG>-br. Both veth ends are shaped to RATE with tc tbf (bit, kbit, mbit,\n"
    "gbit), TCP slow start after idle is off in each namespace. TAG (default empty,\n"
    "up to 4 of [0-9a-z]) lets several testbeds coexist; `down` without TAG\n"
    "removes every zentb* object. Run worker i with\n"
    "  ip netns exec zentb<TAG>-h<i> CMD ...   (bind to 10.77.0.<i+1>)\n";

int Usage(bool error) {
  std::fputs(kUsage, error ? stderr : stdout);
  return error ? 2 : 0;
}

}  // namespace

int RunTestbed(Args args, const Environment&) {
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") return Usage(false);  // help wins, starts nothing
  }
  if (args.empty()) return Usage(true);
  const std::string& cmd = args[0];
  if (cmd == "help") return Usage(false);
  if (cmd == "up") {
    if (args.size() < 3 || args.size() > 4) return Usage(true);
    const std::string tag = args.size() == 4 ? args[3] : "";
    const std::string prefix = TestbedPrefix(tag);
    const TestbedSpec spec = ParseTestbedSpec(args[1] + "x" + args[2]);
    CheckTestbedPrivileges("the testbed");
    TestbedUp(prefix, spec);
    std::printf("testbed %s: %d hosts (%s-h0..%s-h%d, 10.77.0.1..10.77.0.%d), links shaped to %s "
                "each way\n",
                prefix.c_str(), spec.hosts, prefix.c_str(), prefix.c_str(), spec.hosts - 1,
                spec.hosts, spec.rate.c_str());
    return 0;
  }
  if (cmd == "down") {
    if (args.size() > 2) return Usage(true);
    const std::string tag = args.size() == 2 ? args[1] : "";
    const std::string prefix = TestbedPrefix(tag);
    CheckTestbedPrivileges("the testbed");
    if (tag.empty()) {
      RemoveTestbedObjects(prefix);  // every zentb* object
    } else {
      TestbedDown(prefix);
    }
    std::printf("testbed%s: removed\n", tag.empty() ? "" : (" " + prefix).c_str());
    return 0;
  }
  if (cmd == "status") {
    if (args.size() != 1) return Usage(true);
    CheckTestbedPrivileges("the testbed");
    std::fputs(TestbedStatus().c_str(), stdout);
    return 0;
  }
  std::fprintf(stderr, "zen testbed: unknown subcommand '%s'\n\n", cmd.c_str());
  return Usage(true);
}

}  // namespace zen::cli
