// zen/comm/peer_pattern.h — who talks to whom, in which step (no data
// movement). Pure functions, unit-tested exhaustively on their own, so that
// collectives and schemes only have to get the data right.
//
// Patterns:
//   - rotated all-to-all: in step s of 1..n-1 rank r sends to (r + s) mod n
//     and receives from (r - s) mod n; each step is a permutation, so no rank
//     sees incast;
//   - ring: neighbours and the chunk a rank sends / receives in each step of
//     a ring reduce-scatter and of the ring allgather that follows it;
//   - recursive doubling (SparCML) with the ranks beyond the largest power of
//     two folded into the first ones;
//   - dissemination barrier partners;
//   - a balanced split of [0, rows) into n contiguous chunks.
//
// Usage:
//   for (int s = 1; s < n; ++s) {
//     comm.Send(zen::AllToAllSendPeer(rank, n, s), tag, ...);
//   }
//   zen::RowRange mine = zen::BalancedChunk(rows, n, rank);   // [begin, end)
//   zen::RecursiveDoublingPlan plan = zen::RecursiveDoubling(rank, n);
#pragma once

#include <cstdint>
#include <vector>

namespace zen {

// (a mod n) in [0, n) for any sign of a; n > 0.
int PositiveMod(int64_t a, int n);

// ---- Rotated all-to-all -------------------------------------------------
// step in [1, n): the peer rank sends to / receives from in that step.
int AllToAllSendPeer(int rank, int n, int step);
int AllToAllRecvPeer(int rank, int n, int step);

// ---- Ring -----------------------------------------------------------------
struct RingNeighbours {
  int next = 0;  // (rank + 1) mod n: where this rank sends
  int prev = 0;  // (rank - 1) mod n: where this rank receives from
};
RingNeighbours Ring(int rank, int n);

// Reduce-scatter over n chunks, steps s in [0, n - 1): rank r sends chunk
// (r - s) mod n to next and receives chunk (r - s - 1) mod n from prev, which
// it adds into its own copy. Afterwards rank r holds the full sum of chunk
// RingOwnedChunk(r, n) = (r + 1) mod n.
int RingReduceScatterSendChunk(int rank, int n, int step);
int RingReduceScatterRecvChunk(int rank, int n, int step);
int RingOwnedChunk(int rank, int n);

// Allgather after the reduce-scatter above, steps s in [0, n - 1): rank r
// sends chunk (r + 1 - s) mod n (starting with the one it owns) and receives
// chunk (r - s) mod n, which it stores.
int RingAllGatherSendChunk(int rank, int n, int step);
int RingAllGatherRecvChunk(int rank, int n, int step);

// ---- Recursive doubling (SparCML) ---------------------------------------
// With p the largest power of two <= n, ranks [p, n) are "extra": before the
// rounds each extra rank e sends its data to e - p and then waits; after the
// rounds it receives the result from e - p. Ranks [0, p) run log2(p) rounds;
// in round k rank r exchanges with r XOR 2^k.
struct RecursiveDoublingPlan {
  int pow2 = 1;               // largest power of two <= n
  bool is_extra = false;      // rank >= pow2
  int fold_partner = -1;      // extra: rank - pow2; core rank < n - pow2: rank + pow2; else -1
  std::vector<int> partners;  // core ranks: partner of round k; empty for extra ranks
};
RecursiveDoublingPlan RecursiveDoubling(int rank, int n);

// Largest power of two <= n (n >= 1).
int LargestPowerOfTwoAtMost(int n);

// ---- Dissemination barrier ----------------------------------------------
// Round k (distance d = 2^k < n): send to (r + d) mod n, receive from
// (r - d) mod n. ceil(log2 n) rounds; none for n == 1.
std::vector<int> DisseminationDistances(int n);

// ---- Balanced chunking of [0, rows) -------------------------------------
struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

// Chunk i of n: the first rows % n chunks have one row more than the others.
// Chunks are contiguous, ordered, and cover [0, rows) exactly. rows >= 0,
// n >= 1, i in [0, n).
RowRange BalancedChunk(int64_t rows, int n, int i);

// The n + 1 boundaries: chunk i is [bounds[i], bounds[i + 1]).
std::vector<int64_t> BalancedChunkBounds(int64_t rows, int n);

// The chunk that contains row (0 <= row < rows).
int BalancedChunkOf(int64_t rows, int n, int64_t row);

}  // namespace zen
