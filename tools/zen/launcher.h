// tools/zen/launcher.h — starts the N worker processes of a local
// `zen bench` run and supervises them.
//
// Each worker is this same binary with the caller's arguments plus
// `--rank R --rendezvous file:DIR`. A worker may be wrapped in a command
// prefix (the testbed runs worker i under `ip netns exec HOST_i`) and bound
// to its own address. The first worker to fail stops the run: the others
// are killed and the launcher returns non-zero, naming the rank and status.
#pragma once

#include <string>
#include <vector>

#include "tools/zen/commands.h"

namespace zen::cli {

// A fresh directory under $TMPDIR (else /tmp), removed with its contents
// when the object goes away.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct LaunchPlan {
  std::vector<std::vector<std::string>> prefix;  // per rank, may be empty
  std::vector<std::string> hostname;             // per rank, empty: 127.0.0.1
};

int LaunchLocalWorkers(Args args, int world, bool progress, const LaunchPlan& plan = {});

// Starts one process per argv (rank = position) and waits for all; the first
// failure kills the rest and returns 1, naming `what` and the rank.
// Every worker process (zen's and the PyTorch peers alike) starts with the
// same glibc allocator settings: the caller's GLIBC_TUNABLES / MALLOC_*_
// if set, otherwise a trim threshold of 256 MiB and an mmap threshold of
// 64 MiB, so buffers freed after one sync are reused by the next instead of
// being returned to the kernel and faulted in again. Sets GLIBC_TUNABLES
// in this process's environment (inherited by children); returns what the
// workers get ("" when the caller set MALLOC_*_ variables instead).
std::string WorkerMallocTuning();

int SuperviseProcesses(const std::vector<std::vector<std::string>>& argv_per_rank,
                       const std::string& what);

}  // namespace zen::cli
