// tools/zen/data_files.h — where the `zen` tool finds the files it ships
// (plot scripts, the default trace), relative to its own executable so that
// an installed `zen` works from any directory:
//   installed:   <prefix>/bin/zen  ->  <prefix>/share/zen/<installed path>
//   build tree:  the source tree the binary was built from
//
// Usage:
//   std::string script = FindDataFile("plots/plot_analysis.py", "tools/plots/plot_analysis.py");
//   if (script.empty()) throw InvalidArgument("cannot find plot_analysis.py");
#pragma once

#include <string>

namespace zen::cli {

// The first existing of <exe dir>/<ZEN_DATA_FROM_BIN>/<installed> and
// <ZEN_SOURCE_DIR>/<source>, canonical; "" when neither exists.
std::string FindDataFile(const std::string& installed, const std::string& source);

// Where FindDataFile looks, in order (for error messages).
std::string DataFileCandidates(const std::string& installed, const std::string& source);

}  // namespace zen::cli
