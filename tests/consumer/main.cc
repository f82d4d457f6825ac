// A downstream project: find_package(zen) + zen::zen, syncing two threads
// over the Gloo transport (picked from the transport table, meeting in a
// temporary file: rendezvous) to prove the installed headers and libraries link, and
// that the installed zen/version.h carries the package's version. It
// uses only the installed API: the test harness (zen_testing) is not part of
// the package, and check.cmake fails if its headers were installed.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "zen/comm/transport.h"
#include "zen/schemes/registry.h"
#include "zen/version.h"

int main() {
  const auto inputs = std::vector<zen::SparseTensor>{
      zen::SparseTensor::FromCoo(10, 2, {1, 4}, {1, 2, 3, 4}),
      zen::SparseTensor::FromCoo(10, 2, {4, 9}, {5, 6, 7, 8})};
  // The sum by hand: rows 1, 4, 9; row 4 is (3 + 5, 4 + 6).
  const std::vector<int64_t> want_ids{1, 4, 9};
  const std::vector<float> want_values{1, 2, 8, 10, 7, 8};
  char dir[] = "/tmp/zen-consumer-XXXXXX";
  if (!mkdtemp(dir)) {
    std::perror("consumer: mkdtemp");
    return 1;
  }
  zen::ConnectOptions options;
  options.rendezvous = std::string("file:") + dir + "/store";
  const zen::TransportRegistry transports = zen::BuiltinTransports();
  std::vector<int> bad(2, 1);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      auto comm = transports.Connect("gloo", r, 2, options);
      const zen::SparseTensor sum =
          zen::BuiltinSchemes().Create("agsparse")->Sync(*comm, inputs[static_cast<size_t>(r)]);
      const auto ids = sum.ids();
      const auto values = sum.values();
      bad[static_cast<size_t>(r)] =
          !(std::vector<int64_t>(ids.begin(), ids.end()) == want_ids &&
            std::vector<float>(values.begin(), values.end()) == want_values);
    });
  }
  for (auto& t : ranks) t.join();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  const bool wrong = bad[0] || bad[1];
  if (std::strcmp(zen::kVersion, ZEN_PACKAGE_VERSION) != 0) {
    std::printf("consumer: zen/version.h says %s, the package %s\n", zen::kVersion, ZEN_PACKAGE_VERSION);
    return 1;
  }
  std::printf("consumer: %s (zen %s)\n", wrong ? "WRONG" : "ok", zen::kVersion);
  return wrong ? 1 : 0;
}
