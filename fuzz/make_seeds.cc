// Writes the seed corpus of the fuzz targets (fuzz/corpus/<target>/): valid
// inputs made with the encoders, and, for peer_fuzz, what rank 0 really
// received in recorded in-process runs of every scheme. Run by hand when a
// format changes: zen_fuzz_seeds fuzz/corpus
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "fuzz/fuzz_cases.h"
#include "zen/analysis/auto_scheme.h"
#include "zen/comm/inproc_communicator.h"
#include "zen/core/hash_bitmap.h"
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
    for (EncodingChoice e : {EncodingChoice::kCoo, EncodingChoice::kHashBitmap}) {
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
                (e == EncodingChoice::kCoo ? "-coo" : "-bitmap"),
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

// Runs the case on an in-process world and returns what rank 0 received.
std::vector<uint8_t> Record(const PeerCase& c, const SchemeRegistry& registry,
                            const std::string& id) {
  InProcFabric fabric(c.world);
  std::vector<uint8_t> log;
  std::vector<std::thread> threads;
  for (int r = 0; r < c.world; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Communicator> comm = fabric.Connect(r, std::chrono::seconds(10));
      if (r == 0) comm = std::make_unique<RecordingComm>(std::move(comm), log);
      SchemeOptions options;
      options.threads = 1;
      auto scheme = registry.Create(id, options);
      SparseTensor local = GenerateSyntheticRank(c.spec, r);
      local.set_name("fuzz");
      if (c.dense) {
        std::vector<float> buffer = local.ToDense();
        scheme->SyncDense(*comm, buffer, c.spec.rows, c.spec.width, "fuzz");
      } else {
        scheme->Sync(*comm, local);
      }
    });
  }
  for (auto& t : threads) t.join();
  return log;
}

// The seed must replay, through StreamComm as peer_fuzz runs it, to a
// successful sync; otherwise the fuzzer would start from an error path.
void Replay(const PeerCase& c, const SchemeRegistry& registry, const std::string& id,
            const std::vector<uint8_t>& log) {
  StreamComm comm(c.world, std::as_bytes(std::span(log.data(), log.size())));
  SchemeOptions options;
  options.threads = 1;
  auto scheme = registry.Create(id, options);
  SparseTensor local = GenerateSyntheticRank(c.spec, 0);
  local.set_name("fuzz");
  try {
    if (c.dense) {
      std::vector<float> buffer = local.ToDense();
      scheme->SyncDense(comm, buffer, c.spec.rows, c.spec.width, "fuzz");
    } else {
      scheme->Sync(comm, local);
    }
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
  return 0;
}
