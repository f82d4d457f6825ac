// zen/testing/threads.cc — see threads.h.
#include "zen/testing/threads.h"

#include <fstream>
#include <string>

namespace zen::testing {

int ProcessThreads() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "Threads:") {
      int n = 0;
      status >> n;
      return n;
    }
  }
  return -1;
}

}  // namespace zen::testing
