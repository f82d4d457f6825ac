// A downstream project: find_package(zen) + zen::zen, syncing over the
// in-process backend to prove the installed headers and libraries link.
#include <cstdio>

#include "zen/comm/testing.h"
#include "zen/core/reduce.h"
#include "zen/schemes/registry.h"

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
  std::printf("consumer: %s\n", bad ? "WRONG" : "ok");
  return bad;
}
