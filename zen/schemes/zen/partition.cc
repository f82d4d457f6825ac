// zen/schemes/zen/partition.cc — phase 1, partition: the call's row
// ownership (the agreed seed, the domains) and the sparse input split per
// server.
#include "zen/schemes/zen/zen.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "zen/comm/collectives.h"
#include "zen/core/error.h"
#include "zen/schemes/zen/internal.h"

namespace zen {

using zen_internal::Clock;
using zen_internal::Since;

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

int ZenScheme::ElementBlockBits(int64_t rows, int servers) {
  int b = kMaxElementBlockBits;
  while (b > 0 && (rows >> b) / kMinBlocksPerServer < servers) --b;
  return b;
}

HashDomains ZenScheme::Prepare(Communicator& comm, int64_t rows, int64_t width,
                               const Where& where) {
  // Every rank has the same rows (the metadata exchange checked it), so
  // every rank refuses here, before the seed broadcast.
  if (config_.ownership == ZenOwnership::kHash && rows > kMaxPermutedRows) {
    throw InvalidArgument(where, "zen: rows ", rows,
                          " exceed 2^62, the range of its row permutation; agsparse or sparcml "
                          "take any int64 rows");
  }
  const int n = comm.size();
  return HashDomains(config_.ownership == ZenOwnership::kHash
                         ? RowOwner::Permuted(AgreedSeed(comm), rows, n,
                                              width == 1 ? ElementBlockBits(rows, n) : 0)
                         : RowOwner::Range(rows, n));
}

template <typename T>
std::optional<HashDomains> ZenScheme::SparseExchange(Communicator& comm,
                                                     const SparseTensor& local,
                                                     std::span<std::byte> zero,
                                                     OnPulled on_pulled) {
  stats_ = ZenStats{};
  stats_.world = comm.size();
  stats_.rows = local.rows();
  stats_.width = local.width();
  stats_.local_rows = static_cast<int64_t>(local.nnz());
  if (comm.size() == 1) {
    stats_.result_rows = stats_.local_rows;
    return std::nullopt;
  }
  const Where where{comm.rank(), local.name()};
  HashDomains domains = Prepare(comm, local.rows(), local.width(), where);
  auto t0 = Clock::now();
  sparse_partitioner_->PartitionSparse(local.ids(), local.values<T>(), local.width(),
                                       domains.owner(), ws_.mine.Of<T>());
  stats_.partition_seconds = Since(t0);
  t0 = Clock::now();
  std::fill(zero.begin(), zero.end(), std::byte{0});  // +0.0 in every dtype
  stats_.decode_seconds = Since(t0);
  // Element-sparse rows are read by ElementWords, which checks the
  // positions as it decodes them (no decoding pass of ParseRows' own).
  Exchange<T>(comm, domains, local.width(), where, on_pulled,
              ElementPath(local) ? PositionCheck::kByReader : PositionCheck::kNow);
  return domains;
}

#define ZEN_INSTANTIATE(T, ...)                                     \
  template std::optional<HashDomains> ZenScheme::SparseExchange<T>( \
      Communicator&, const SparseTensor&, std::span<std::byte>, OnPulled);
ZEN_FOR_EACH_VALUE_TYPE(ZEN_INSTANTIATE)
#undef ZEN_INSTANTIATE

}  // namespace zen
