// tools/zen/launch_env.h — `zen bench` run by an external launcher: maps the
// launcher's variables (read by main.cc into an Environment) to this
// worker's rank, world size and rendezvous.
//
//   torchrun  RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//             rendezvous tcp://MASTER_ADDR:(MASTER_PORT+1) (zen's TCP store
//             hosted by rank 0; torch's own store keeps MASTER_PORT), job
//             "torchelastic-<TORCHELASTIC_RUN_ID>-<TORCHELASTIC_RESTART_COUNT>"
//             so that every elastic generation has keys of its own
//   mpirun    OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE (Open MPI) or
//             PMI_RANK, PMI_SIZE (MPICH / Hydra); rendezvous "mpi://" (the
//             MPI transport needs none); job from OMPI_MCA_ess_base_jobid or
//             PMIX_NAMESPACE
//   ZEN_RENDEZVOUS, when set, replaces the rendezvous URL of either (e.g.
//             file:/shared/dir for Gloo under mpirun).
//
// This is the same mapping as zen::RendezvousFromEnv (zen/comm/rendezvous.h,
// comm layer): when that lands, LaunchFromEnv becomes a call to it and
// LaunchInfo an alias of zen::LaunchInfo (same fields).
//
// Usage:
//   std::optional<LaunchInfo> l = LaunchFromEnv(env.vars);
//   if (l) ConnectGloo(l->rank, l->size, {.rendezvous = l->rendezvous});
#pragma once

#include <map>
#include <optional>
#include <string>

namespace zen::cli {

struct LaunchInfo {
  int rank = 0;
  int size = 0;
  std::string rendezvous;  // a URL: file:, redis://, tcp://, or mpi://
  std::string job;         // keys of this run live under it ("" = none)
  std::string launcher;    // "torchrun" or "mpirun", for messages
};

// std::nullopt when neither launcher's variables are present;
// InvalidArgument naming the variable for a malformed value.
std::optional<LaunchInfo> LaunchFromEnv(const std::map<std::string, std::string>& env);

}  // namespace zen::cli
