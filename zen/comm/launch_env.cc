#include "zen/comm/launch_env.h"

#include <cstdint>

#include "zen/comm/rendezvous_url.h"
#include "zen/core/error.h"

namespace zen {
namespace {

using Env = std::map<std::string, std::string>;

// Whether a variable is set (an empty value is set, and malformed where a
// value is needed).
bool Has(const Env& env, const char* name) { return env.count(name) != 0; }

// A variable's value where empty means "none" (job ids, ZEN_*).
std::optional<std::string> Get(const Env& env, const char* name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

int64_t Number(const Env& env, const char* name, int64_t lo, int64_t hi) {
  const std::string v = env.at(name);
  if (v.empty() || v.size() > 10 || v.find_first_not_of("0123456789") != std::string::npos ||
      std::stoll(v) < lo || std::stoll(v) > hi) {
    throw InvalidArgument(Where{}, "environment variable ", name, "='", v,
                          "' is not an integer in [", lo, ", ", hi, "]");
  }
  return std::stoll(v);
}

// Rank, size and local rank from the named variables (local rank 0 when
// its variable is absent).
LaunchInfo RankAndSize(const Env& env, const char* rank, const char* size, const char* local,
                       const char* launcher) {
  LaunchInfo l;
  l.launcher = launcher;
  l.size = static_cast<int>(Number(env, size, 1, kMaxLaunchWorld));
  l.rank = static_cast<int>(Number(env, rank, 0, l.size - 1));
  l.local_rank = Has(env, local) ? static_cast<int>(Number(env, local, 0, l.size - 1)) : 0;
  return l;
}

// "<head><id><tail>" with `id` cleaned and cut so that the whole fits 128
// characters: the head and tail (e.g. a restart count) are never cut off.
std::string JobOf(const std::string& head, const std::string& id, const std::string& tail) {
  const size_t room = 128 - head.size() - tail.size();
  return CleanJobId(head + CleanJobId(id).substr(0, room) + tail);
}

}  // namespace

std::string CleanJobId(std::string id) {
  for (char& c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) c = '_';
  }
  return id.substr(0, 128);
}

std::optional<LaunchInfo> RendezvousFromEnv(const Env& env) {
  std::optional<LaunchInfo> out;
  const bool torchrun_store = Has(env, "MASTER_ADDR") && Has(env, "MASTER_PORT");
  if (Has(env, "RANK") && Has(env, "WORLD_SIZE") && (torchrun_store || Get(env, "ZEN_RENDEZVOUS"))) {
    out = RankAndSize(env, "RANK", "WORLD_SIZE", "LOCAL_RANK", "torchrun");
    const int64_t restart = Has(env, "TORCHELASTIC_RESTART_COUNT")
                                ? Number(env, "TORCHELASTIC_RESTART_COUNT", 0, int64_t{1} << 30)
                                : 0;
    const std::string run = Get(env, "TORCHELASTIC_RUN_ID").value_or("none");
    out->job = JobOf("torchelastic-", run, "-" + std::to_string(restart));
    if (torchrun_store) {
      const std::string addr = env.at("MASTER_ADDR");
      if (addr.empty() || addr.find_first_of("/?@ ") != std::string::npos) {
        throw InvalidArgument(Where{}, "environment variable MASTER_ADDR='", addr,
                              "' is not a host name or address");
      }
      const int64_t port = Number(env, "MASTER_PORT", 1, 65534);
      out->rendezvous = "tcp://" + addr + ":" + std::to_string(port + 1);
      out->secret = "torchrun/" + CleanJobId(run) + "/" + std::to_string(restart) + "/" + addr +
                    ":" + std::to_string(port);
    }
  } else if (Has(env, "OMPI_COMM_WORLD_RANK") && Has(env, "OMPI_COMM_WORLD_SIZE")) {
    out = RankAndSize(env, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                      "OMPI_COMM_WORLD_LOCAL_RANK", "mpirun");
    if (auto j = Get(env, "OMPI_MCA_ess_base_jobid")) out->job = JobOf("mpi-", *j, "");
    else if (auto n = Get(env, "PMIX_NAMESPACE")) out->job = JobOf("mpi-", *n, "");
  } else if (Has(env, "PMI_RANK") && Has(env, "PMI_SIZE")) {
    out = RankAndSize(env, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "mpirun");
    if (auto j = Get(env, "PMI_JOBID")) out->job = JobOf("mpi-", *j, "");
    else if (auto n = Get(env, "PMIX_NAMESPACE")) out->job = JobOf("mpi-", *n, "");
  } else if (Has(env, "SLURM_PROCID") && Has(env, "SLURM_NTASKS")) {
    out = RankAndSize(env, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "slurm");
    if (auto j = Get(env, "SLURM_JOB_ID")) {
      out->job = JobOf("slurm-", *j, "." + CleanJobId(Get(env, "SLURM_STEP_ID").value_or("0")));
    }
  }
  if (!out) return std::nullopt;
  if (out->rendezvous.empty()) out->rendezvous = "mpi://";
  if (auto secret = Get(env, "ZEN_STORE_SECRET")) {
    if (secret->size() > 256) {
      throw InvalidArgument(Where{}, "environment variable ZEN_STORE_SECRET has ", secret->size(),
                            " bytes, at most 256");
    }
    out->secret = *secret;
  }
  if (auto url = Get(env, "ZEN_RENDEZVOUS")) {
    ParseRendezvousUrl(*url);  // InvalidArgument for a bad one
    out->rendezvous = *url;
  }
  return out;
}

}  // namespace zen
