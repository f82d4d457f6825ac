// Writes the seed corpus of the fuzz targets (fuzz/corpus/<target>/): valid
// inputs made with the encoders, and, for peer_fuzz, what rank 0 really
// received in recorded in-process runs of every scheme. Run by hand when a
// format changes: zen_fuzz_seeds fuzz/corpus
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "fuzz/fuzz_cases.h"
#include "zen/analysis/auto_scheme.h"
#include "zen/schemes/zen/row_codec.h"
#include "zen/testing/inproc_communicator.h"
#include "zen/schemes/wire.h"
#include "zen/workload/trace.h"

namespace zen::fuzz {
namespace {

namespace fs = std::filesystem;

void Write(const fs::path& dir, const std::string& name, const std::vector<uint8_t>& header,
           std::span<const std::byte> body) {
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(header.data()),
            static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(body.data()), static_cast<std::streamsize>(body.size()));
}

SparseTensor Synthetic(int64_t rows, int64_t width, double density, int rank) {
  SyntheticSpec spec;
  spec.rows = rows;
  spec.width = width;
  spec.density = density;
  spec.seed = 3;
  return GenerateSyntheticRank(spec, rank);
}

void CooSeeds(const fs::path& dir) {
  for (const auto& [rows, width, density] : std::vector<std::tuple<int64_t, int64_t, double>>{
           {1000, 4, 0.02}, {300, 1, 0.3}, {50, 16, 1}}) {
    const SparseTensor t = Synthetic(rows, width, density, 1);
    const CooCase c{rows, width, 1};
    Write(dir, "seed-" + std::to_string(rows) + "x" + std::to_string(width), c.Header(),
          EncodeCoo(t.ids(), t.values()));
  }
  Write(dir, "seed-empty", CooCase{10, 2, 3}.Header(), {});
}

void RowsSeeds(const fs::path& dir) {
  for (bool hash : {true, false}) {
    for (EncodingChoice e : {EncodingChoice::kCoo, EncodingChoice::kHashBitmap,
                             EncodingChoice::kCoo32, EncodingChoice::kEliasFano}) {
      RowsCase c;
      c.rows = 5000;
      c.servers = 4;
      c.server = 2;
      c.width = 2;
      c.seed = 9;
      c.hash = hash;
      const RowOwner owner = hash ? RowOwner::Permuted(c.seed, c.rows, c.servers)
                                  : RowOwner::Range(c.rows, c.servers);
      const SparseTensor t = Synthetic(c.rows, c.width, 0.05, 0);
      // The server's rows in position order (ZEN's partitions).
      std::vector<std::pair<int64_t, size_t>> mine;
      for (size_t i = 0; i < t.nnz(); ++i) {
        const RowPlace at = owner.Locate(t.ids()[i]);
        if (at.server == c.server) mine.emplace_back(at.position, i);
      }
      std::sort(mine.begin(), mine.end());
      std::vector<int64_t> positions;
      std::vector<float> values;
      for (const auto& [position, i] : mine) {
        positions.push_back(position);
        values.insert(values.end(), t.row(i).begin(), t.row(i).end());
      }
      std::vector<std::byte> msg;
      EncodeRows(owner.DomainSize(c.server), c.width, positions, values, e, msg);
      Write(dir,
            std::string("seed-") + (hash ? "hash" : "range") +
                (e == EncodingChoice::kCoo          ? "-coo"
                 : e == EncodingChoice::kCoo32      ? "-coo32"
                 : e == EncodingChoice::kEliasFano  ? "-eliasfano"
                                                    : "-bitmap"),
            c.Header(), msg);
    }
  }
}

void TraceSeeds(const fs::path& dir) {
  for (TraceIndexType type : {TraceIndexType::kI64, TraceIndexType::kI32}) {
    Trace trace;
    trace.world_size = 2;
    trace.metadata["generator"] = "zen_fuzz_seeds";
    trace.Add("step0.embedding", {Synthetic(200, 3, 0.05, 0), Synthetic(200, 3, 0.05, 1)});
    trace.Add("step0.output_topk", {Synthetic(500, 1, 0.02, 0), SparseTensor::Empty(500, 1)});
    const fs::path tmp = fs::temp_directory_path() / "zen-fuzz-seed.safetensors";
    TraceWriteOptions options;
    options.index_type = type;
    WriteTrace(tmp.string(), trace, options);
    std::ifstream in(tmp, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    fs::remove(tmp);
    Write(dir, type == TraceIndexType::kI64 ? "seed-i64" : "seed-i32", {},
          std::as_bytes(std::span(bytes.data(), bytes.size())));
  }
}

// Runs `run(comm, rank)` on every rank of an in-process world and returns
// what rank 0 received, in the order it waited (what StreamComm replays).
std::vector<uint8_t> RecordRank0(int world, const std::function<void(Communicator&, int)>& run) {
  InProcFabric fabric(world);
  std::vector<uint8_t> log;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Communicator> comm = fabric.Connect(r, std::chrono::seconds(10));
      if (r == 0) comm = std::make_unique<RecordingComm>(std::move(comm), log);
      run(*comm, r);
    });
  }
  for (auto& t : threads) t.join();
  return log;
}

// Runs the case on an in-process world and returns what rank 0 received.
std::vector<uint8_t> Record(const PeerCase& c, const SchemeRegistry& registry,
                            const std::string& id) {
  return RecordRank0(c.world,
                     [&](Communicator& comm, int r) { RunPeerCase(c, registry, id, comm, r); });
}

// The seed must replay, through StreamComm as peer_fuzz runs it, to a
// successful sync; otherwise the fuzzer would start from an error path.
void Replay(const PeerCase& c, const SchemeRegistry& registry, const std::string& id,
            const std::vector<uint8_t>& log) {
  StreamComm comm(c.world, std::as_bytes(std::span(log.data(), log.size())));
  try {
    RunPeerCase(c, registry, id, comm, 0);
  } catch (const Error& e) {
    std::fprintf(stderr, "seed for %s does not replay: %s\n", id.c_str(), e.what());
    std::exit(1);
  }
}

void PeerSeeds(const fs::path& dir) {
  const SchemeRegistry registry = AllSchemes();
  const std::vector<std::string> ids = registry.ids();
  for (size_t i = 0; i < ids.size(); ++i) {
    for (bool dense : {false, true}) {
      PeerCase c;
      c.scheme = i;
      c.world = dense ? 2 : 3;
      c.dense = dense;
      c.spec.width = dense ? 1 : 3;
      c.spec.rows = 64 + 10 * 37;
      c.spec.density = 0.1;
      c.spec.skew = 1.1;
      c.spec.seed = 17;
      const std::vector<uint8_t> log = Record(c, registry, ids[i]);
      Replay(c, registry, ids[i], log);
      Write(dir, "seed-" + ids[i] + (dense ? "-dense" : "-sparse"), c.Header(),
            std::as_bytes(std::span(log.data(), log.size())));
    }
  }
  // Three calls of one object: auto's first trial round ends (its gather of
  // the candidates' times), zen reuses its agreed seed and workspace. (The
  // times are measured: auto's seed differs from run to run, as does the
  // batch target's three-batch seed.)
  for (const std::string id : {"auto", "zen"}) {
    PeerCase c;
    c.scheme = static_cast<size_t>(std::find(ids.begin(), ids.end(), id) - ids.begin());
    c.world = 3;
    c.calls = 3;
    c.spec.width = 3;
    c.spec.rows = 64 + 10 * 37;
    c.spec.density = 0.1;
    c.spec.skew = 1.1;
    c.spec.seed = 17;
    const std::vector<uint8_t> log = Record(c, registry, id);
    Replay(c, registry, id, log);
    Write(dir, "seed-" + id + "-sparse-3calls", c.Header(),
          std::as_bytes(std::span(log.data(), log.size())));
  }
}


// ---- shapes_fuzz and synthetic_fuzz (issue 13, item 2: size arithmetic) ----

// One Dim() of shapes_fuzz: selector, then 8 little-endian bytes.
void PutDim(std::vector<uint8_t>& out, uint8_t selector, uint64_t raw) {
  out.push_back(selector);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(raw >> (8 * i)));
}

void ShapesSeeds(const fs::path& dir) {
  struct Seed {
    const char* name;
    uint8_t rs;
    uint64_t rows;
    uint8_t ws;
    uint64_t width;
    uint8_t counts;  // nnz = counts % 8
  };
  // Selectors: 0 raw, 1 2^r, 2 2^r + 1, 3 2^r - 1, 4 INT64_MAX - r,
  // 5 r % 4096, 6 INT64_MAX / (1 + r), 7 -r.
  const Seed seeds[] = {
      {"small", 0, 10, 0, 3, 3},
      {"wraps_size_t", 2, 62, 0, 4, 2},       // (2^62 + 1) x 4: the issue 13 crash
      {"int64_max_rows", 4, 0, 0, 1, 2},      // rows 2^63 - 1, width 1
      {"elements_overflow", 1, 20, 1, 44, 1}, // the trace of issue 13
      {"width_limit", 0, 3, 6, 2, 1},         // rows 3 x width INT64_MAX / 3
      {"dense_small", 5, 40, 5, 8, 4},
      {"negative", 7, 1, 0, 2, 0},
  };
  for (const Seed& sd : seeds) {
    std::vector<uint8_t> in;
    PutDim(in, sd.rs, sd.rows);
    PutDim(in, sd.ws, sd.width);
    in.push_back(sd.counts);
    for (int i = 0; i < sd.counts % 8; ++i) {
      in.push_back(static_cast<uint8_t>(i % 2));  // near 0, then near rows
      for (int b = 0; b < 8; ++b) in.push_back(b == 0 ? static_cast<uint8_t>(i) : 0);
    }
    for (int v = 0; v < 64; ++v) in.push_back(static_cast<uint8_t>(v));
    Write(dir, sd.name, in, {});
  }
}

void SyntheticSeeds(const fs::path& dir) {
  const char* specs[] = {
      "zipf:rows=100000,width=64,density=0.01,skew=1.1",
      "zipf:rows=1e6",
      "zipf:rows=1000,width=4,density=1,skew=0,seed=7",
      "zipf:rows=9223372036854775807,width=1",
      "zipf:rows=4611686018427387905,width=4",
      "zipf:rows=1e300",
      "zipf:seed=-1",
      "zipf:density=nan,skew=inf",
  };
  int i = 0;
  for (const char* spec : specs) {
    const std::string text(spec);
    Write(dir, "spec" + std::to_string(i++), {},
          std::as_bytes(std::span<const char>(text.data(), text.size())));
  }
}

// ---- batch_fuzz: recorded Context batches ----

std::vector<uint8_t> RecordBatch(const BatchCase& c, const std::string& scheme) {
  return RecordRank0(c.world,
                     [&](Communicator& comm, int r) { RunBatchCase(c, scheme, comm, r); });
}

void BatchSeeds(const fs::path& dir) {
  const std::vector<std::string> ids = AllSchemes().ids();
  for (size_t i = 0; i < ids.size(); ++i) {
    for (const uint8_t tensors : {uint8_t{0x3f}, uint8_t{0x7f}, uint8_t{0xbf}}) {
      if ((tensors & 0x40) && ids[i] != "zen") continue;  // bfloat16 values need zen
      if ((tensors & 0x80) && ids[i] != "auto") continue;  // three batches: auto's trials
      BatchCase c;
      c.scheme = i;
      c.world = 3;
      c.tensors = tensors;
      c.spec.rows = 64 + 6 * 37;
      c.spec.density = 0.1;
      c.spec.skew = 1.1;  // as BatchCase::Read sets them
      c.spec.seed = 23;
      const std::vector<uint8_t> log = RecordBatch(c, ids[i]);
      // The seed must replay through StreamComm, as batch_fuzz runs it, to
      // a successful batch.
      StreamComm comm(c.world, std::as_bytes(std::span(log.data(), log.size())));
      try {
        RunBatchCase(c, ids[i], comm, 0);
      } catch (const Error& e) {
        std::fprintf(stderr, "batch seed for %s does not replay: %s\n", ids[i].c_str(), e.what());
        std::exit(1);
      }
      const char* suffix = tensors & 0x40 ? "-bf16" : tensors & 0x80 ? "-3batches" : "";
      Write(dir, "seed-" + ids[i] + suffix, c.Header(),
            std::as_bytes(std::span(log.data(), log.size())));
    }
  }
}

}  // namespace
}  // namespace zen::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: zen_fuzz_seeds CORPUS_DIR\n");
    return 2;
  }
  const std::filesystem::path root = argv[1];
  zen::fuzz::CooSeeds(root / "coo");
  zen::fuzz::RowsSeeds(root / "rows");
  zen::fuzz::TraceSeeds(root / "trace");
  zen::fuzz::PeerSeeds(root / "peer");
  zen::fuzz::ShapesSeeds(root / "shapes");
  zen::fuzz::SyntheticSeeds(root / "synthetic");
  zen::fuzz::BatchSeeds(root / "batch");
  return 0;
}
