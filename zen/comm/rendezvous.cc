#include "zen/comm/rendezvous.h"

#include <algorithm>
#include <exception>
#include <optional>
#include <random>
#include <thread>

#include "zen/comm/timeout.h"
#include "zen/core/error.h"

namespace zen {
namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

std::vector<char> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

// The first g with no key "<gen>/<g>" (generations are claimed in order).
int64_t FirstFreeGeneration(gloo::rendezvous::Store& store, const std::string& gen) {
  auto has = [&](int64_t g) { return StoreHas(store, gen + std::to_string(g)); };
  if (!has(0)) return 0;
  int64_t lo = 0, hi = 1;  // has(lo), probe hi
  while (has(hi)) {
    lo = hi;
    if (hi > (int64_t{1} << 40)) {
      throw FormatError(Where{}, "rendezvous: more than 2^40 generations under '", gen, "'");
    }
    hi *= 2;
  }
  while (hi - lo > 1) {  // has(lo), !has(hi)
    const int64_t mid = lo + (hi - lo) / 2;
    (has(mid) ? lo : hi) = mid;
  }
  return hi;
}

uint64_t DrawNonce() {
  std::random_device rd;
  uint64_t n = 0;
  while (n == 0) n = (uint64_t{rd()} << 32) ^ rd();
  return n;
}

std::string NonceText(uint64_t n) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(n));
  return buf;
}

// The nonce stored in "gen/<g>": 16 hex digits.
uint64_t ParseNonce(const std::vector<char>& bytes, int self, const std::string& key) {
  const std::string text(bytes.begin(), bytes.end());
  if (text.size() != 16 || text.find_first_not_of("0123456789abcdef") != std::string::npos) {
    throw FormatError(Where{self}, "rendezvous: key '", key, "' holds ", bytes.size(),
                      " bytes that are not a generation nonce (16 hex digits)");
  }
  return std::stoull(text, nullptr, 16);
}

Millis Poll(Clock::time_point start) {
  const auto waited = Since(start).count();
  return Millis(waited < 100 ? 2 : waited < 1000 ? 10 : 50);
}

[[noreturn]] void ThrowMissing(int self, Clock::time_point start, Millis timeout,
                               const std::string& key, int missing, int world,
                               const std::string& note) {
  throw TransportError(
      Where{self}, "rendezvous: waited ", Since(start).count(), " ms (timeout ", timeout.count(),
      " ms) for key '", key, "'",
      missing >= 0 ? " (the address of rank " + std::to_string(missing) + ": is rank " +
                         std::to_string(missing) +
                         " running, with the same rendezvous, prefix, job and world size?)"
                   : std::string(),
      " in a world of ", world, " ranks", note);
}

}  // namespace

RunRendezvous JoinRun(gloo::rendezvous::Store& store, const std::string& prefix,
                      const std::string& job, const RendezvousValue& mine,
                      Clock::time_point deadline, Millis timeout, const std::string& rendezvous,
                      const WaitProgress& progress) {
  // "waited" in messages counts from the start of the connect (the deadline
  // is its start plus the timeout), not of this call.
  const auto start = std::min(Clock::now(), deadline - timeout);
  const int self = mine.rank, world = mine.world;
  const std::string root = prefix + (job.empty() ? "" : "/" + job);
  const std::string gen = root + "/gen/";
  auto gen_key = [&](int64_t g) { return gen + std::to_string(g); };
  auto base_of = [&](int64_t g) { return root + "/" + std::to_string(g); };
  auto addr_key = [&](int64_t g, int r) { return base_of(g) + "/addr/" + std::to_string(r); };
  auto ready_key = [&](int64_t g) { return base_of(g) + "/ready"; };
  auto abort_key = [&](int64_t g) { return base_of(g) + "/abort"; };
  auto store_error = [&](const char* what, const std::string& key) {
    return TransportError(Where{self}, "rendezvous: ", what, " key '", key,
                          "' failed: ", DescribeException(std::current_exception()));
  };
  const std::string where =
      (rendezvous.empty() ? std::string("through the store passed to connect")
                          : "'" + rendezvous + "'") +
      " (keys '" + root + "/...')";
  auto concurrent = [&](const std::string& what) {
    return MismatchError(Where{self}, "rendezvous ", where,
                         " is used by another job at the same time: ", what,
                         ". Give each job its own directory or ?job=ID (GlooOptions::job, "
                         "connect_url(..., job=ID), or its own prefix with connect(store, ...); "
                         "torchrun, mpirun and zen bench give each job its own)");
  };
  // The reason in "<g>/abort", if that key exists.
  auto abort_reason = [&](int64_t g) -> std::optional<std::string> {
    const std::string key = abort_key(g);
    if (!StoreHas(store, key)) return std::nullopt;
    std::vector<char> bytes;
    try {
      bytes = store.get(key);
    } catch (...) {
      throw store_error("reading", key);
    }
    return std::string(bytes.begin(), bytes.end());
  };
  // Best effort: the abort is a courtesy to the other ranks; this rank fails
  // either way.
  auto abort_run = [&](int64_t g, const std::string& reason) {
    try {
      StoreTrySet(store, abort_key(g), Bytes(reason));
    } catch (...) {
    }
  };
  auto get_value = [&](const std::string& key) {
    try {
      return store.get(key);
    } catch (...) {
      throw store_error("reading", key);
    }
  };
  RendezvousValue me = mine;
  // Every progress.every, one line naming whom this rank waits for.
  auto last_notice = start;
  auto notice_due = [&] {
    if (!progress.notice || progress.every.count() <= 0 || Since(last_notice) < progress.every) {
      return false;
    }
    last_notice = Clock::now();
    return true;
  };
  auto say = [&](const std::string& what) {
    progress.notice("zen: rank " + std::to_string(self) + " has waited " +
                    std::to_string(Since(start).count() / 1000) + " s (timeout " +
                    std::to_string(timeout.count() / 1000) + " s) at rendezvous " + where +
                    " for " + what);
  };
  // "ranks 1, 3, 5 of 8" (at most 16 named) among those without an
  // address in generation g.
  auto missing_in = [&](int64_t g, int from) {
    std::vector<int> missing;
    int count = 0;
    for (int q = from; q < world; ++q) {
      if (q == self || StoreHas(store, addr_key(g, q))) continue;
      if (++count <= 16) missing.push_back(q);
    }
    if (count == 0) return std::string();
    std::string out = count == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < missing.size(); ++i) {
      if (i > 0) out += ", ";
      out += std::to_string(missing[i]);
    }
    if (count > static_cast<int>(missing.size())) {
      out += " and " + std::to_string(count - static_cast<int>(missing.size())) + " more";
    }
    return out + " of " + std::to_string(world) + " (not arrived yet)";
  };

  // How long to wait for a live rank 0 to answer a sign of another job.
  const Millis grace = std::max(Millis(1), std::min(kConcurrentGrace, timeout / 4));
  RunRendezvous run;
  int64_t g = -1;
  int64_t prev = -1;          // rank 0: the generation before its own
  bool prev_forming = false;  // rank 0: prev was neither ready nor aborted at the claim
  // Until "<g>/ready" is out: another job's claim of g + 1 means two jobs
  // share these keys; so does an abort of a still-forming g - 1 (its rank 0
  // saw this claim).
  auto check_concurrent = [&] {
    const std::string dup = base_of(g) + "/dup";
    if (StoreHas(store, dup)) {
      const std::vector<char> who = get_value(dup);
      const std::string reason = "two processes claim one rank of generation " +
                                 std::to_string(g) + " (" + std::string(who.begin(), who.end()) +
                                 ")";
      abort_run(g, reason);
      throw concurrent(reason);
    }
    if (StoreHas(store, gen_key(g + 1))) {
      const std::string reason = "a rank 0 claimed generation " + std::to_string(g + 1) +
                                 " while generation " + std::to_string(g) +
                                 " (this rank 0's) was still forming";
      abort_run(g, reason);
      throw concurrent(reason);
    }
    if (!prev_forming) return;
    if (auto why = abort_reason(prev)) {
      const std::string reason = "generation " + std::to_string(prev) +
                                 ", still forming when this rank 0 claimed generation " +
                                 std::to_string(g) + ", was aborted (" + *why + ")";
      abort_run(g, reason);
      throw concurrent(reason);
    }
  };
  if (self == 0) {
    me.nonce = DrawNonce();
    const std::vector<char> nonce_text = Bytes(NonceText(me.nonce));
    g = FirstFreeGeneration(store, gen);
    for (int tries = 0;; ++tries, ++g) {
      // The state of g - 1 is read before the claim: an abort of it seen
      // after the claim is then its rank 0's answer to this one.
      prev = g - 1;
      prev_forming =
          prev >= 0 && !StoreHas(store, ready_key(prev)) && !StoreHas(store, abort_key(prev));
      bool claimed = false;
      try {
        claimed = StoreTrySet(store, gen_key(g), nonce_text);
      } catch (...) {
        throw store_error("claiming", gen_key(g));
      }
      if (claimed) break;
      if (tries > 64 || Clock::now() >= deadline) {
        throw TransportError(Where{self}, "rendezvous: could not claim a generation under '", gen,
                             "' (is another rank 0 running with the same prefix and job?)");
      }
    }
    // A store whose set-if-absent is not atomic (torch's) may have let another
    // rank 0 claim the same generation; its nonce is then the one stored.
    if (get_value(gen_key(g)) != nonce_text) {
      throw concurrent("another rank 0 claimed generation " + std::to_string(g) +
                       " at the same moment");
    }
    const auto claimed_at = Clock::now();
    try {
      if (!StoreTrySet(store, addr_key(g, 0), EncodeRendezvousValue(me))) {
        throw TransportError(Where{self}, "rendezvous: key '", addr_key(g, 0),
                             "' exists although this rank claimed the generation");
      }
    } catch (const Error&) {
      throw;
    } catch (...) {
      throw store_error("publishing", addr_key(g, 0));
    }
    bool prev_settled = !prev_forming;
    int r = 1;
    for (;;) {
      check_concurrent();
      if (!prev_settled && (Since(claimed_at) >= grace || StoreHas(store, ready_key(prev)))) {
        prev_settled = true;  // a dead run's leftover, or a run that completed meanwhile
      }
      while (r < world && StoreHas(store, addr_key(g, r))) ++r;
      if (r == world && prev_settled) break;
      if (notice_due()) {
        say(r < world ? missing_in(g, r)
                      : "generation " + std::to_string(prev) + " (a live job, or a dead run's leftover)");
      }
      if (Clock::now() >= deadline) {
        if (r < world) ThrowMissing(self, start, timeout, addr_key(g, r), r, world, "");
        ThrowMissing(self, start, timeout, abort_key(prev), -1, world,
                     ": the timeout ended while this rank 0 waited to see whether generation " +
                         std::to_string(prev) + " belongs to a live job");
      }
      std::this_thread::sleep_for(Poll(start));
    }
  } else {
    int64_t claimed = -1;  // the generation this rank published in
    int64_t skip = -1;     // newest generation whose slot for this rank was taken, or aborted
    int64_t left = -1;     // a still-forming generation this rank left for a newer one
    int64_t dup = -1;      // a still-forming generation whose slot for this rank was taken
    Clock::time_point dup_at{};
    for (;;) {
      const int64_t newest = FirstFreeGeneration(store, gen) - 1;
      if (dup >= 0) {
        // Its rank 0, if alive, aborts it on seeing the duplicate; if not
        // within the grace, it is a dead run's leftover (or it completed
        // first: the order no protocol can see).
        if (auto why = abort_reason(dup)) {
          throw concurrent("another process holds this rank's slot in generation " +
                           std::to_string(dup) + ", which was aborted (" + *why + ")");
        }
        if (Since(dup_at) >= grace || StoreHas(store, ready_key(dup))) dup = -1;
      }
      if (claimed >= 0) {
        if (auto why = abort_reason(claimed)) {
          throw concurrent("generation " + std::to_string(claimed) +
                           ", which this rank joined, was aborted (" + *why + ")");
        }
        if (left >= 0) {
          if (auto why = abort_reason(left)) {
            throw concurrent("generation " + std::to_string(left) +
                             ", which this rank joined first, was aborted (" + *why + ")");
          }
        }
        if (StoreHas(store, ready_key(claimed))) break;
      }
      if (notice_due()) {
        const std::string missing = claimed < 0 ? std::string() : missing_in(claimed, 0);
        say(claimed < 0 ? "rank 0 to start a run (not arrived yet)"
            : missing.empty() ? "rank 0 to confirm the run (every rank has arrived)"
                              : missing);
      }
      if (newest >= 0 && newest > claimed && newest != skip) {
        if (StoreHas(store, abort_key(newest))) {
          skip = newest;
        } else {
          me.nonce = ParseNonce(get_value(gen_key(newest)), self, gen_key(newest));
          bool ok = false;
          try {
            ok = StoreTrySet(store, addr_key(newest, self), EncodeRendezvousValue(me));
          } catch (...) {
            throw store_error("publishing", addr_key(newest, self));
          }
          if (ok) {
            if (claimed >= 0 && !StoreHas(store, ready_key(claimed))) left = claimed;
            claimed = newest;
          } else {
            skip = newest;
            if (!StoreHas(store, ready_key(newest))) {
              // A still-forming generation with this rank's slot taken: a
              // leftover of a dead run, or another job's rank in it. Tell
              // its rank 0 (best effort), which aborts it if alive.
              try {
                StoreTrySet(store, base_of(newest) + "/dup",
                            Bytes("rank " + std::to_string(self) +
                                  " found its slot taken by another process"));
              } catch (...) {
              }
              dup = newest;
              dup_at = Clock::now();
            }
          }
        }
      }
      if (Clock::now() >= deadline) {
        if (claimed < 0) {
          std::string note =
              newest < 0 ? ": rank 0 has not started a run (is rank 0 running, with the "
                           "same rendezvous, prefix and job?)"
                         : ": the slot of this rank in the newest run is taken (a "
                           "duplicate rank, or rank 0 has not started this run yet)";
          if (newest >= 0) {
            if (auto why = abort_reason(newest)) {
              note = ": the newest run (generation " + std::to_string(newest) +
                     ") was aborted: " + *why + "; give each job its own directory or ?job=ID";
            }
          }
          ThrowMissing(self, start, timeout, newest < 0 ? gen + "0" : gen_key(newest + 1), -1,
                       world, note);
        }
        for (int q = 0; q < world; ++q) {
          if (!StoreHas(store, addr_key(claimed, q))) {
            ThrowMissing(self, start, timeout, addr_key(claimed, q), q, world, "");
          }
        }
        ThrowMissing(self, start, timeout, ready_key(claimed), -1, world,
                     ": every rank has published, but rank 0 has not confirmed the run");
      }
      std::this_thread::sleep_for(Poll(start));
    }
    g = claimed;
    // Rank 0's confirmation names its world size and the generation's nonce.
    const std::string ready = ready_key(g);
    const RendezvousValue confirmed = DecodeRendezvousValue(get_value(ready), world, 0, self, ready);
    if (confirmed.nonce != me.nonce) {
      throw concurrent("rank 0 confirmed generation " + std::to_string(g) + " with nonce " +
                       NonceText(confirmed.nonce) + ", this rank joined it with nonce " +
                       NonceText(me.nonce));
    }
  }

  run.generation = g;
  run.nonce = me.nonce;
  run.base = base_of(g);
  run.peers.resize(static_cast<size_t>(world));
  auto confirm = [&] {
    RendezvousValue ready{world, 0, 0, {}, me.nonce};
    return EncodeRendezvousValue(ready);
  };
  for (int r = 0; r < world; ++r) {
    if (r == self) {
      run.peers[static_cast<size_t>(r)] = me;
      continue;
    }
    const std::string key = addr_key(g, r);
    const std::vector<char> bytes = get_value(key);
    try {
      run.peers[static_cast<size_t>(r)] = DecodeRendezvousValue(bytes, world, r, self, key);
    } catch (const MismatchError&) {
      if (self == 0) {  // tell the others before giving up
        try {
          StoreTrySet(store, ready_key(g), confirm());
        } catch (...) {
        }
      }
      throw;
    }
    if (run.peers[static_cast<size_t>(r)].nonce != me.nonce) {
      const std::string reason =
          "rank " + std::to_string(r) + " published in generation " + std::to_string(g) +
          " with nonce " + NonceText(run.peers[static_cast<size_t>(r)].nonce) + ", not " +
          NonceText(me.nonce) + " (that generation's)";
      if (self == 0) abort_run(g, reason);
      throw concurrent(reason);
    }
  }
  if (self == 0) {
    check_concurrent();  // one last look before confirming
    try {
      StoreTrySet(store, ready_key(g), confirm());
    } catch (const Error&) {
      throw;
    } catch (...) {
      throw store_error("publishing", ready_key(g));
    }
  }
  return run;
}

}  // namespace zen
