// The workload of `zen bench`: a trace tensor, a synthetic spec, or the
// shipped default trace.
#include <filesystem>

#include "tools/zen/bench.h"
#include "tools/zen/data_files.h"
#include "zen/core/error.h"
#include "zen/workload/synthetic.h"
#include "zen/workload/trace.h"

#ifndef ZEN_SHIPPED_TRACE
#define ZEN_SHIPPED_TRACE "gcide-lm-n8.safetensors"
#endif

namespace zen::cli {
namespace {

// The shipped trace: $ZEN_DEFAULT_TRACE, else the one installed with this
// executable (<prefix>/share/zen/traces) or, in a build tree, the source
// tree's data/traces (tools/zen/data_files.h); "" when there is none.
std::string DefaultTracePath(const Environment& env) {
  if (auto path = env.Get("ZEN_DEFAULT_TRACE")) return *path;
  return FindDataFile(std::string("traces/") + ZEN_SHIPPED_TRACE,
                      std::string("data/traces/") + ZEN_SHIPPED_TRACE);
}

Workload FromTrace(const std::string& path, const std::string& tensor, int world) {
  TraceReader reader(path);
  if (world > reader.world_size()) {
    throw InvalidArgument("trace " + path + " holds " + std::to_string(reader.world_size()) +
                          " ranks; --world " + std::to_string(world) + " needs at least as many");
  }
  if (reader.tensors().empty()) throw InvalidArgument("trace " + path + " holds no tensor");
  // Named as `zen analyze` and `zen simulate` name it (step0.emb.weight or
  // emb.weight); one tensor, the file's first by default.
  const std::string name =
      tensor.empty() ? reader.tensors().front().name : SelectTraceTensors(reader.tensors(), tensor)[0];
  Workload w;
  w.source = "trace " + std::filesystem::path(path).filename().string() + " tensor " + name +
             (world < reader.world_size() ? " (first " + std::to_string(world) + " of " +
                                                std::to_string(reader.world_size()) + " ranks)"
                                          : "");
  for (int r = 0; r < world; ++r) w.per_rank.push_back(reader.ReadRank(name, r));
  return w;
}

}  // namespace

Workload LoadWorkload(const Flags& flags, int world, const Environment& env) {
  if (flags.Has("trace") && flags.Has("synthetic")) {
    throw InvalidArgument("give either --trace or --synthetic, not both");
  }
  if (auto spec = flags.Get("synthetic")) {
    const SyntheticSpec s = ParseSyntheticSpec(*spec);
    return {"synthetic " + ToString(s), GenerateSynthetic(s, world)};
  }
  if (auto path = flags.Get("trace")) return FromTrace(*path, flags.Str("tensor", ""), world);
  const std::string def = DefaultTracePath(env);
  if (!def.empty() && std::filesystem::exists(def)) {
    return FromTrace(def, flags.Str("tensor", ""), world);
  }
  const SyntheticSpec s = ParseSyntheticSpec("zipf:rows=32000,width=64,density=0.02,skew=1.1");
  return {"synthetic " + ToString(s) + " (default trace not found)", GenerateSynthetic(s, world)};
}

}  // namespace zen::cli
