// libFuzzer target: zen::Context batches (dense and sparse tensors,
// coalesced groups, a tensor with its own scheme, a sum order, half-width
// wire values; BatchCase) on rank 0 of a world of 2-4 whose peers are the
// fuzz input (StreamComm), one batch or three in a row: each batch's
// metadata round, the second round that names a differing tensor, and each
// group's scheme exchange. Whatever the peers send, a batch must end in a
// zen error from Wait() or well-formed sums; never a crash, a hang or an
// exception outside the error model. Input: BatchCase parameters, then the
// stream.
#include "fuzz/fuzz_cases.h"
#include "zen/analysis/auto_scheme.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::string> ids = zen::AllSchemes().ids();
  zen::fuzz::Input in(data, size);
  const zen::fuzz::BatchCase c = zen::fuzz::BatchCase::Read(in);
  zen::fuzz::StreamComm comm(c.world, in.Rest());
  try {
    zen::fuzz::RunBatchCase(c, ids[c.scheme % ids.size()], comm, 0);
  } catch (const zen::Error&) {
  }
  return 0;
}
