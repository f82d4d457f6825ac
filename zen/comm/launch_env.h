// zen/comm/launch_env.h — the one mapping from a launcher's environment
// (torchrun, Open MPI, MPICH / PMI, Slurm) to this process's rank, world
// size, local rank, job id and rendezvous. The CLI's main and the Python
// edge read the environment and pass a copy here; the library never reads
// it.
//
//   torchrun  RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT:
//             zen's TCP store hosted by rank 0 on MASTER_ADDR:MASTER_PORT+1
//             (torch's own store keeps MASTER_PORT); job
//             "torchelastic-<TORCHELASTIC_RUN_ID>-<TORCHELASTIC_RESTART_COUNT>"
//             (run id "none", restart 0 when absent), so every elastic
//             generation has keys of its own.
//   Open MPI  OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//             OMPI_COMM_WORLD_LOCAL_RANK; job "mpi-<OMPI_MCA_ess_base_jobid>"
//             or "mpi-<PMIX_NAMESPACE>".
//   MPICH     PMI_RANK, PMI_SIZE (Hydra), MPI_LOCALRANKID; job
//             "mpi-<PMI_JOBID>" when set (else PMIX_NAMESPACE).
//   Slurm     SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID (srun); job
//             "slurm-<SLURM_JOB_ID>.<SLURM_STEP_ID>".
// The first of these whose rank and size variables are set wins, in this
// order (torchrun's also needs MASTER_ADDR and MASTER_PORT, or
// ZEN_RENDEZVOUS: RANK and WORLD_SIZE alone are too common to mean torchrun). MPI launchers and Slurm give rendezvous "mpi://" (the MPI
// transport needs none; Gloo needs ZEN_RENDEZVOUS=file:DIR or
// redis://HOST:PORT). ZEN_RENDEZVOUS, when set, replaces the rendezvous URL
// of any of them, and ZEN_STORE_SECRET the secret.
//
// One rule for every launcher: sizes in [1, 2^24]; a job id keeps
// [A-Za-z0-9._-] and replaces any other character by '_', and is cut to 128
// characters (what a ?job= id may hold, rendezvous_url.h).
//
// Usage:
//   std::map<std::string, std::string> env = ...;  // a copy of environ, at the edge
//   std::optional<zen::LaunchInfo> launch = zen::RendezvousFromEnv(env);
//   if (launch) ConnectGloo(launch->rank, launch->size, {.rendezvous = launch->rendezvous});
#pragma once

#include <map>
#include <optional>
#include <string>

namespace zen {

// The largest world size a launcher's variables may give.
inline constexpr int kMaxLaunchWorld = 1 << 24;

// What the launcher's variables say.
struct LaunchInfo {
  int rank = 0;
  int size = 0;
  int local_rank = 0;      // the rank among this machine's processes (0 when not given)
  std::string rendezvous;  // a URL for ConnectOptions::rendezvous
  std::string job;         // for ConnectOptions::job ("" when the launcher gives none)
  std::string launcher;    // "torchrun", "mpirun" (Open MPI, MPICH) or "slurm", for messages
  // For ConnectOptions::secret: ZEN_STORE_SECRET when set; else, under
  // torchrun, "torchrun/<run id>/<restart>/<MASTER_ADDR>:<MASTER_PORT>",
  // which keeps out a client of another job (a stale or misconfigured
  // worker) but not a local process that can guess or read those variables:
  // set ZEN_STORE_SECRET to a random value for that.
  std::string secret;
};

// std::nullopt when no launcher's variables are present; InvalidArgument
// naming the variable for a malformed value (rank outside [0, size), an
// empty or non-numeric value, a bad port or MASTER_ADDR, a bad
// ZEN_RENDEZVOUS URL, a ZEN_STORE_SECRET over 256 bytes).
std::optional<LaunchInfo> RendezvousFromEnv(const std::map<std::string, std::string>& env);

// The job-id rule above: [A-Za-z0-9._-] kept, anything else '_', at most
// 128 characters.
std::string CleanJobId(std::string id);

}  // namespace zen
