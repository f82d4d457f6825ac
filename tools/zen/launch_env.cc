#include "tools/zen/launch_env.h"

#include <cstdint>

#include "zen/core/error.h"

namespace zen::cli {
namespace {

std::optional<std::string> Get(const std::map<std::string, std::string>& env, const char* name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

int64_t Number(const std::map<std::string, std::string>& env, const char* name, int64_t lo, int64_t hi) {
  const std::string v = *Get(env, name);
  size_t used = 0;
  int64_t out = 0;
  try {
    out = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || used == 0 || out < lo || out > hi) {
    throw InvalidArgument("environment variable " + std::string(name) + "=" + v +
                          " is not an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return out;
}

// Keeps [A-Za-z0-9._-] (what a job id may hold), replacing the rest by '-'.
std::string JobId(std::string s) {
  for (char& c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) c = '-';
  }
  return s.substr(0, 128);
}

LaunchInfo RankAndSize(const std::map<std::string, std::string>& env, const char* rank, const char* size) {
  LaunchInfo l;
  l.size = static_cast<int>(Number(env, size, 1, 1 << 20));
  l.rank = static_cast<int>(Number(env, rank, 0, l.size - 1));
  return l;
}

}  // namespace

std::optional<LaunchInfo> LaunchFromEnv(const std::map<std::string, std::string>& env) {
  std::optional<LaunchInfo> out;
  if (Get(env, "RANK") && Get(env, "WORLD_SIZE")) {
    out = RankAndSize(env, "RANK", "WORLD_SIZE");
    out->launcher = "torchrun";
    const auto addr = Get(env, "MASTER_ADDR");
    const bool has_port = Get(env, "MASTER_PORT").has_value();
    if (!Get(env, "ZEN_RENDEZVOUS")) {
      if (!addr || !has_port) {
        throw InvalidArgument("torchrun's RANK and WORLD_SIZE are set but not MASTER_ADDR and "
                              "MASTER_PORT (or ZEN_RENDEZVOUS)");
      }
      const int64_t port = Number(env, "MASTER_PORT", 1, 65534);
      out->rendezvous = "tcp://" + *addr + ":" + std::to_string(port + 1);
    }
    const std::string run = Get(env, "TORCHELASTIC_RUN_ID").value_or("none");
    const std::string restart = Get(env, "TORCHELASTIC_RESTART_COUNT").value_or("0");
    out->job = JobId("torchelastic-" + run + "-" + restart);
  } else if (Get(env, "OMPI_COMM_WORLD_RANK") && Get(env, "OMPI_COMM_WORLD_SIZE")) {
    out = RankAndSize(env, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE");
  } else if (Get(env, "PMI_RANK") && Get(env, "PMI_SIZE")) {
    out = RankAndSize(env, "PMI_RANK", "PMI_SIZE");
  }
  if (!out) return std::nullopt;
  if (out->launcher.empty()) {
    out->launcher = "mpirun";
    out->rendezvous = "mpi://";
    if (auto j = Get(env, "OMPI_MCA_ess_base_jobid")) out->job = JobId("mpi-" + *j);
    else if (auto n = Get(env, "PMIX_NAMESPACE")) out->job = JobId("mpi-" + *n);
  }
  if (auto url = Get(env, "ZEN_RENDEZVOUS")) out->rendezvous = *url;
  return out;
}

}  // namespace zen::cli
