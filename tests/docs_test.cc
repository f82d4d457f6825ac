// The docs are driven by the registry: every registered scheme has a
// section in docs/algorithms.md and a row in its table.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "zen/analysis/auto_scheme.h"

#ifndef ZEN_SOURCE_DIR
#error "ZEN_SOURCE_DIR must name the source tree"
#endif

namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Docs, EveryRegisteredSchemeIsDocumented) {
  const std::string doc = Read(std::string(ZEN_SOURCE_DIR) + "/docs/algorithms.md");
  ASSERT_FALSE(doc.empty()) << "docs/algorithms.md is missing";
  for (const auto& info : zen::AllSchemes().schemes()) {
    SCOPED_TRACE(info.id);
    EXPECT_NE(doc.find("| `" + info.id + "` | " + info.description + " |"), std::string::npos)
        << "table row missing or stale: run scripts/assemble-docs";
    bool heading = false;
    std::istringstream lines(doc);
    for (std::string line; std::getline(lines, line);) {
      heading |= line.rfind("## ", 0) == 0 && line.find("`" + info.id + "`") != std::string::npos;
    }
    EXPECT_TRUE(heading) << "no '## ...`" << info.id << "`...' section";
  }
}

}  // namespace
