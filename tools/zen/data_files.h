// tools/zen/data_files.h — where the `zen` tool finds the files it ships
// (plot scripts, the default trace), relative to its own executable so that
// an installed `zen` works from any directory:
//   installed:   <prefix>/bin/zen  ->  <prefix>/share/zen/<installed path>
//                (`cmake --install`, and `pip install .`: the wheel's scripts
//                land in <env>/bin, its data under <env>, tools/CMakeLists.txt)
//   build tree:  <build>/bin/zen   ->  the source tree it was built from
// (an installed copy never looks into the source tree).
//
// Usage:
//   std::string script = FindDataFile("plots/plot_analysis.py", "tools/plots/plot_analysis.py");
//   if (script.empty()) throw InvalidArgument("cannot find plot_analysis.py");
#pragma once

#include <string>

namespace zen::cli {

// <ZEN_SOURCE_DIR>/<source> for the build tree's binary, else
// <exe dir>/<ZEN_DATA_FROM_BIN>/<installed>; canonical, "" when it does not
// exist.
std::string FindDataFile(const std::string& installed, const std::string& source);

// Where FindDataFile looks, in order (for error messages).
std::string DataFileCandidates(const std::string& installed, const std::string& source);

}  // namespace zen::cli
