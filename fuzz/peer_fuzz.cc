// libFuzzer target: every registered scheme (auto included) on rank 0 of a
// world of 2-4 whose peers are the fuzz input (StreamComm), for 1-3 calls
// of one scheme object (its state kept across calls): the metadata
// exchange, counts, headers, COO / bitmap / block / dense messages, the
// profiler's summaries. Whatever the peers send, rank 0 must end in a zen
// error or a well-formed sum; never a crash, a hang, an exception outside
// the error model, or an allocation of a size a peer announced beyond what
// the tensor can hold. Input: PeerCase parameters, then the stream.
#include "fuzz/fuzz_cases.h"
#include "zen/analysis/auto_scheme.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const zen::SchemeRegistry registry = zen::AllSchemes();
  static const std::vector<std::string> ids = registry.ids();
  zen::fuzz::Input in(data, size);
  const zen::fuzz::PeerCase c = zen::fuzz::PeerCase::Read(in);
  zen::fuzz::StreamComm comm(c.world, in.Rest());
  try {
    zen::fuzz::RunPeerCase(c, registry, ids[c.scheme % ids.size()], comm, 0);
  } catch (const zen::Error&) {
  }
  return 0;
}
