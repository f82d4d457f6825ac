// zen/comm/rendezvous.h — how the ranks of a job find each other: rendezvous
// URLs, the stores behind them, launcher conventions (torchrun, mpirun), and
// the run-agreement protocol that keeps a rerun from meeting the keys of an
// earlier run.
//
// URLs (ParseRendezvousUrl):
//   file:DIR[?job=ID]          a directory every rank sees (created 0700; key
//                              files are 0600)
//   redis://HOST:PORT[?job=ID] a Redis server (builds with hiredis only)
//   tcp://HOST:PORT[?job=ID]   zen's own TCP store, hosted by rank 0 on
//                              HOST:PORT (see tcp_store below)
//   env://                     rank, world size and store from the launcher's
//                              variables; resolved by RendezvousFromEnv at the
//                              edge (CLI main, Python), never by the library
//   mpi://                     the same, from mpirun's variables
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
// addresses; a value of another world size is a MismatchError naming both
// sizes, anything malformed a FormatError. Address padding is zeroed before
// publishing: no heap bytes leave the process.
//
// Usage:
//   zen::RendezvousUrl url = zen::ParseRendezvousUrl("file:/shared/run?job=42");
//   auto store = zen::OpenStore("file:/shared/run", std::chrono::seconds(30));
//   // At the edge (main or Python), with the launcher's environment:
//   std::map<std::string, std::string> env = ...;  // a copy of environ
//   std::optional<zen::LaunchInfo> launch = zen::RendezvousFromEnv(env);
//   if (launch) ConnectGloo(launch->rank, launch->size, launch->options);
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace zen {

// The longest timeout zen accepts: 30 days. Longer values (or 1e30 s from a
// user) would overflow clock arithmetic.
inline constexpr std::chrono::milliseconds kMaxTimeout{int64_t{30} * 24 * 3600 * 1000};

// Seconds (from a flag or Python) to milliseconds: InvalidArgument naming the
// value when it is NaN, not positive, or above kMaxTimeout; values between
// 0 and 1 ms round up to 1 ms.
std::chrono::milliseconds TimeoutFromSeconds(double seconds, int rank = -1);

// InvalidArgument unless 0 < timeout <= kMaxTimeout. `what` names the caller.
void CheckTimeout(std::chrono::milliseconds timeout, const char* what, int rank = -1);

struct RendezvousUrl {
  enum class Kind { kFile, kRedis, kTcp, kEnv, kMpi };
  Kind kind = Kind::kFile;
  std::string path;  // kFile: the directory
  std::string host;  // kRedis, kTcp
  int port = 0;      // kRedis, kTcp
  std::string job;   // from "?job=ID"; empty when absent
  // The URL without its query ("file:DIR", "redis://HOST:PORT", ...).
  std::string base;
};

// Parses the forms listed above. InvalidArgument naming the URL for anything
// else (unknown scheme, missing directory, bad port, unknown query key, a job
// id with characters other than [A-Za-z0-9._-] or longer than 128).
RendezvousUrl ParseRendezvousUrl(const std::string& url);

// Opens the store named by url ("file:", "redis://"; the query is ignored,
// "tcp://" needs TcpStore below, env:// and mpi:// must be resolved first).
// Connecting to Redis is retried until `timeout`; then TransportError names
// the address, the time waited and the last error.
std::shared_ptr<gloo::rendezvous::Store> OpenStore(
    const std::string& url, std::chrono::milliseconds timeout = std::chrono::seconds(30));

// A store that can say cheaply whether a key exists. zen's stores implement
// it; for other stores the run protocol falls back to a 1 ms wait.
class KeyCheck {
 public:
  virtual ~KeyCheck() = default;
  virtual bool Has(const std::string& key) = 0;
};

// A store with an atomic set-if-absent (zen's TCP store; torch's stores
// through compare_set): StoreTrySet uses it instead of check-then-set.
class AtomicSet {
 public:
  virtual ~AtomicSet() = default;
  // false when the key already exists.
  virtual bool TrySet(const std::string& key, const std::vector<char>& value) = 0;
};

// zen's file store: one file per key in `dir`, named after the key (escaped),
// written to a temporary file of mode 0600 and linked into place, so a set
// is atomic and fails when the key exists. `dir` is created with mode 0700
// when missing (an existing directory keeps its mode).
class FileStore final : public gloo::rendezvous::Store, public KeyCheck {
 public:
  explicit FileStore(std::string dir);
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;
  bool Has(const std::string& key) override;

  // The file that holds `key` (for tests and diagnostics).
  std::string PathOf(const std::string& key) const;

 private:
  std::string dir_;
};

// Set-if-absent: false when the key already exists (atomic for stores with
// AtomicSet and for stores that refuse to overwrite: zen's FileStore, Gloo's
// Redis and Hash stores; for other stores that overwrite it checks first,
// which is not atomic).
bool StoreTrySet(gloo::rendezvous::Store& store, const std::string& key,
                 const std::vector<char>& value);
bool StoreHas(gloo::rendezvous::Store& store, const std::string& key);

// ---- rendezvous values ----

// One rank's published value: its world size, rank and one transport address
// per peer (every address `address_bytes` long, in peer order, self skipped).
struct RendezvousValue {
  int world = 0;
  int rank = 0;
  uint32_t address_bytes = 0;
  std::vector<char> addresses;  // (world - 1) * address_bytes bytes
  // The generation's nonce (rank 0 draws it and stores it in "gen/<g>"):
  // every rank of one run carries the same, checked over the new mesh.
  uint64_t nonce = 0;
  // The address this value's sender published for `peer` (peer != rank).
  std::span<const char> AddressFor(int peer) const;
};

std::vector<char> EncodeRendezvousValue(const RendezvousValue& value);

// Decodes a value read from key `key`. MismatchError naming both world sizes
// when value's world != expected_world (checked first, from the fixed-size
// header); FormatError for anything malformed or for a rank other than
// expected_rank. `self` names the reading rank in errors.
RendezvousValue DecodeRendezvousValue(std::span<const char> bytes, int expected_world,
                                      int expected_rank, int self, const std::string& key);

// Replaces a Gloo TCP address (sockaddr_storage followed by a sequence
// number) by a copy in which every byte outside the family's sockaddr and the
// sequence number is zero. FormatError for another size or family.
std::vector<char> SanitizeTcpAddress(std::span<const char> address);

// ---- the run protocol (see the header comment) ----

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
RunRendezvous JoinRun(gloo::rendezvous::Store& store, const std::string& prefix,
                      const std::string& job, const RendezvousValue& mine,
                      std::chrono::steady_clock::time_point deadline,
                      std::chrono::milliseconds timeout, const std::string& rendezvous = "");

// How long a rank 0 that claims a generation while the one before is still
// forming waits for that generation's rank 0 to notice it (and abort both)
// before taking the older one for the leftover of a dead run: the lesser of
// this and a quarter of the timeout.
inline constexpr std::chrono::milliseconds kConcurrentGrace{500};

// ---- launchers ----

// What the launcher's variables say.
struct LaunchInfo {
  int rank = 0;
  int size = 0;
  std::string rendezvous;  // a URL for GlooOptions::rendezvous
  std::string job;         // for GlooOptions::job
  std::string launcher;    // "torchrun" or "mpirun", for messages
  // For GlooOptions::secret: ZEN_STORE_SECRET when set; else, under
  // torchrun, "torchrun/<TORCHELASTIC_RUN_ID>/<restart>/<MASTER_ADDR>:
  // <MASTER_PORT>", which keeps out a client of another job (a stale or
  // misconfigured worker) but not a local process that can guess or read
  // those variables: set ZEN_STORE_SECRET to a random value for that.
  std::string secret;
};

// Maps a copy of the environment to rank, size and rendezvous:
//  - torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT): zen's TCP store,
//    hosted by rank 0 on MASTER_ADDR:MASTER_PORT+1 (torch's own store keeps
//    MASTER_PORT); job "torchelastic-<TORCHELASTIC_RUN_ID>-<RESTART_COUNT>"
//    (restart count 0 when absent), so each elastic generation has its own.
//  - mpirun (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE): rendezvous
//    "mpi://"; job from OMPI_MCA_ess_base_jobid or PMIX_NAMESPACE when set.
//    (Gloo over mpi:// needs a store: pass ZEN_RENDEZVOUS=file:DIR or
//    redis://..., or use the MPI transport.)
//  - ZEN_RENDEZVOUS, when set, overrides the rendezvous URL of either.
// std::nullopt when neither launcher's variables are present; InvalidArgument
// naming the variable for a malformed value (rank outside [0, size), bad
// port, ...).
std::optional<LaunchInfo> RendezvousFromEnv(const std::map<std::string, std::string>& env);

}  // namespace zen

namespace zen {

// ---- zen's TCP store (tcp://HOST:PORT; env:// under torchrun) ----
//
// Rank 0 hosts it (host_it = true): a thread serving set-if-absent, get and
// has on HOST:PORT (bound to that address only) for as long as the returned
// store lives, which ConnectGloo keeps until the mesh is up. The other ranks
// connect to it, retrying until `timeout` (rank 0 may start later); no reply
// is waited for past `timeout` after the store was opened.
//
// Every connection starts with `secret` (at most 256 bytes; the server
// compares it in constant time and closes a connection that brings another
// one). Empty secrets match each other: without one, anyone who can reach
// the port can read and add keys, i.e. join the job. RendezvousFromEnv
// derives one from the launcher's variables (see LaunchInfo::secret).
//
// Limits: keys of at most 4 KiB, values of at most 16 MiB, 256 MiB and 4096
// connections in all; a client that breaks them is disconnected. Replies are
// buffered only up to 1 MiB per client (plus one value) and 64 MiB in all:
// the server reads no more requests from a client until its replies drain,
// and disconnects a client whose replies make no progress for `timeout`
// (at least 1 s). The protocol is zen's own (not torch's TCPStore
// protocol) and unencrypted.
std::shared_ptr<gloo::rendezvous::Store> OpenTcpStore(const std::string& host, int port,
                                                      bool host_it,
                                                      std::chrono::milliseconds timeout,
                                                      int rank = -1,
                                                      const std::string& secret = "");

// The TCP store's request framing, for its fuzz target (fuzz/store_fuzz.cc)
// and tests: applies the complete requests at the front of `in` to `table`,
// appending their replies to `out`, until `out` holds `out_limit` bytes.
// `hello_done` says whether the connection has sent a matching secret; a
// first request other than a hello with `secret` is malformed. ok = false
// for a malformed request (the server then drops the client); `consumed`
// counts the bytes of the requests served.
class TcpStoreTable;
std::shared_ptr<TcpStoreTable> NewTcpStoreTable();
struct TcpStoreFraming {
  size_t consumed = 0;
  bool ok = true;
};
TcpStoreFraming ServeTcpStoreRequests(TcpStoreTable& table, std::span<const char> in,
                                      std::vector<char>& out, size_t out_limit, bool& hello_done,
                                      std::string_view secret);

}  // namespace zen
