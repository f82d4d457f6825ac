#include "tools/zen/data_files.h"

#include <filesystem>
#include <vector>

#ifndef ZEN_DATA_FROM_BIN
#define ZEN_DATA_FROM_BIN "../share/zen"
#endif
#ifndef ZEN_SOURCE_DIR
#define ZEN_SOURCE_DIR ""
#endif
#ifndef ZEN_BUILD_BIN_DIR
#define ZEN_BUILD_BIN_DIR ""
#endif

namespace zen::cli {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> Candidates(const std::string& installed, const std::string& source) {
  std::vector<fs::path> out;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return out;
  // The binary of the build tree uses the source tree it was built from;
  // any other copy (an installed one) only what was installed beside it.
  std::error_code ec2;
  if (*ZEN_BUILD_BIN_DIR && *ZEN_SOURCE_DIR &&
      fs::equivalent(exe.parent_path(), fs::path(ZEN_BUILD_BIN_DIR), ec2)) {
    out.push_back(fs::path(ZEN_SOURCE_DIR) / source);
  } else {
    out.push_back(exe.parent_path() / ZEN_DATA_FROM_BIN / installed);
  }
  return out;
}

}  // namespace

std::string FindDataFile(const std::string& installed, const std::string& source) {
  for (const fs::path& c : Candidates(installed, source)) {
    std::error_code ec;
    if (fs::is_regular_file(c, ec)) return fs::weakly_canonical(c, ec).string();
  }
  return "";
}

std::string DataFileCandidates(const std::string& installed, const std::string& source) {
  std::string out;
  for (const fs::path& c : Candidates(installed, source)) {
    out += (out.empty() ? "" : ", ") + c.lexically_normal().string();
  }
  return out;
}

}  // namespace zen::cli
