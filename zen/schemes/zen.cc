#include "zen/schemes/zen.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "zen/comm/collectives.h"
#include "zen/core/error.h"
#include "zen/schemes/zen_merge.h"

namespace zen {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Counter totals at one instant, for per-phase differences.
struct Snapshot {
  uint64_t sent = 0;
  uint64_t recv = 0;
};
Snapshot Take(const Communicator& comm) {
  return {comm.counters().total_sent(), comm.counters().total_recv()};
}

RowsView View(const DecodedRows& d) { return {d.ids, d.values}; }

}  // namespace

ZenScheme::ZenScheme(const SchemeOptions& options, ZenConfig config)
    : options_(options),
      config_(std::move(config)),
      threads_(EffectiveThreads(options.threads)),
      sparse_partitioner_(MakePartitioner("counting", threads_)),
      dense_partitioner_(MakePartitioner(config_.dense_partitioner, threads_)) {}

ZenScheme::~ZenScheme() = default;

std::string_view ZenScheme::description() const {
  return config_.ownership == ZenOwnership::kHash
             ? "ZEN Balanced Parallelism: hash-partitioned push (COO) + hash-bitmap pull"
             : "ZEN pipeline over range partitions (comparison only: imbalanced on skew)";
}

Support ZenScheme::supports(const SparsityProfile& profile) const {
  if (profile.rows >= static_cast<int64_t>(kHashPrime)) {
    return Support::No("rows " + std::to_string(profile.rows) + " reach the hash field 2^61 - 1");
  }
  return Support::Yes();
}

uint64_t ZenScheme::AgreedSeed(Communicator& comm) {
  const auto key = std::make_pair(comm.size(), options_.seed);
  auto it = seeds_.find(key);
  if (it != seeds_.end()) return it->second;
  const uint64_t mine = options_.seed;
  const ByteBuffer got =
      Broadcast(comm, 0, std::as_bytes(std::span(&mine, 1)), sizeof(uint64_t));
  if (got.size() != sizeof(uint64_t)) {
    throw FormatError(Where{comm.rank()}, "zen: the seed broadcast from rank 0 has ", got.size(),
                      " bytes, expected ", sizeof(uint64_t));
  }
  uint64_t agreed = 0;
  std::memcpy(&agreed, got.data(), sizeof(agreed));
  seeds_.emplace(key, agreed);
  return agreed;
}

ZenScheme::Plan ZenScheme::Prepare(Communicator& comm, int64_t rows) {
  const int n = comm.size();
  Plan plan;
  plan.owner = config_.ownership == ZenOwnership::kHash ? RowOwner::Hash(AgreedSeed(comm), n)
                                                        : RowOwner::Range(rows, n);
  const auto key =
      std::make_tuple(rows, static_cast<int>(plan.owner.kind()), n,
                      plan.owner.kind() == RowOwner::Kind::kHash ? plan.owner.seed() : 0);
  auto it = domains_.find(key);
  if (it == domains_.end()) {
    it = domains_.emplace(key, std::make_shared<const HashDomains>(rows, plan.owner, threads_))
             .first;
  }
  plan.domains = it->second;
  return plan;
}

std::vector<DecodedRows> ZenScheme::Exchange(Communicator& comm, const Plan& plan,
                                             const Partitions& mine, int64_t width,
                                             const Where& where) {
  const int n = comm.size();
  const int r = comm.rank();
  const HashDomains& domains = *plan.domains;

  // Push: COO, one message per other server.
  auto t0 = Clock::now();
  const Snapshot before_push = Take(comm);
  std::vector<ByteBuffer> push(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) {
    if (j == r) continue;
    EncodeRows(domains, j, width, mine.ids_of(j), mine.values_of(j), EncodingChoice::kCoo,
               push[static_cast<size_t>(j)]);
    stats_.pushed_rows += mine.count(j);
  }
  // A peer may announce at most a COO message of every row of this domain.
  const auto push_bound = static_cast<int64_t>(CooMessageBytes(domains.size(r), width));
  const std::vector<ByteBuffer> pushed = AllToAllV(comm, push, push_bound);
  push.clear();
  const Snapshot after_push = Take(comm);
  stats_.push_seconds = Since(t0);

  // Aggregate this server's partition.
  t0 = Clock::now();
  std::vector<DecodedRows> got(static_cast<size_t>(n));
  std::vector<RowsView> parts;
  parts.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    if (i == r) {
      parts.push_back({mine.ids_of(r), mine.values_of(r)});
      continue;
    }
    DecodeRows(pushed[static_cast<size_t>(i)], domains, r, width, where,
               got[static_cast<size_t>(i)]);
    parts.push_back(View(got[static_cast<size_t>(i)]));
  }
  DecodedRows served;
  MergeSumRows(parts, width, served.ids, served.values);
  stats_.served_rows = static_cast<int64_t>(served.ids.size());
  stats_.aggregate_seconds = Since(t0);

  // Pull: this server's sum to everyone, hash bitmap or COO.
  t0 = Clock::now();
  ByteBuffer message;
  stats_.pull_encoding =
      EncodeRows(domains, r, width, served.ids, served.values, config_.pull_encoding, message);
  // At most every row of the largest domain, in COO (a full bitmap is smaller).
  int64_t largest = 0;
  for (int j = 0; j < n; ++j) largest = std::max(largest, domains.size(j));
  const auto pull_bound = static_cast<int64_t>(CooMessageBytes(largest, width));
  const std::vector<ByteBuffer> pulled = AllGatherV(comm, message, pull_bound);
  message.clear();
  const Snapshot after_pull = Take(comm);
  stats_.pull_seconds = Since(t0);

  t0 = Clock::now();
  for (int j = 0; j < n; ++j) {
    if (j == r) continue;
    DecodedRows& d = got[static_cast<size_t>(j)];
    DecodeRows(pulled[static_cast<size_t>(j)], domains, j, width, where, d);
    (d.encoding == RowEncoding::kHashBitmap ? stats_.pull_bitmap_messages
                                            : stats_.pull_coo_messages)++;
  }
  got[static_cast<size_t>(r)] = std::move(served);
  stats_.decode_seconds = Since(t0);

  stats_.push_bytes_sent = after_push.sent - before_push.sent;
  stats_.push_bytes_recv = after_push.recv - before_push.recv;
  stats_.pull_bytes_sent = after_pull.sent - after_push.sent;
  stats_.pull_bytes_recv = after_pull.recv - after_push.recv;
  return got;
}

SparseTensor ZenScheme::DoSync(Communicator& comm, const SparseTensor& local) {
  stats_ = ZenStats{};
  stats_.world = comm.size();
  stats_.rows = local.rows();
  stats_.width = local.width();
  stats_.local_rows = static_cast<int64_t>(local.nnz());
  if (comm.size() == 1) {
    stats_.result_rows = stats_.local_rows;
    return local;
  }
  const Where where{comm.rank(), local.name()};
  const Plan plan = Prepare(comm, local.rows());
  auto t0 = Clock::now();
  Partitions mine;
  sparse_partitioner_->PartitionSparse(local.ids(), local.values(), local.width(), plan.owner,
                                       mine);
  stats_.partition_seconds = Since(t0);

  const std::vector<DecodedRows> servers = Exchange(comm, plan, mine, local.width(), where);
  // The servers' partitions are disjoint: the merge only interleaves them.
  std::vector<RowsView> parts;
  for (const DecodedRows& d : servers) parts.push_back(View(d));
  std::vector<int64_t> ids;
  std::vector<float> values;
  MergeSumRows(parts, local.width(), ids, values);
  stats_.result_rows = static_cast<int64_t>(ids.size());
  return SparseTensor::FromSorted(local.rows(), local.width(), std::move(ids), std::move(values),
                                  local.name());
}

void ZenScheme::DoSyncDense(Communicator& comm, std::span<float> buffer, int64_t rows,
                            int64_t width, std::string_view tensor) {
  stats_ = ZenStats{};
  stats_.world = comm.size();
  stats_.rows = rows;
  stats_.width = width;
  stats_.dense_path = true;
  const Where where{comm.rank(), tensor};
  const bool alone = comm.size() == 1;
  const Plan plan = alone ? Plan{RowOwner::Range(rows, 1), nullptr} : Prepare(comm, rows);
  auto t0 = Clock::now();
  Partitions mine;
  dense_partitioner_->PartitionDense(buffer, rows, width, plan.owner, mine);
  stats_.partition_seconds = Since(t0);
  stats_.local_rows = mine.total();
  if (alone) {
    stats_.result_rows = stats_.local_rows;
    return;  // the buffer already holds the sum
  }

  const std::vector<DecodedRows> servers = Exchange(comm, plan, mine, width, where);
  // Every locally non-zero row is in the union, so writing the union's rows
  // overwrites all of them; rows outside the union are zero already.
  t0 = Clock::now();
  const size_t row_bytes = static_cast<size_t>(width) * sizeof(float);
  for (const DecodedRows& d : servers) {
    for (size_t i = 0; i < d.ids.size(); ++i) {
      std::memcpy(buffer.data() + static_cast<size_t>(d.ids[i]) * static_cast<size_t>(width),
                  d.values.data() + i * static_cast<size_t>(width), row_bytes);
    }
    stats_.result_rows += static_cast<int64_t>(d.ids.size());
  }
  stats_.decode_seconds += Since(t0);
}

const ZenStats* ZenLastStats(const Scheme& s) {
  const auto* z = dynamic_cast<const ZenScheme*>(&s);
  return z ? &z->last_stats() : nullptr;
}

SchemeInfo ZenInfo() {
  return {"zen",
          "ZEN Balanced Parallelism: hash-partitioned push (COO) + hash-bitmap pull; dense "
          "buffers extracted by hierarchical hashing",
          [](const SchemeOptions& o) -> std::unique_ptr<Scheme> {
            return std::make_unique<ZenScheme>(o);
          }};
}

}  // namespace zen

// ---- Cost (registry.h): bytes per rank and rounds of one zen call ----
#include <algorithm>
#include <cmath>

namespace zen {

// Push COO of the rows h0 maps to each server (balanced: nnz / n per
// server), pull each server's summed share U / n as values plus either a
// hash bitmap over its domain (|D_s| ~ rows / n bits, in uint64 words) or
// COO ids, whichever is smaller. One AllToAllV and one AllGatherV.
CostVolumes ZenCost(const CostInputs& in) {
  CostVolumes v = NewVolumes(in);
  if (in.n == 1) return v;
  const double share = in.Union(in.n) / in.n;
  const double domain = static_cast<double>(in.rows) / in.n;
  const double ids = std::min(std::ceil(domain / 64) * 8, share * 8);
  const double push = (in.n - 1) * in.nnz / in.n * in.row;
  const double pull = (in.n - 1) * (ids + share * in.vals);
  for (int r = 0; r < in.n; ++r) {
    v.recv[static_cast<size_t>(r)] += push + pull;
    v.sent[static_cast<size_t>(r)] += push + pull;
  }
  v.rounds += 2;
  return v;
}

}  // namespace zen
