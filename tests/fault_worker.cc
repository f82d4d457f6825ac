// zen_fault_worker — one rank of a small job for the fault tests
// (tests/fault_kill_test.cc): connects over Gloo TCP through a file store,
// runs a scheme on a large synthetic tensor a few times, and reports how it
// ended. The victim rank (--kill-at) SIGKILLs itself at a chosen phase of the
// first call: a test-only hook that lives in this binary, not the library.
//
//   zen_fault_worker --rank R --world N --store DIR|URL --scheme zen
//                    [--rows 100000 --width 32 --calls 3 --timeout-ms 3000]
//                    [--kill-at push|pull] [--prefix P] [--hostname ADDR] [--job ID]
//                    [--value V]
// --value V: every rank holds every row with value V instead of the synthetic
// tensor, and every sum must be world x V in every entry (a rank paired with
// the ranks of another job, whose V differs, sees another sum).
// Exit: 0 all calls done; 3 TransportError; 4 another zen error; 5 a wrong
// sum; 2 usage. The last line on stderr is "<kind> after <ms> ms: <message>";
// with --value a finished run prints "sum <value>" before it.
// The last line on stderr is "<kind> after <ms> ms: <message>".
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "zen/comm/gloo_communicator.h"
#include "zen/core/error.h"
#include "zen/schemes/registry.h"
#include "zen/workload/synthetic.h"

namespace {

using Clock = std::chrono::steady_clock;

// Forwards to a real communicator; on the k-th large send (k counted from
// 1) it posts the send, lets it start, and kills the process.
class KillSwitch final : public zen::Communicator {
 public:
  KillSwitch(std::unique_ptr<zen::Communicator> inner, int kill_on_large_send)
      : Communicator(inner->rank(), inner->size(), inner->timeout()),
        inner_(std::move(inner)),
        kill_on_(kill_on_large_send) {
    // Continue the call numbering of the wrapped communicator (ConnectGloo's
    // barrier has already taken tags), or every call would be a mismatch.
    const zen::Tag next = inner_->NextTag();
    while (next > 1 && NextTag() + 1 < next) {
    }
  }

  std::unique_ptr<zen::Request> Send(int peer, zen::Tag tag,
                                     std::span<const std::byte> data) override {
    auto r = inner_->Send(peer, tag, data);
    if (data.size() >= kLarge && ++large_sends_ == kill_on_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // bytes in flight
      std::fprintf(stderr, "rank %d: SIGKILL on large send %d (%zu bytes to %d)\n", rank(),
                   large_sends_, data.size(), peer);
      ::raise(SIGKILL);
    }
    return r;
  }
  std::unique_ptr<zen::Request> Recv(int peer, zen::Tag tag, std::span<std::byte> data) override {
    return inner_->Recv(peer, tag, data);
  }
  std::unique_ptr<zen::Request> RecvUpTo(int peer, zen::Tag tag, zen::ByteBuffer& out,
                                         int64_t max_bytes) override {
    return inner_->RecvUpTo(peer, tag, out, max_bytes);
  }

 private:
  static constexpr size_t kLarge = 1 << 16;
  std::unique_ptr<zen::Communicator> inner_;
  int kill_on_;
  int large_sends_ = 0;
};

std::map<std::string, std::string> ParseFlags(int argc, char** argv) {
  std::map<std::string, std::string> f;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string key = argv[i];
    if (key.rfind("--", 0) != 0) break;
    f[key.substr(2)] = argv[i + 1];
  }
  return f;
}

int64_t Int(const std::map<std::string, std::string>& f, const std::string& key, int64_t fallback) {
  auto it = f.find(key);
  return it == f.end() ? fallback : std::stoll(it->second);
}

int Report(const char* kind, Clock::time_point start, const char* what, int code) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  std::fprintf(stderr, "%s after %lld ms: %s\n", kind, static_cast<long long>(ms), what);
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  const auto flags = ParseFlags(argc, argv);
  if (!flags.count("rank") || !flags.count("world") || !flags.count("store")) {
    std::fprintf(stderr, "usage: zen_fault_worker --rank R --world N --store DIR [...]\n");
    return 2;
  }
  const int rank = static_cast<int>(Int(flags, "rank", 0));
  const int world = static_cast<int>(Int(flags, "world", 2));
  const auto start = Clock::now();
  try {
    zen::GlooOptions options;
    // --store DIR, or a URL (tcp://HOST:PORT, redis://..., file:DIR?job=...).
    const std::string& store = flags.at("store");
    options.rendezvous = store.find(':') != std::string::npos ? store : "file:" + store;
    options.prefix = flags.count("prefix") ? flags.at("prefix") : "fault";
    options.timeout = std::chrono::milliseconds(Int(flags, "timeout-ms", 3000));
    if (flags.count("hostname")) options.hostname = flags.at("hostname");
    if (flags.count("job")) options.job = flags.at("job");
    std::unique_ptr<zen::Communicator> comm = zen::ConnectGloo(rank, world, options);
    const std::string kill_at = flags.count("kill-at") ? flags.at("kill-at") : "";
    if (!kill_at.empty()) {
      // With the peer pattern, a rank's first n-1 large sends are its push
      // (AllToAllV) and the next n-1 its pull (AllGatherV).
      const int k = kill_at == "push" ? 1 : kill_at == "pull" ? world : 0;
      if (k == 0) throw zen::InvalidArgument("--kill-at must be push or pull");
      comm = std::make_unique<KillSwitch>(std::move(comm), k);
    }
    zen::SyntheticSpec spec;
    spec.rows = Int(flags, "rows", 100000);
    spec.width = Int(flags, "width", 32);
    spec.density = 0.5;
    spec.skew = 0;
    const bool fixed = flags.count("value") != 0;
    const float value = fixed ? std::stof(flags.at("value")) : 0.0f;
    zen::SparseTensor local;
    if (fixed) {
      std::vector<int64_t> ids(static_cast<size_t>(spec.rows));
      for (int64_t i = 0; i < spec.rows; ++i) ids[static_cast<size_t>(i)] = i;
      local = zen::SparseTensor::FromCoo(
          spec.rows, spec.width, std::move(ids),
          std::vector<float>(static_cast<size_t>(spec.rows * spec.width), value));
    } else {
      local = zen::GenerateSyntheticRank(spec, rank);
    }
    local.set_name("fault");
    auto scheme = zen::BuiltinSchemes().Create(flags.count("scheme") ? flags.at("scheme") : "zen");
    std::fprintf(
        stderr, "rank %d: connected after %lld ms\n", rank,
        static_cast<long long>(
            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count()));
    const int64_t calls = Int(flags, "calls", 3);
    for (int64_t c = 0; c < calls; ++c) {
      const zen::SparseTensor sum = scheme->Sync(*comm, local);
      if (sum.rows() != spec.rows) return Report("WrongResult", start, "rows changed", 5);
      if (fixed) {
        const float want = value * static_cast<float>(world);
        for (const float v : sum.values()) {
          if (v != want) {
            std::fprintf(stderr, "sum %g\n", static_cast<double>(v));
            return Report("WrongResult", start, "a sum mixes values of another job", 5);
          }
        }
        std::fprintf(stderr, "sum %g\n", static_cast<double>(want));
      }
    }
    return Report("Done", start, "all calls completed", 0);
  } catch (const zen::TransportError& e) {
    return Report("TransportError", start, e.what(), 3);
  } catch (const zen::Error& e) {
    return Report("Error", start, e.what(), 4);
  }
}
