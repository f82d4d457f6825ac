// zen/workload/trace.h — reading and writing `zen-trace/1` gradient traces.
//
// A trace holds, for each of several named tensors (typically one per
// training step and parameter: "step0.embedding", "step0.output_topk", ...),
// the sparse gradient every rank of an N-rank data-parallel job produced.
// The file is a safetensors file (docs/trace-format.md has the exact layout):
// tensors `<tensor>/<rank>/indices` (I64 or I32, [nnz], sorted unique) and
// `<tensor>/<rank>/values` (F32, [nnz, width]); the `__metadata__` header
// carries "format": "zen-trace/1", "world_size": "<N>" and for each tensor
// "<tensor>.shape": "[rows, width]".
//
// Reading is strict: a file that is truncated, lies about offsets, dtypes or
// shapes, or holds unsorted / out-of-range ids raises FormatError naming the
// file, the tensor and the wrong value. TraceReader validates the header when
// opened and reads a tensor's bytes only when asked, so a tool that needs one
// tensor of a multi-GB trace (or only its ids) never loads the rest.
//
// Usage:
//   zen::Trace t;
//   t.world_size = 2;
//   t.Add("step0.embedding", {rank0_grad, rank1_grad});   // SparseTensors
//   zen::WriteTrace("out.safetensors", t);
//
//   zen::TraceReader reader("out.safetensors");            // header only
//   for (const zen::TraceTensorInfo& info : reader.tensors()) {
//     std::vector<int64_t> ids = reader.ReadIds(info.name, /*rank=*/0);
//   }
//   zen::Trace all = zen::ReadTrace("out.safetensors");    // everything
//   const zen::SparseTensor& g = all.Get("step0.embedding", 1);
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <unordered_map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "zen/core/sparse_tensor.h"

namespace zen {

inline constexpr std::string_view kTraceFormat = "zen-trace/1";

// What the header says about one tensor.
struct TraceTensorInfo {
  std::string name;
  int64_t rows = 0;
  int64_t width = 0;
  std::vector<int64_t> nnz;  // per rank
};

// A whole trace in memory (or a subset of its tensors).
struct Trace {
  int world_size = 0;
  std::vector<TraceTensorInfo> tensors;         // in file order (data offsets)
  std::vector<std::vector<SparseTensor>> data;  // [tensor][rank], parallel to tensors
  // Extra "__metadata__" entries besides format, world_size and *.shape
  // (e.g. "generator", "command").
  std::map<std::string, std::string> metadata;
  // Name -> position in `tensors`, kept by Add so that adding and finding a
  // tensor do not scan them all (a trace of 10^5 tensors). Rebuilt when it
  // does not match `tensors` (filled by other means).
  std::unordered_map<std::string, size_t> index;

  // Appends a tensor: per_rank.size() == world_size, one shape for all ranks,
  // a valid and new name. InvalidArgument otherwise. Each SparseTensor gets
  // `name` as its name.
  void Add(const std::string& name, std::vector<SparseTensor> per_rank);

  // InvalidArgument if `tensor` is not in the trace or rank is out of range.
  const SparseTensor& Get(std::string_view tensor, int rank) const;
  std::span<const SparseTensor> PerRank(std::string_view tensor) const;
  size_t IndexOf(std::string_view tensor) const;
};

// Tensor names: non-empty, at most 200 characters of [A-Za-z0-9_.:-].
bool IsValidTraceTensorName(std::string_view name);

// Splits "step<k>.<base>" into k and base; {-1, name} for other names.
struct StepName {
  int64_t step = -1;
  std::string base;
};
StepName ParseStepName(std::string_view name);

// The tensors a command means by `name`, in file order. Every command names
// tensors alike: "step<k>.<base>" as recorded, or <base> alone as `zen
// analyze` summarizes it (that base at step `step`, default the first step
// holding it). An empty name is the whole model: every tensor of step `step`
// (default the file's first step; a file without step names is one step).
// InvalidArgument naming the file's tensors (their bases and steps) when
// nothing matches.
std::vector<std::string> SelectTraceTensors(std::span<const TraceTensorInfo> tensors,
                                            std::string_view name, int64_t step = -1);

// A validated trace file whose tensors are read on demand. Not thread-safe
// (one file position); open one reader per thread.
class TraceReader {
 public:
  // Opens and validates the header (FormatError if anything is wrong).
  // Tensors are listed in the order of their data in the file.
  explicit TraceReader(std::string path);

  const std::string& path() const { return path_; }
  int world_size() const { return world_size_; }
  const std::vector<TraceTensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // InvalidArgument if absent.
  const TraceTensorInfo& info(std::string_view tensor) const;

  // Reads and checks one rank's ids (sorted, unique, in [0, rows)).
  std::vector<int64_t> ReadIds(std::string_view tensor, int rank);
  // Ids and values of one rank.
  SparseTensor ReadRank(std::string_view tensor, int rank);
  // All ranks of one tensor.
  std::vector<SparseTensor> ReadTensor(std::string_view tensor);

 private:
  struct Blob {
    bool i32 = false;             // indices only: I32 instead of I64
    uint64_t begin = 0, end = 0;  // absolute file offsets
  };
  struct Slot {
    Blob indices, values;
  };
  const Slot& SlotOf(std::string_view tensor, int rank, const TraceTensorInfo** info) const;
  void ReadBytes(uint64_t offset, std::span<char> out, std::string_view what);
  void ParseHeader(std::string_view json, uint64_t data_begin, uint64_t file_size);

  std::string path_;
  std::ifstream in_;
  int world_size_ = 0;
  std::vector<TraceTensorInfo> tensors_;
  std::vector<std::vector<Slot>> slots_;  // [tensor][rank]
  std::map<std::string, size_t, std::less<>> by_name_;  // name -> index in tensors_
  std::map<std::string, std::string> metadata_;
};

// Reads the whole trace, or only the tensors named in `only`.
Trace ReadTrace(const std::string& path, std::span<const std::string> only = {});

enum class TraceIndexType { kI64, kI32 };

struct TraceWriteOptions {
  // I32 halves index bytes; InvalidArgument if a tensor has rows > 2^31 - 1.
  TraceIndexType index_type = TraceIndexType::kI64;
};

// Writes trace as `zen-trace/1`, tensors in trace.tensors order, atomically:
// to a new file in path's directory, fsynced, then renamed over path, so that
// path holds the old file or the whole new one, never a truncated one. An
// inconsistent trace (data not matching tensors, a name listed twice,
// reserved metadata keys) or a directory where the new file cannot be
// created is InvalidArgument naming the tensor or path. A failure while
// writing, syncing or renaming (a full disk, a quota, a file size limit, an
// I/O error) is zen::Error naming the path, the bytes written and errno; the
// old file at path is then unchanged and nothing else is left behind.
void WriteTrace(const std::string& path, const Trace& trace, const TraceWriteOptions& options = {});

}  // namespace zen
