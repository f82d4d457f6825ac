// libFuzzer target: every option of every scheme factory (SchemeOptions for
// each registered scheme; AutoOptions, its profiler, network, trial and
// candidate fields for auto), from the input's parameter bytes, then 1-3
// calls of the scheme built, at world size 1 and on rank 0 of a world of 2
// whose peer is the rest of the input (StreamComm). A wrong option must be
// InvalidArgument when the scheme is built (issue 41, C1: auto with
// block_values 0 died of SIGFPE on its first call); a scheme that was
// built must end each call in a zen error or a well-formed sum; never a
// crash, a hang, or an exception outside the error model.
//
// Input: scheme byte, block_values (8 bytes), threads (2 bytes, signed),
// an unused byte (the seeds' layout), then for auto: warmup, every,
// sample_ids (2 bytes),
// bandwidth, latency, within, drop (one byte each, OptionDouble), trial
// candidates, calls_each, max_tensors, a candidates bit mask (bit 7: an
// unknown id), rank_order; then the call: flags (dense, width, calls), rows
// and density bytes (PeerCase's selectors); the rest is the peer's stream.
#include <cmath>
#include <cstring>
#include <limits>

#include "fuzz/fuzz_cases.h"
#include "zen/analysis/auto_scheme.h"

namespace {

using zen::fuzz::Input;

int64_t Int64(Input& in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{in.Byte()} << (8 * i);
  int64_t out;
  std::memcpy(&out, &v, sizeof(out));
  return out;
}

int16_t Int16(Input& in) {
  const uint16_t u = in.U16();
  int16_t out;
  std::memcpy(&out, &u, sizeof(out));
  return out;
}

// The doubles worth trying for a rate, a time or a factor.
double OptionDouble(uint8_t b) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const double table[] = {std::numeric_limits<double>::quiet_NaN(), kInf, -kInf, 0.0, -1.0,
                          0.5, 1.0, 1.5, 4.0, 1e9, 5e-6, 3.125e9, 1e-300, 1e300,
                          std::numeric_limits<double>::denorm_min(), -0.0};
  return table[b % (sizeof(table) / sizeof(table[0]))];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const zen::SchemeRegistry registry = zen::AllSchemes();
  static const std::vector<std::string> ids = registry.ids();
  static const std::vector<std::string> modeled = zen::BuiltinSchemes().modeled();
  Input in(data, size);
  const std::string& id = ids[in.Byte() % ids.size()];
  zen::AutoOptions o;
  o.scheme.block_values = Int64(in);
  o.scheme.threads = Int16(in);
  static_cast<void>(in.Byte());  // unused: keeps the seeds' layout
  o.profiler.schedule.warmup_calls = static_cast<int8_t>(in.Byte());
  o.profiler.schedule.every = static_cast<int8_t>(in.Byte());
  o.profiler.sample_ids = Int16(in);
  o.network.bandwidth_bytes_per_s = OptionDouble(in.Byte());
  o.network.latency_s = OptionDouble(in.Byte());
  o.trial.within = OptionDouble(in.Byte());
  o.trial.drop = OptionDouble(in.Byte());
  o.trial.candidates = static_cast<int8_t>(in.Byte());
  o.trial.calls_each = static_cast<int8_t>(in.Byte());
  o.max_tensors = in.Byte();
  const uint8_t mask = in.Byte();
  for (size_t i = 0; i < modeled.size() && i < 7; ++i) {
    if (mask & (1u << i)) o.candidates.push_back(modeled[i]);
  }
  if (mask & 0x80) o.candidates.push_back("nosuch");
  o.rank_order = in.Byte() & 1;

  zen::fuzz::PeerCase call;
  const uint8_t flags = in.Byte();
  call.dense = flags & 1;
  call.spec.width = (flags & 2) ? 3 : 1;
  call.calls = 1 + ((flags >> 2) & 3) % 3;
  call.spec.rows = zen::fuzz::RowsOf(in.Byte());
  call.spec.density = zen::fuzz::DensityOf(in.Byte());
  call.spec.seed = 17;

  zen::SparseTensor local = zen::GenerateSyntheticRank(call.spec, 0);
  local.set_name("fuzz");
  for (int world : {1, 2}) {
    std::unique_ptr<zen::Scheme> scheme;  // a fresh one per world (call numbers start at 0)
    try {
      scheme = id == "auto" ? std::make_unique<zen::AutoScheme>(zen::BuiltinSchemes(), o)
                            : registry.Create(id, o.scheme);
    } catch (const zen::InvalidArgument&) {
      return 0;  // the documented refusal of a wrong option
    }
    zen::fuzz::StreamComm comm(world, in.Rest());
    try {
      for (int c = 0; c < call.calls; ++c) {
        if (call.dense) {
          std::vector<float> buffer = local.ToDense();
          scheme->SyncDense(comm, buffer, call.spec.rows, call.spec.width, "fuzz");
        } else {
          zen::fuzz::CheckTensor(scheme->Sync(comm, local), call.spec.rows, call.spec.width);
        }
      }
    } catch (const zen::Error& e) {
      // Alone, a scheme that was built has no peer to blame.
      if (world == 1) zen::fuzz::Fail(std::string("world size 1: ") + e.what());
    }
  }
  return 0;
}
