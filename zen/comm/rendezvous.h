// zen/comm/rendezvous.h — the run protocol: how the ranks of a job find
// each other in a store, and how a rerun never meets the keys of an earlier
// run. The pieces it builds on have files of their own:
//   rendezvous_url.h    the URLs users type (file:, redis://, tcp://, env://)
//   store.h             what zen asks of a store; OpenStore(url)
//   file_store.h        file:DIR
//   redis_store.h       redis://HOST:PORT (requests bounded by the deadline)
//   tcp_store.h         tcp://HOST:PORT, hosted by rank 0
//   rendezvous_value.h  the value each rank publishes, and its codec
//   launch_env.h        launcher variables -> rank, size, job, rendezvous
//   timeout.h           the timeout rule
//
// Runs and generations. Keys of one job live under "<prefix>/<job>". Inside
// that, every run of the job claims a generation number g: rank 0 claims the
// first free key "gen/<g>" (an atomic set-if-absent), and every other rank
// joins the newest generation in which its own slot "<g>/addr/<rank>" is
// still free, moving on whenever rank 0 claims a newer one. A generation is
// complete once rank 0 has seen every rank's address and published
// "<g>/ready". So a rerun with the same directory (or the same job id) uses
// generation g+1 and never reads the addresses of the run before, and a
// partial earlier run (a rank that never came) is skipped over, not waited
// for. Elastic restarts put the restart count in the job id
// (RendezvousFromEnv does), so a new generation of workers never meets the
// keys of the previous one either way.
//
// Concurrent jobs. Two live jobs given the same store, prefix and job id
// (e.g. the same file:DIR without ?job=) must not pair with each other's
// ranks: that sums one job's gradients into the other's. Launchers give each
// job its own namespace (torchrun: its own MASTER_PORT and a job id from
// TORCHELASTIC_RUN_ID; mpirun: the MPI job id; `zen bench`: a fresh temporary
// directory per launch). Without one, JoinRun detects a second job and fails
// at once with a MismatchError that names the rendezvous and says "give each
// job its own directory or ?job=ID":
//  - rank 0 of generation g watches, until it publishes "<g>/ready", for a
//    claim of g+1; seeing one, it writes "<g>/abort" (the reason) and fails;
//  - a rank 0 that claims g while g-1 is still forming (neither ready nor
//    aborted) waits kConcurrentGrace before confirming g; if "<g-1>/abort"
//    appears meanwhile (its rank 0 is alive and saw us), it writes
//    "<g>/abort" and fails too; if not, g-1 is the leftover of a dead run;
//  - a rank k > 0 that finds its slot in a still-forming generation taken
//    writes "<g>/dup"; that generation's rank 0, while forming, aborts it,
//    and the rank fails when the abort appears within kConcurrentGrace
//    (else the generation is a dead run's leftover);
//  - a rank waiting in a generation that is aborted (or that it left for a
//    newer one, and that is then aborted) fails with the abort's reason;
//  - every rank's value carries rank 0's per-generation nonce (from
//    "gen/<g>"); after connecting, the ranks exchange their nonces over the
//    new mesh, so a connection to a listener of another run is a
//    MismatchError too.
// The one order no protocol can see without a job id: a rank k > 0 of job B
// that starts after job A's rank 0 has claimed its generation, before A's
// own rank k has joined it, and before B's rank 0 has claimed one, and A's
// generation then completes before A's rank k arrives (with two ranks: at
// once). B's rank k took A's free slot k, and two processes given the same
// (store, rank, world) are indistinguishable. A's rank k later pairs with
// B's rank 0: both pairs sum across the jobs. Only a job id (or a directory
// per job) rules this out.
//
// Rendezvous values (EncodeRendezvousValue / DecodeRendezvousValue) carry a
// magic, the sender's world size and rank, and its per-peer transport
//
// Usage:
//   auto store = zen::OpenStore("file:/shared/run", std::chrono::seconds(30));
//   zen::RunRendezvous run = zen::JoinRun(*store, "zen", job, mine, deadline, timeout, url,
//                                         {.notice = print_to_stderr});
//   // run.peers[r]: rank r's published value
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "zen/comm/rendezvous_value.h"
#include "zen/comm/store.h"

namespace zen {

// What a rank says while it waits for its peers: every `every`, a line
// naming the ranks it waits for (or that it waits for rank 0 to start or
// confirm the run) and for how long. An empty `notice` is silent (the
// library's default; the CLI's main and the Python edge print to stderr).
struct WaitProgress {
  std::function<void(const std::string& line)> notice;
  std::chrono::milliseconds every{5000};
};

struct RunRendezvous {
  int64_t generation = 0;
  uint64_t nonce = 0;                 // the generation's nonce (every peer's value carries it)
  std::string base;                   // "<prefix>[/<job>]/<generation>"
  std::vector<RendezvousValue> peers;  // by rank; peers[rank] is this rank's
};

// Publishes `mine` (this rank's value, its nonce set here) in a fresh
// generation and returns every rank's value. Waits end at `deadline`;
// TransportError then names the ranks missing, the key, the time waited and
// `timeout`. A second job seen on the same keys (see "Concurrent jobs" above)
// is a MismatchError naming `rendezvous` (the URL or store, for messages)
// and telling the user to give each job its own directory or ?job=ID.
// While it waits, `progress` hears who it waits for (see WaitProgress).
RunRendezvous JoinRun(gloo::rendezvous::Store& store, const std::string& prefix,
                      const std::string& job, const RendezvousValue& mine,
                      std::chrono::steady_clock::time_point deadline,
                      std::chrono::milliseconds timeout, const std::string& rendezvous = "",
                      const WaitProgress& progress = {});

// How long a rank 0 that claims a generation while the one before is still
// forming waits for that generation's rank 0 to notice it (and abort both)
// before taking the older one for the leftover of a dead run: the lesser of
// this and a quarter of the timeout.
inline constexpr std::chrono::milliseconds kConcurrentGrace{500};

}  // namespace zen
