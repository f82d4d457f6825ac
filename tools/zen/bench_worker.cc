// One rank of `zen bench`: the measurement loop and the gather to rank 0.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>

#include "tools/zen/bench.h"
#include "tools/zen/registry_view.h"
#include "zen/analysis/auto_scheme.h"
#include "zen/comm/collectives.h"
#include "zen/core/error.h"
#include "zen/core/reduce.h"
#include "zen/schemes/zen/zen.h"
#include "zen/testing/reference.h"
#include "zen/workload/synthetic.h"

namespace zen::cli {

void CheckDenseOutputFits(int64_t rows, int64_t width, uint64_t processes, uint64_t memory_bytes) {
  uint64_t elements = 0, bytes = 0, total = 0;
  const bool exact = rows >= 0 && width >= 0 &&
                     !__builtin_mul_overflow(static_cast<uint64_t>(rows),
                                             static_cast<uint64_t>(width), &elements) &&
                     !__builtin_mul_overflow(elements, sizeof(float), &bytes);
  if (exact && !__builtin_mul_overflow(bytes, processes, &total) && total <= memory_bytes) return;
  const std::string need =
      exact ? std::to_string(bytes)
            : detail::Concat("about ", static_cast<double>(rows) * static_cast<double>(width) * 4);
  throw InvalidArgument(detail::Concat(
      "--output dense: the [", rows, " x ", width, "] float32 result buffer needs ", need, " bytes",
      processes > 1 ? detail::Concat(" in each of ", processes, " workers") : std::string(),
      ", more than this machine's ", memory_bytes, " bytes of memory"));
}
namespace {

using nlohmann::json;

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Bytes through this host's interface (testbed: read inside its namespace),
// so the figures include TCP/IP and Gloo framing.
struct WireCounters {
  uint64_t sent = 0, recv = 0;
};
std::optional<WireCounters> ReadWire(const std::string& iface) {
  if (iface.empty()) return std::nullopt;
  const std::string dir = "/sys/class/net/" + iface + "/statistics/";
  std::ifstream tx(dir + "tx_bytes"), rx(dir + "rx_bytes");
  WireCounters c;
  if (!(tx >> c.sent) || !(rx >> c.recv)) {
    throw InvalidArgument("cannot read the counters of interface " + iface + " in " + dir);
  }
  return c;
}

// This rank's measurements of one scheme.
json MeasureScheme(Communicator& comm, const std::string& id, const Workload& workload,
                   const DenseReference& reference, const BenchConfig& config, int index) {
  SchemeOptions options;
  options.threads = config.threads;
  options.check_agreement = config.check_agreement;
  auto scheme = CliSchemes(config.env).Create(id, options);
  const SparseTensor& local = workload.per_rank[static_cast<size_t>(comm.rank())];
  json out = {{"scheme", id}};
  std::vector<double> times;
  double max_err = 0, cpu = 0;
  int64_t mismatch = 0;
  uint64_t sent = 0, recv = 0;
  std::optional<WireCounters> wire0;
  // zen's own phase clocks (ZenStats), summed over the measured calls.
  double phase[5] = {0, 0, 0, 0, 0};
  bool has_phases = false;
  // `auto` times its shortlist on its first calls (auto_scheme.h): those
  // calls are added to the warm-up, so the measured ones are its steady
  // state (what a training job gets after its first steps); how many there
  // were is reported. The same on every rank (the trials end together).
  auto* autoscheme = dynamic_cast<AutoScheme*>(scheme.get());
  std::vector<float> dense_out;
  if (config.output_dense) {
    CheckDenseOutputFits(local.rows(), local.width(), 1, MachineMemoryBytes());
    dense_out.resize(static_cast<size_t>(local.rows()) * static_cast<size_t>(local.width()));
  }
  int warmup = config.warmup;
  int trial_calls = 0;
  for (int it = 0; it < warmup + config.iters; ++it) {
    const int total = warmup + config.iters;
    if (config.progress && comm.rank() == 0) {
      const std::string where = config.point.empty() ? "" : config.point + ": ";
      if (isatty(STDERR_FILENO)) {
        std::fprintf(stderr, "\r  %sscheme %d of %zu (%-10s) iteration %d of %d   ", where.c_str(),
                     index + 1, config.schemes.size(), id.c_str(), it + 1, total);
      } else if (it == 0) {
        // One plain line per scheme where nothing redraws a line (CI logs).
        std::fprintf(stderr, "zen bench: %sscheme %d of %zu (%s), %d iterations\n", where.c_str(),
                     index + 1, config.schemes.size(), id.c_str(), total);
      }
    }
    if (it == warmup && autoscheme != nullptr && !autoscheme->settled(local.name())) {
      ++warmup;
      ++trial_calls;
    }
    Barrier(comm);
    if (it == warmup && !config.wire_iface.empty()) {
      // Every warm-up byte has arrived (barrier above); nothing measured has
      // started (barrier below).
      wire0 = ReadWire(config.wire_iface);
      Barrier(comm);
    }
    comm.ResetCounters();
    const double cpu0 = CpuSeconds();
    const auto t0 = std::chrono::steady_clock::now();
    SparseTensor sum;
    if (config.output_dense) {
      scheme->SyncInto(comm, local, dense_out);
    } else {
      sum = scheme->Sync(comm, local);
    }
    const auto t1 = std::chrono::steady_clock::now();
    const double cpu1 = CpuSeconds();
    sent = comm.counters().total_sent();
    recv = comm.counters().total_recv();
    const Agreement a =
        config.output_dense ? reference.CompareDense(dense_out) : reference.Compare(sum);
    max_err = std::max(max_err, a.max_rel_error);
    mismatch = std::max(mismatch, a.rows_mismatch);
    if (it >= warmup) {
      times.push_back(std::chrono::duration<double>(t1 - t0).count());
      cpu += cpu1 - cpu0;
      if (const ZenStats* z = ZenLastStats(*scheme)) {
        has_phases = true;
        phase[0] += z->partition_seconds;
        phase[1] += z->push_seconds;
        phase[2] += z->aggregate_seconds;
        phase[3] += z->pull_seconds;
        phase[4] += z->decode_seconds;
      }
    }
  }
  if (autoscheme != nullptr) {
    json a = {{"extra_warmup_calls", trial_calls}};
    if (const AutoDecision* d = autoscheme->decision(local.name())) {
      a["chosen"] = d->chosen;
      a["predicted"] = d->predicted;
      a["measured"] = d->measured;
      json trials = json::array();
      for (const AutoTrial& t : d->trials) {
        trials.push_back({{"scheme", t.scheme},
                          {"median_s", t.median_s},
                          {"times_s", t.times_s},
                          {"dropped", t.dropped}});
      }
      a["trials"] = trials;
    }
    out["auto"] = a;
  }
  if (wire0) {
    // Over the measured iterations and their barriers, per iteration.
    Barrier(comm);
    const WireCounters wire1 = *ReadWire(config.wire_iface);
    out["wire_sent"] = (wire1.sent - wire0->sent) / static_cast<uint64_t>(config.iters);
    out["wire_recv"] = (wire1.recv - wire0->recv) / static_cast<uint64_t>(config.iters);
  }
  out["times"] = times;
  out["bytes_sent"] = sent;
  out["bytes_recv"] = recv;
  out["max_rel_error"] = max_err;
  out["rows_mismatch"] = mismatch;
  out["cpu_s"] = times.empty() ? 0.0 : cpu / static_cast<double>(times.size());
  if (has_phases) {
    const double k = static_cast<double>(times.size());
    out["zen_phases_s"] = {{"partition", phase[0] / k}, {"push", phase[1] / k},
                           {"aggregate", phase[2] / k}, {"pull", phase[3] / k},
                           {"decode", phase[4] / k}};
  }
  return out;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace

json CombineRanks(const std::vector<json>& ranks) {
  json out = {{"scheme", ranks[0]["scheme"]}};
  if (ranks[0].contains("error")) {
    out["error"] = ranks[0]["error"];
    return out;
  }
  const size_t iters = ranks[0]["times"].size();
  std::vector<double> per_iter(iters, 0.0);
  std::vector<uint64_t> sent, recv, wire_sent, wire_recv;
  std::vector<double> cpu;
  double err = 0;
  int64_t mismatch = 0;
  for (const json& r : ranks) {
    for (size_t i = 0; i < iters; ++i) per_iter[i] = std::max(per_iter[i], r["times"][i].get<double>());
    if (r.contains("bytes_sent")) sent.push_back(r["bytes_sent"].get<uint64_t>());
    if (r.contains("bytes_recv")) recv.push_back(r["bytes_recv"].get<uint64_t>());
    if (r.contains("wire_sent")) wire_sent.push_back(r["wire_sent"].get<uint64_t>());
    if (r.contains("wire_recv")) wire_recv.push_back(r["wire_recv"].get<uint64_t>());
    cpu.push_back(r["cpu_s"].get<double>());
    err = std::max(err, r["max_rel_error"].get<double>());
    mismatch = std::max(mismatch, r["rows_mismatch"].get<int64_t>());
  }
  const auto mean = [](const auto& v) {
    double s = 0;
    for (auto x : v) s += static_cast<double>(x);
    return v.empty() ? 0.0 : s / static_cast<double>(v.size());
  };
  out["time_s_median"] = Median(per_iter);
  out["time_s_min"] = per_iter.empty() ? 0 : *std::min_element(per_iter.begin(), per_iter.end());
  out["time_s_max"] = per_iter.empty() ? 0 : *std::max_element(per_iter.begin(), per_iter.end());
  out["times_s"] = per_iter;
  // Payload counters (absent for peers, which have none) and wire counters
  // (testbed only), each only when every rank reported them.
  const auto put = [&](const std::string& key, const std::vector<uint64_t>& v) {
    if (v.size() != ranks.size()) return;
    out[key + "_max"] = *std::max_element(v.begin(), v.end());
    out[key + "_mean"] = mean(v);
    out[key + "_per_rank"] = v;
  };
  put("bytes_sent", sent);
  put("bytes_recv", recv);
  put("wire_bytes_sent", wire_sent);
  put("wire_bytes_recv", wire_recv);
  out["cpu_s_per_rank"] = cpu;
  out["max_rel_error"] = err;
  out["rows_mismatch"] = mismatch;
  if (ranks[0].contains("auto")) out["auto"] = ranks[0]["auto"];  // the same on every rank
  if (ranks[0].contains("zen_phases_s")) {
    // Each phase's mean over the ranks of their per-call means.
    json phases = json::object();
    for (const auto& [name, _] : ranks[0]["zen_phases_s"].items()) {
      double s = 0;
      for (const json& r : ranks) s += r["zen_phases_s"].value(name, 0.0);
      phases[name] = s / static_cast<double>(ranks.size());
    }
    out["zen_phases_s"] = phases;
  }
  return out;
}

namespace {

// Per-rank must-receive bytes: every row of the sum this rank does not hold
// alone, times the row bytes (see docs/performance.md, "The limit").
std::vector<uint64_t> LowerBoundBytes(const std::vector<SparseTensor>& inputs) {
  std::map<int64_t, int> holders;
  for (const auto& t : inputs)
    for (int64_t id : t.ids()) ++holders[id];
  std::vector<uint64_t> out;
  for (const auto& t : inputs) {
    int64_t alone = 0;
    for (int64_t id : t.ids()) alone += holders[id] == 1;
    out.push_back(static_cast<uint64_t>(static_cast<int64_t>(holders.size()) - alone) * t.row_bytes());
  }
  return out;
}

json TensorSummary(const Workload& workload) {
  std::vector<uint64_t> nnz;
  for (const auto& t : workload.per_rank) nnz.push_back(t.nnz());
  const std::vector<int64_t> u = UnionIds(workload.per_rank);
  const std::vector<uint64_t> bound = LowerBoundBytes(workload.per_rank);
  const SparseTensor& t0 = workload.per_rank[0];
  return {{"source", workload.source},
          {"name", t0.name()},
          {"rows", t0.rows()},
          {"width", t0.width()},
          {"nnz_per_rank", nnz},
          {"union_rows", u.size()},
          {"lower_bound_bytes_per_rank", bound},
          {"lower_bound_bytes_max", *std::max_element(bound.begin(), bound.end())}};
}

}  // namespace

json RunWorker(Communicator& comm, const Workload& workload, const BenchConfig& config) {
  const DenseReference reference(workload.per_rank);
  const json tensor = TensorSummary(workload);
  json results = json::array();
  for (size_t k = 0; k < config.schemes.size(); ++k) {
    const std::string& id = config.schemes[k];
    json mine;
    try {
      mine = MeasureScheme(comm, id, workload, reference, config, static_cast<int>(k));
    } catch (const TransportError&) {
      throw;
    } catch (const Error& e) {
      // Input and mismatch errors are raised on every rank alike: report and go on.
      mine = {{"scheme", id}, {"error", e.what()}};
    }
    // Each scheme's row is gathered as soon as it is measured, so rank 0
    // can print it then. A rank's part is a few KiB (its times and counters).
    const std::string text = mine.dump();
    const auto gathered =
        AllGatherV(comm, std::as_bytes(std::span<const char>(text)), int64_t{64} << 20);
    // Every rank builds the report (so that every rank knows the verdict
    // and exits accordingly); rank 0 prints it.
    std::vector<json> ranks;
    for (const ByteBuffer& b : gathered) {
      ranks.push_back(json::parse(std::string(reinterpret_cast<const char*>(b.data()), b.size())));
    }
    results.push_back(CombineRanks(ranks));
    if (config.on_row && comm.rank() == 0) {
      if (config.progress && isatty(STDERR_FILENO)) std::fprintf(stderr, "\r%70s\r", "");
      config.on_row(results.back(), tensor);
    }
  }
  if (config.progress && comm.rank() == 0 && isatty(STDERR_FILENO)) {
    std::fprintf(stderr, "\r%70s\r", "");
  }
  json report = {{"world_size", comm.size()}, {"tensor", tensor},
                 {"iters", config.iters},     {"warmup", config.warmup},
                 {"output", config.output_dense ? "dense" : "sparse"},
                 {"check_agreement", config.check_agreement}};
  report["results"] = results;
  return report;
}

}  // namespace zen::cli
