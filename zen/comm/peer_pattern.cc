#include "zen/comm/peer_pattern.h"

#include <algorithm>

#include "zen/core/error.h"

namespace zen {
namespace {

void CheckWorld(int rank, int n) {
  if (n < 1) throw InvalidArgument("peer pattern: world size " + std::to_string(n) + " < 1");
  if (rank < 0 || rank >= n) {
    throw InvalidArgument(Where{rank}, "peer pattern: rank is outside [0, ", n, ")");
  }
}

void CheckStep(int step, int lo, int hi, const char* what) {
  if (step < lo || step >= hi) {
    throw InvalidArgument(Where{}, "peer pattern: ", what, " step ", step, " is outside [", lo,
                          ", ", hi, ")");
  }
}

}  // namespace

int PositiveMod(int64_t a, int n) {
  const int64_t m = a % n;
  return static_cast<int>(m < 0 ? m + n : m);
}

int AllToAllSendPeer(int rank, int n, int step) {
  CheckWorld(rank, n);
  CheckStep(step, 1, n, "all-to-all");
  return PositiveMod(int64_t{rank} + step, n);
}

int AllToAllRecvPeer(int rank, int n, int step) {
  CheckWorld(rank, n);
  CheckStep(step, 1, n, "all-to-all");
  return PositiveMod(int64_t{rank} - step, n);
}

RingNeighbours Ring(int rank, int n) {
  CheckWorld(rank, n);
  return {PositiveMod(int64_t{rank} + 1, n), PositiveMod(int64_t{rank} - 1, n)};
}

int RingReduceScatterSendChunk(int rank, int n, int step) {
  CheckWorld(rank, n);
  CheckStep(step, 0, n - 1, "ring reduce-scatter");
  return PositiveMod(int64_t{rank} - step, n);
}

int RingReduceScatterRecvChunk(int rank, int n, int step) {
  CheckWorld(rank, n);
  CheckStep(step, 0, n - 1, "ring reduce-scatter");
  return PositiveMod(int64_t{rank} - step - 1, n);
}

int RingOwnedChunk(int rank, int n) {
  CheckWorld(rank, n);
  return PositiveMod(int64_t{rank} + 1, n);
}

int RingAllGatherSendChunk(int rank, int n, int step) {
  CheckWorld(rank, n);
  CheckStep(step, 0, n - 1, "ring allgather");
  return PositiveMod(int64_t{rank} + 1 - step, n);
}

int RingAllGatherRecvChunk(int rank, int n, int step) {
  CheckWorld(rank, n);
  CheckStep(step, 0, n - 1, "ring allgather");
  return PositiveMod(int64_t{rank} - step, n);
}

int LargestPowerOfTwoAtMost(int n) {
  if (n < 1) throw InvalidArgument("peer pattern: world size " + std::to_string(n) + " < 1");
  int p = 1;
  while (p <= n / 2) p *= 2;
  return p;
}

RecursiveDoublingPlan RecursiveDoubling(int rank, int n) {
  CheckWorld(rank, n);
  RecursiveDoublingPlan plan;
  plan.pow2 = LargestPowerOfTwoAtMost(n);
  const int extra = n - plan.pow2;
  plan.is_extra = rank >= plan.pow2;
  if (plan.is_extra) {
    plan.fold_partner = rank - plan.pow2;
    return plan;
  }
  if (rank < extra) plan.fold_partner = rank + plan.pow2;
  for (int d = 1; d < plan.pow2; d *= 2) plan.partners.push_back(rank ^ d);
  return plan;
}

std::vector<int> DisseminationDistances(int n) {
  if (n < 1) throw InvalidArgument("peer pattern: world size " + std::to_string(n) + " < 1");
  std::vector<int> out;
  for (int64_t d = 1; d < n; d *= 2) out.push_back(static_cast<int>(d));
  return out;
}

RowRange BalancedChunk(int64_t rows, int n, int i) {
  if (rows < 0) throw InvalidArgument("balanced chunk: rows " + std::to_string(rows) + " < 0");
  CheckWorld(i, n);
  const int64_t base = rows / n;
  const int64_t extra = rows % n;
  const int64_t begin = i * base + std::min<int64_t>(i, extra);
  return {begin, begin + base + (i < extra ? 1 : 0)};
}

std::vector<int64_t> BalancedChunkBounds(int64_t rows, int n) {
  std::vector<int64_t> bounds;
  bounds.reserve(static_cast<size_t>(n) + 1);
  for (int i = 0; i < n; ++i) bounds.push_back(BalancedChunk(rows, n, i).begin);
  bounds.push_back(rows);
  return bounds;
}

int BalancedChunkOf(int64_t rows, int n, int64_t row) {
  if (n < 1) throw InvalidArgument("balanced chunk: world size " + std::to_string(n) + " < 1");
  if (row < 0 || row >= rows) {
    throw InvalidArgument(Where{}, "balanced chunk: row ", row, " is outside [0, ", rows, ")");
  }
  const int64_t base = rows / n;
  const int64_t extra = rows % n;
  const int64_t big = extra * (base + 1);  // rows held by the larger chunks
  if (row < big) return static_cast<int>(row / (base + 1));
  return static_cast<int>(extra + (row - big) / base);
}

}  // namespace zen
