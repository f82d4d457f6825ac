// libFuzzer target: zen::TraceReader (zen/workload/trace.h) on a file holding
// the input: opening validates the header, then every rank of every tensor
// is read. Anything malformed must be a FormatError.
#include <unistd.h>

#include <fstream>
#include <string>

#include "fuzz/fuzz_cases.h"
#include "zen/workload/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/zen-trace-fuzz-" + std::to_string(::getpid());
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    zen::TraceReader reader(path);
    for (const zen::TraceTensorInfo& info : reader.tensors()) {
      for (int r = 0; r < reader.world_size(); ++r) {
        const zen::SparseTensor t = reader.ReadRank(info.name, r);
        zen::fuzz::CheckTensor(t, info.rows, info.width);
        if (static_cast<int64_t>(t.nnz()) != info.nnz[static_cast<size_t>(r)]) {
          zen::fuzz::Fail("nnz differs from the header");
        }
      }
    }
  } catch (const zen::FormatError&) {
  }
  return 0;
}
