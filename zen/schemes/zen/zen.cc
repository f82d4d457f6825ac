// zen/schemes/zen/zen.cc — ZEN's scheme object: construction, settings,
// capabilities, its registry entry.
#include "zen/schemes/zen/zen.h"

#include "zen/core/error.h"
#include "zen/core/worker_pool.h"

namespace zen {

namespace {

// `options` after ValidateSchemeOptions, and the config's enums checked:
// the constructor's first member initializer.
const SchemeOptions& Validated(const SchemeOptions& options, const ZenConfig& config) {
  ValidateSchemeOptions(options, "zen");
  if (config.ownership != ZenOwnership::kHash && config.ownership != ZenOwnership::kRange) {
    throw InvalidArgument(Where{}, "zen: ownership ", static_cast<int>(config.ownership),
                          " is not hash (0) or range (1)");
  }
  if (static_cast<int>(config.pull_encoding) > static_cast<int>(EncodingChoice::kEliasFano)) {
    throw InvalidArgument(Where{}, "zen: pull_encoding ", static_cast<int>(config.pull_encoding),
                          " is not an EncodingChoice");
  }
  return options;
}

}  // namespace

ZenScheme::ZenScheme(const SchemeOptions& options, ZenConfig config)
    : options_(Validated(options, config)),
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

std::string ZenScheme::shared_settings() const {
  std::string out;
  if (config_.ownership != ZenOwnership::kHash) out = "ownership range";
  return out;
}

SyncCapabilities ZenScheme::capabilities() const { return kZenCapabilities; }

Support ZenScheme::supports(const SparsityProfile& profile) const {
  if (profile.rows > kMaxPermutedRows) {
    return Support::No("rows " + std::to_string(profile.rows) + " exceed 2^62");
  }
  return Support::Yes();
}

const ZenStats* ZenLastStats(const Scheme& s) {
  const auto* z = dynamic_cast<const ZenScheme*>(&s);
  return z ? &z->last_stats() : nullptr;
}

SchemeInfo ZenInfo() {
  SchemeInfo info{"zen",
                  "ZEN Balanced Parallelism: hash-partitioned push (COO) + hash-bitmap pull; dense "
                  "buffers extracted by hierarchical hashing",
                  [](const SchemeOptions& o) -> std::unique_ptr<Scheme> {
                    return std::make_unique<ZenScheme>(o);
                  }};
  info.rank_order = true;  // each server merges its partition's pushes in rank order
  info.capabilities = kZenCapabilities;
  return info;
}

}  // namespace zen
