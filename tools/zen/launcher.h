// tools/zen/launcher.h — starts the N worker processes of a local
// `zen bench` run and supervises them.
//
// Each worker is this same binary with the caller's arguments plus
// `--rank R --rendezvous file:DIR`. A worker may be wrapped in a command
// prefix (the testbed runs worker i under `ip netns exec HOST_i`) and bound
// to its own address. The first worker to fail stops the run: the others
// are killed and the launcher returns non-zero, naming the rank and status.
#pragma once

#include <string>
#include <vector>

#include "tools/zen/commands.h"

namespace zen::cli {

struct LaunchPlan {
  std::vector<std::vector<std::string>> prefix;  // per rank, may be empty
  std::vector<std::string> hostname;             // per rank, empty: 127.0.0.1
};

int LaunchLocalWorkers(Args args, int world, bool progress, const LaunchPlan& plan = {});

}  // namespace zen::cli
