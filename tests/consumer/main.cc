// A downstream project: find_package(zen) + zen::zen, syncing over the
// in-process backend to prove the installed headers and libraries link, and
// that the installed zen/version.h carries the package's version.
#include <cstdio>
#include <cstring>

#include "zen/comm/testing.h"
#include "zen/core/reduce.h"
#include "zen/schemes/registry.h"
#include "zen/version.h"

int main() {
  const auto inputs = std::vector<zen::SparseTensor>{
      zen::SparseTensor::FromCoo(10, 2, {1, 4}, {1, 2, 3, 4}),
      zen::SparseTensor::FromCoo(10, 2, {4, 9}, {5, 6, 7, 8})};
  const zen::DenseReference ref(inputs);
  int bad = 0;
  zen::testing::RunRanks(zen::testing::Backend::kInProc, 2, [&](zen::Communicator& comm) {
    auto sum = zen::BuiltinSchemes().Create("agsparse")->Sync(comm, inputs[comm.rank()]);
    if (ref.Compare(sum).rows_mismatch != 0 || ref.Compare(sum).max_rel_error > 1e-6) ++bad;
  });
  if (std::strcmp(zen::kVersion, ZEN_PACKAGE_VERSION) != 0) {
    std::printf("consumer: zen/version.h says %s, the package %s\n", zen::kVersion, ZEN_PACKAGE_VERSION);
    return 1;
  }
  std::printf("consumer: %s (zen %s)\n", bad ? "WRONG" : "ok", zen::kVersion);
  return bad;
}
