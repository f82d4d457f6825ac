// The committed seeds of the fuzz targets that replay recorded peers
// (fuzz/corpus/peer/seed-*, fuzz/corpus/batch/seed-*) must still replay, in
// this build, to a successful call: a seed that fails early starts the
// fuzzer on an error path, and stale peer seeds once kept zen_fuzz_peer
// away from a signed overflow in auto's profiler. When a wire
// format or a scheme's messages change, regenerate them (scripts/fuzz-smoke
// configures build-sanitize, clang's fuzz build):
//   scripts/fuzz-smoke 1
//   cmake --build build-sanitize --target zen_fuzz_seeds
//   build-sanitize/fuzz/zen_fuzz_seeds fuzz/corpus
// (regression-* inputs are kept as they are and are not checked here).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz/fuzz_cases.h"
#include "zen/analysis/auto_scheme.h"

namespace zen::fuzz {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> Seeds(const std::string& target) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(fs::path(ZEN_SOURCE_DIR) / "fuzz/corpus" / target)) {
    if (e.path().filename().string().rfind("seed-", 0) == 0) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<uint8_t> Read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(FuzzSeedsTest, PeerSeedsReplayToASuccessfulCall) {
  const SchemeRegistry registry = AllSchemes();
  const std::vector<std::string> ids = registry.ids();
  const std::vector<fs::path> seeds = Seeds("peer");
  ASSERT_GE(seeds.size(), 2 * BuiltinSchemes().ids().size());
  for (const fs::path& seed : seeds) {
    SCOPED_TRACE(seed.filename().string());
    const std::vector<uint8_t> bytes = Read(seed);
    Input in(bytes.data(), bytes.size());
    const PeerCase c = PeerCase::Read(in);
    StreamComm comm(c.world, in.Rest());
    try {
      RunPeerCase(c, registry, ids[c.scheme % ids.size()], comm, 0);
    } catch (const Error& e) {
      ADD_FAILURE() << "stale seed (regenerate: see this file's header): " << e.what();
    }
  }
}

TEST(FuzzSeedsTest, BatchSeedsReplayToASuccessfulBatch) {
  const std::vector<std::string> ids = AllSchemes().ids();
  const std::vector<fs::path> seeds = Seeds("batch");
  ASSERT_GE(seeds.size(), ids.size());
  for (const fs::path& seed : seeds) {
    SCOPED_TRACE(seed.filename().string());
    const std::vector<uint8_t> bytes = Read(seed);
    Input in(bytes.data(), bytes.size());
    const BatchCase c = BatchCase::Read(in);
    StreamComm comm(c.world, in.Rest());
    try {
      RunBatchCase(c, ids[c.scheme % ids.size()], comm, 0);
    } catch (const Error& e) {
      ADD_FAILURE() << "stale seed (regenerate: see this file's header): " << e.what();
    }
  }
}

}  // namespace
}  // namespace zen::fuzz
