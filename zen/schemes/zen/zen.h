// zen/schemes/zen/zen.h — `zen`: ZEN's Balanced Parallelism with hierarchical
// hashing and the hash bitmap (Wang et al., OSDI 2025, sections 3.1-3.3).
//
// Every rank is a worker and a server. A keyed bijection pi of [0, rows)
// (RowOwner::Permuted; seed broadcast from rank 0 on first use and cached
// per (world size, seed)) assigns each row id to the server whose range of
// pi values holds pi(id), at position pi(id) - start in that server's
// domain; the assignment is balanced whatever the skew of the ids, and
// nothing is materialized per row: memory and CPU follow the non-zeros
// (2^40 rows with 3 non-zeros sync in milliseconds).
//   1. partition: the rank's rows are split per server (sparse input: a
//      counting pass; dense buffer: hierarchical hashing, Algorithm 1);
//   2. push (sparse reduce-scatter): worker i sends server j the rows it
//      holds that j owns, COO of domain positions, all pairs in flight at
//      once in rotated order; server j sums what it receives (n-way sorted
//      merge by position, read straight out of the receive buffers);
//   3. pull (allgather): server j sends its aggregated rows to every rank,
//      hash-bitmap encoded over its domain D_j, or COO where that is smaller
//      (chosen per message, tagged in the header); workers map positions back
//      to ids (pi^-1) straight out of the receive buffers and reassemble the
//      union (sparse: a radix sort by id; dense: a scatter into the buffer).
// Buffers live in a per-instance workspace reused across calls.
//
// Values of every dtype it declares (float32, float64, bfloat16, float16):
// each call turns the tensor's dtype into its value type T once
// (WithValueType) and runs its phases as templates on T; the partitioners
// (partitioner.h) take rows of T, and the push and pull move rows as
// bytes (row_codec.h: value_bytes), at the dtype's own width. Sums are
// formed in AccumOf<T> (float64 in float64; bfloat16 and float16 in float32,
// read from the pushed 16-bit values) and rounded once when the owner
// stores them; with a sum order (dense calls) each addition is rounded to T
// instead, as the ordered ring and Gloo do. The element path (width 1: one
// word per element, its value's 32 bits below its position) and the compact
// pushes that feed it are float32's; a tensor of another dtype of width 1
// takes the rows path (COO pushes). Half-width wire values
// (SyncOptions::values) are float32's only (refused for another dtype on
// every rank). A dense buffer of any of these dtypes takes the same dense
// path (its non-zero rows tested in T: zero is +0 or -0 once widened).
// Bytes a rank receives: about (n-1)/n x (d + d gamma) x rows x row bytes
// (Eq. 1), i.e. (1 + gamma)/n of what agsparse receives.
//
// Sole rows stay home (rows wider than 1; an extension of the paper's
// pull): a row of the sum that only rank q contributed is q's own row, bit
// for bit (a sum of one value), so server j does not send it back to q.
// Its pull is then grouped: the sole rows of rank 0, 1, ..., n - 1, then
// the rows of two or more contributors, each group a rows message of its
// own (8-byte aligned, back to back), then the sole rows of ranks 0..n-2
// once more (stored at both places as they are summed), so that rank q's
// copy is one window of that buffer: the sole rows of ranks q + 1..n - 1,
// the shared rows, those of ranks 0..q - 1
// (FinishAllToAllVSpansEach: no copy per peer, one message per peer). q
// finds its own sole rows as the positions it pushed to j that are not
// among the shared ones, and takes their values from its own partition
// (half-width values: each message narrowed, q rounds its own rows the
// same way). With skewed embedding ids most rows of the union have one
// contributor (the shipped trace: 80%), and a rank's bytes received fall
// from about 1.16x to 1.07x of the must-receive bound. Where it does not
// pay (few sole rows, a forced bitmap pull, a sum order) each rank gets
// the one plain message.
//
// The last call's per-phase byte counts (from the communicator's counters)
// and timings are kept in last_stats(); ZenLastStats() finds them behind a
// Scheme pointer.
//
// Usage:
//   auto s = zen::BuiltinSchemes().Create("zen", options);
//   zen::SparseTensor sum = s->Sync(comm, local);   // float32, float64, bfloat16 or float16
//   s->SyncDense(comm, bucket, rows, width, "emb");   // hierarchical-hash path
//   if (const zen::ZenStats* st = zen::ZenLastStats(*s)) print(st->pull_bytes_recv);
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "zen/comm/collectives.h"
#include "zen/core/function_ref.h"
#include "zen/core/merge_rows.h"
#include "zen/core/radix_sort.h"
#include "zen/schemes/registry.h"
#include "zen/schemes/zen/partitioner.h"
#include "zen/schemes/zen/row_codec.h"

namespace zen {

enum class ZenOwnership { kHash, kRange };

struct ZenConfig {
  // kHash is ZEN (RowOwner::Permuted); kRange (even contiguous ranges)
  // exists to show what hashing buys on skewed data.
  ZenOwnership ownership = ZenOwnership::kHash;
  // Dense-buffer extraction: "hierarchical" (Algorithm 1) or "counting".
  std::string dense_partitioner = "hierarchical";
  // Pull encoding: kAuto picks per message; the others force one.
  EncodingChoice pull_encoding = EncodingChoice::kAuto;
  // Rows wider than 1: a server leaves out of each rank's pull the rows that
  // only that rank contributed (the grouped pull, above), where that pays.
  // false: the paper's pull, one message sent whole to every rank (for
  // comparisons). Per server: a receiver tells a grouped window from a
  // plain message by whether its first message fills it.
  bool sole_rows_stay_home = true;
};

// One call, as seen by this rank. Byte counts are payload bytes from
// comm.counters() (the size announcements of the collectives included).
struct ZenStats {
  int world = 1;
  int64_t rows = 0;
  int64_t width = 0;
  int64_t local_rows = 0;   // rows this rank contributed
  int64_t pushed_rows = 0;  // of those, rows owned by other servers
  int64_t served_rows = 0;  // rows of this rank's partition after aggregation
  int64_t result_rows = 0;  // rows of the global sum (the union)
  uint64_t push_bytes_sent = 0;
  uint64_t push_bytes_recv = 0;
  uint64_t pull_bytes_sent = 0;
  uint64_t pull_bytes_recv = 0;
  // Rows of this server's pull sent, over all peers: (n-1) x served_rows,
  // less each peer's sole rows where the pull is grouped (zen.h).
  int64_t pull_rows_sent = 0;
  RowEncoding pull_encoding = RowEncoding::kCoo;  // of this server's message
  int pull_bitmap_messages = 0;                   // received, by encoding
  int pull_coo_messages = 0;                      // COO or COO32
  int pull_elias_fano_messages = 0;
  double partition_seconds = 0;
  double push_seconds = 0;
  double aggregate_seconds = 0;
  double pull_seconds = 0;
  double decode_seconds = 0;
  bool dense_path = false;
};

class ZenScheme final : public Scheme {
 public:
  explicit ZenScheme(const SchemeOptions& options = {}, ZenConfig config = {});
  ~ZenScheme() override;

  std::string_view name() const override { return "zen"; }
  std::string_view description() const override;
  Support supports(const SparsityProfile& profile) const override;

  // Row ownership (when not ZEN's hash): a rank that owns rows by ranges
  // would read every peer's positions as something else.
  std::string shared_settings() const override;
  // Half-width wire values (float32), every dtype and, on dense calls, a
  // sum order (kZenCapabilities).
  SyncCapabilities capabilities() const override;

  const ZenStats& last_stats() const { return stats_; }
  const ZenConfig& config() const { return config_; }

  // log2 of the ids per permuted block of a width-1 tensor of `rows` over
  // `servers` (RowOwner::Permuted's block_bits; wider rows: 0, every row
  // permuted): the largest b <= kMaxElementBlockBits that leaves every server
  // at least kMinBlocksPerServer blocks, 0 where none does. Blocks let the
  // receiver order the result by sorting runs of rows, not rows; the
  // servers stay balanced while each owns thousands of blocks (a block of
  // hot ids weighs on one server: skewed ids cost some balance, measured in
  // docs/performance.md).
  static constexpr int kMaxElementBlockBits = 8;
  static constexpr int64_t kMinBlocksPerServer = 2048;
  static int ElementBlockBits(int64_t rows, int servers);


 protected:
  SparseTensor DoSync(Communicator& comm, const SparseTensor& local,
                      const SyncOptions& options) override;
  // A sum order (SyncOptions::sum_order) is taken here: each server adds
  // its elements' contributions in that order.
  void DoSyncDense(Communicator& comm, DenseValues buffer, int64_t rows, int64_t width,
                   std::string_view tensor, const SyncOptions& options) override;
  // Writes the union straight into `out`: no sort, no result tensor.
  void DoSyncInto(Communicator& comm, const SparseTensor& local, DenseValues out,
                  double divisor, const SyncOptions& options) override;

 private:
  template <typename T>
  using PartList = std::vector<RowsOf<T>>;
  // Persistent buffers, reused across calls (capacity kept).
  struct Workspace {
    // This rank's rows split per server, in the call's value type
    // (mine.Of<T>()).
    PerValueType<PartitionsOf> mine;
    std::vector<ByteBuffer> push_send, push_recv, pull_recv;
    ByteBuffer pull_send;
    RowsLayout pull_layout;  // plain pull; grouped: the shared rows' message
    // Grouped pull (wide rows): where each message starts in pull_send
    // (rank 0's sole rows, ..., rank n-1's, then the shared rows, then
    // where that first copy ends); empty for a plain pull. windows: rank
    // d's window, [windows[2d], windows[2d + 1]). served_class: per served row in
    // position order, 0 shared or 1 + its sole contributor; class_rows and
    // class_slots: per class, its rows and where its positions go.
    std::vector<size_t> group_starts;
    std::vector<uint32_t> served_class;
    std::vector<size_t> class_rows, class_slots;
    std::vector<int64_t> class_positions;  // the positions, grouped by class
    size_t left_out_rows = 0;  // grouped: the rows not sent back to their sole contributor
    std::vector<size_t> windows;
    // Per server: its grouped pull's group messages received (the sole rows
    // of the other ranks), viewed in pull_recv.
    std::vector<std::vector<RowsMessage>> pulled_groups;
    // Per server: 1 where its pull left this rank's sole rows out (they are
    // the positions this rank pushed to it that are not among its shared
    // rows), 0 for a plain pull or this server's own.
    std::vector<uint8_t> pulled_own_sole;
    std::vector<RowsLayout> class_layouts;
    std::vector<std::byte*> class_next;  // where each class's next sum goes
    std::vector<size_t> widen_scratch;  // WidenRowsSequence's
    std::vector<uint64_t> seen_positions;  // ForEachPulledRow's, a grouped pull's rows
    // This server's parts (its own and each peer's push), per value type:
    // PartsOf<T>(); part_count of them in this call.
    PerValueType<PartList> parts;
    size_t part_count = 0;
    std::vector<RowsMessage> pushed;  // element path: the peers' COO32 pushes, viewed
    std::vector<int64_t> served_positions;
    std::vector<float> served_sums;            // element path: the sums, before the layout
    std::vector<size_t> part_ends, cursors;    // element path: each part's run of words
    MergeScratch merge;
    std::vector<RowsMessage> pulled;  // views into pull_recv
    std::vector<KeyItem> order, sort_scratch;
    std::vector<uint64_t> words;         // this server's aggregation, sorted (position, row)
    std::vector<const std::byte*> agg_rows;  // the rows those words index
    std::vector<uint32_t> agg_parts;     // and the part (rank) each came from
    std::vector<uint64_t> result_words;  // the result's words: (id, value) or (id, row index)
    std::vector<uint64_t> word_scratch;  // their radix sorts
    IncrementalWordSort result_sort;         // element path: the result's sort, fed per message
    // Element path with blocks: one word per run of the result's words of
    // one block (the block above the run's ordinal), and where each run
    // starts in result_words (one more entry: the end).
    std::vector<uint64_t> runs;
    std::vector<size_t> run_starts;
    std::vector<const std::byte*> rows;
    RequestList push_requests;  // each collective's requests, from post to finish
    RequestList pull_requests;
  };
  // Called by Exchange for each server's pull message, once it is parsed.
  using OnPulled = FunctionRef<void(const HashDomains& domains, int server)>;
  // The domains of a call (the owner: ZEN's permutation, by blocks for
  // width 1; see ElementBlockBits).
  HashDomains Prepare(Communicator& comm, int64_t rows, int64_t width, const Where& where);
  uint64_t AgreedSeed(Communicator& comm);
  // Push, aggregate (in T, the call's value type), pull, parse. Leaves in
  // ws_: this server's sum
  // (served_*) and views of every server's pull message (pulled[j]);
  // on_pulled(domains, j) runs as soon as pulled[j] is set (the peers' in the
  // order they arrive, while later ones travel; this server's last). The
  // pulls are parsed with pulled_positions: kByReader only where on_pulled
  // reads every message with ForEachChecked.
  template <typename T>
  void Exchange(Communicator& comm, const HashDomains& domains, int64_t width, const Where& where,
                OnPulled on_pulled, PositionCheck pulled_positions = PositionCheck::kNow);
  // The bytes of one value of the call in progress (DTypeSize(call_dtype_)).
  size_t ValueBytes() const { return DTypeSize(call_dtype_); }
  // This server's parts of value type T.
  template <typename T>
  std::vector<RowsOf<T>>& PartsOf() {
    return ws_.parts.Of<T>();
  }
  // The call's two rounds: their tags, posted before either starts, and
  // whether this rank has sent its part (a failure then tells the peers
  // only in the rounds not sent yet).
  struct Rounds {
    Tag push_tag = 0;
    Tag pull_tag = 0;
    bool windows = false;  // wide rows: the pull is an AllToAllV of windows
    bool push_sent = false;
    bool pull_sent = false;
  };
  // Both rounds' receives posted (exchange.cc).
  Rounds PostRounds(Communicator& comm, const HashDomains& domains, int64_t width);
  // Phase 2 (push.cc): ws_.mine (of T, the call's value type) encoded per
  // server and sent; each peer's push read into ws_.pushed.
  template <typename T>
  void Push(Communicator& comm, const HashDomains& domains, int64_t width, const Where& where,
            Rounds& rounds);
  // Phase 3 (aggregate.cc): this server's sum of its parts laid out in
  // ws_.pull_send; returns its row count.
  template <typename T>
  int64_t Aggregate(const HashDomains& domains, int server, int64_t width);
  // Phase 4 (pull.cc): this server's pull sent, every server's read and
  // handed to on_pulled (this server's own last, ReadOwnPull).
  void Pull(Communicator& comm, const HashDomains& domains, int64_t width, const Where& where,
            OnPulled on_pulled, PositionCheck pulled_positions, int64_t served, Rounds& rounds);
  void ReadOwnPull(const HashDomains& domains, int server, int64_t width, const Where& where,
                   PositionCheck pulled_positions);
  // A peer's push or pull message, validated and viewed in place: an empty
  // one (the peer failed) raises, half-width values are widened, then parsed.
  RowsMessage ReadPeerMessage(ByteBuffer& message, const char* round, int peer,
                              int64_t domain_size, int server, int64_t width,
                              const Where& where,
                              PositionCheck positions = PositionCheck::kNow) const;
  // After a failure inside Exchange: sends an empty message in each round
  // whose tag is given (not yet sent) and waits for that round; never throws.
  // pull_windows: the pull is an AllToAllV (wide rows), not an AllGatherV.
  void TellPeersThisRankFailed(Communicator& comm, const Tag* push_tag, const Tag* pull_tag,
                               bool pull_windows) noexcept;
  // Wide rows: server's pull window (ws_.pull_recv[server]) parsed: the
  // plain message, or the grouped window's shared rows, returned; its
  // groups into ws_.pulled_groups[server].
  RowsMessage ReadPeerWindow(int server, int64_t domain_size, int64_t width,
                             const Where& where, int receiver);
  // After the sums of a grouped pull are in place: writes each group's
  // header and index into ws_.pull_send (AggregateRowsSorted).
  void WriteGroupedIndexes(int64_t domain_size, int64_t width);
  // Whether this server groups its pull: sole rows to leave out that
  // outweigh the groups' headers, and a pull encoding that is not a forced
  // bitmap (ZenConfig::sole_rows_stay_home on).
  bool GroupsPay(size_t left_out_bytes, int servers) const;
  // Half-width values: a grouped pull's messages narrowed in place and
  // packed (ws_.group_starts updated). No-op for float32.
  void NarrowGroupedPull();
  // A grouped pull's sole rows of ranks 0..n-2 copied after its first copy
  // (unless `copied`: written there already), and each rank's window
  // (ws_.windows).
  void CopyGroupsForWindows(bool copied);
  // Half-width values: this rank's partition values for every other server
  // rounded to the wire's format and back, in place (after the push is
  // encoded): its sole rows, left out of a grouped pull, then equal what
  // every other rank receives.
  void RoundPushedValues(int server, int64_t width);
  // This server's sum of its parts into ws_.pull_send (values) and
  // ws_.served_positions; sets ws_.pull_layout; returns the row count.
  template <typename T>
  int64_t AggregateRows(int64_t domain_size, int64_t width, int server);
  // AggregateRows for domains and row counts below 2^32 (`total` incoming
  // rows): a radix sort of (position, row) words instead of a heap merge.
  // Lays the pull out grouped where GroupsPay (ws_.group_starts non-empty;
  // the groups' indexes written too), else plain.
  template <typename T>
  int64_t AggregateRowsSorted(int64_t domain_size, int64_t width, size_t total, int server);
  // ws_.words: one word per incoming row of the parts (its position above
  // its index in ws_.agg_rows, whose part in ws_.agg_parts), sorted by
  // position (stable).
  template <typename T>
  void SortIncomingRows(int64_t domain_size, int64_t width, size_t total);
  // After SortIncomingRows: the served positions and each one's class
  // (ws_.served_class, ws_.class_rows), ws_.left_out_rows; returns the
  // served row count.
  size_t ClassifyServed(size_t total, int server);
  // A grouped pull's messages laid out in ws_.pull_send (padding zeroed,
  // ws_.group_starts, ws_.class_layouts, ws_.class_positions); `twice`:
  // room for the windows' second copy written with the first. Returns where
  // the first copy ends.
  size_t LayoutGroupedPull(int64_t domain_size, int64_t width, bool twice);
  // After ws_.words (position above 32 bits of payload) is sorted: its
  // distinct positions into ws_.served_positions, the pull message laid
  // out for them; returns where the sums' values go.
  std::byte* LayoutServed(int64_t domain_size, int64_t width);
  // The same for ws_.served_positions as they are.
  std::byte* LayoutServedPositions(int64_t domain_size, int64_t width);
  // Width 1, domain <= 2^32, no sum order, float32: this server's part in
  // PartsOf<float>()[server], the peers' compact pushes in ws_.pushed.
  int64_t AggregateElements(int64_t domain_size, int server);
  // AggregateElements over `ranges` ranges of kElementRange positions, each
  // summed in an accumulator on the stack: ws_.served_positions and
  // ws_.served_sums. FormatError when a part's positions do not ascend.
  static constexpr int kElementRangeBits = 11;
  static constexpr uint64_t kElementRange = uint64_t{1} << kElementRangeBits;
  void AggregateElementRanges(uint64_t ranges, int server);
  // Whether pushes to a server of domain_size are compact (the smallest of
  // COO32, Elias-Fano and the bitmap, per message) rather than COO: width 1
  // float32 without a sum order, i.e. exactly when that server aggregates
  // with AggregateElements (which reads any index); the same on every rank.
  bool CompactPush(int64_t width, int64_t domain_size) const {
    return width == 1 && call_dtype_ == DType::kFloat32 && call_.sum_order.empty() &&
           domain_size <= kMaxCoo32Domain;
  }
  template <typename T>
  int64_t AggregateInSumOrder(const HashDomains& domains, int server, int64_t width);
  // The sparse entries' common start: stats reset, and for n > 1 this
  // rank's partition, then `zero` filled with zeros, then the exchange
  // (on_pulled as for Exchange); returns the domains. nullopt for n = 1
  // (nothing to exchange). T: local's value type.
  template <typename T>
  std::optional<HashDomains> SparseExchange(Communicator& comm, const SparseTensor& local,
                                            std::span<std::byte> zero, OnPulled on_pulled);
  // Width 1, rows <= 2^32: server's pulled message as words at the start of
  // ws_.result_words (grown if needed, never zeroed), one per element, its
  // id above its value's bits; returns them (valid until the next call).
  // The message's positions are read with ForEachChecked (SparseExchange
  // parses the pulls of such tensors with PositionCheck::kByReader).
  // Written at ws_.result_words[at] instead where `at` is given. With
  // blocks (the owner's block_bits > 0) the words hold keys, not ids, and
  // each run of one block's keys is appended to ws_.runs (its block of
  // ids above its ordinal in ws_.run_starts) and ws_.run_starts (where it
  // starts in result_words): id = block << block_bits | (key's low bits).
  std::span<uint64_t> ElementWords(const HashDomains& domains, int server, const Where& where,
                                   size_t at = 0);
  // Whether a tensor takes the element path: float32 of width 1, rows <=
  // 2^32 (ids and keys fit the high half of a word, the value its low half).
  static bool ElementPath(const SparseTensor& t) {
    return t.width() == 1 && t.dtype() == DType::kFloat32 && t.rows() <= (int64_t{1} << 32);
  }
  // fn(id, row) for every row of server's pulled message; a grouped pull's
  // rows include this rank's sole rows (their values from its own
  // partition) unless own_sole_rows is false (the dense path, whose buffer
  // holds them already). Returns how many sole rows of this rank the pull
  // left out. A grouped pull is several messages: a row in two of them, or
  // a row this rank pushed among another rank's sole rows (a malformed
  // pull: each output would keep one copy) is a FormatError, prefixed by
  // `where`.
  // Sync's result (result.cc), after the last pull: element path with
  // blocks (`filled` words in runs), element path (ws_.result_sort), rows
  // (ws_.result_words when `packed`, else ws_.order; ws_.rows).
  void ElementResultFromRuns(size_t filled, int block_bits, int64_t rows,
                             std::vector<int64_t>& ids, std::vector<float>& values);
  void ElementResult(std::vector<int64_t>& ids, std::vector<float>& values);
  template <typename T>
  void RowsResult(bool packed, int64_t rows, int64_t width, std::vector<int64_t>& ids,
                  std::vector<T>& values);
  // fn(id, const T* row).
  template <typename T, typename Fn>
  size_t ForEachPulledRow(const HashDomains& domains, int server, const Where& where, Fn&& fn,
                          bool own_sole_rows = true);
  // DoSync, DoSyncInto and DoSyncDense for values of type T.
  template <typename T>
  SparseTensor SyncOf(Communicator& comm, const SparseTensor& local);
  template <typename T>
  void SyncIntoOf(Communicator& comm, const SparseTensor& local, std::span<T> out,
                  double divisor);
  // The dense path: the buffer's non-zero rows (tested in T) partitioned
  // by the dense partitioner, exchanged, and the union written back.
  template <typename T>
  void SyncDenseOf(Communicator& comm, std::span<T> buffer, int64_t rows, int64_t width,
                   std::string_view tensor);
  // SyncIntoOf's element path (float32, width 1): server j's pulled words
  // written into out, each value / divisor.
  void ElementInto(const HashDomains& domains, int j, const Where& where, std::span<float> out,
                   float divisor);

  SchemeOptions options_;
  ZenConfig config_;
  int threads_;
  std::unique_ptr<Partitioner> sparse_partitioner_;
  std::unique_ptr<Partitioner> dense_partitioner_;
  std::map<std::pair<int, uint64_t>, uint64_t> seeds_;  // (world, local seed) -> agreed
  Workspace ws_;
  ZenStats stats_;
  // The options and the values' dtype of the call in progress, set by each
  // DoSync* on entry (the sum order's steps are the caller's, read during
  // that call only).
  SyncOptions call_;
  DType call_dtype_ = DType::kFloat32;
  std::vector<const std::byte*> contrib_;  // per rank, the row of the key being summed
};

// The stats of the last call if s is a ZenScheme, else nullptr.
const ZenStats* ZenLastStats(const Scheme& s);

// What zen takes per call: its registry entry's and its objects' one
// declaration.
// float64 is summed in float64, bfloat16 and float16 in float32 and rounded
// once per stored value (every adding phase is templated on the value
// type); each takes a sum order (AggregateInSumOrder: 16-bit values rounded
// after each addition).
inline constexpr SyncCapabilities kZenCapabilities{
    .narrow_values = true,
    .sum_order = true,
    .dtypes = DTypeSet::All(),
    .sum_order_dtypes = DTypeSet::All()};

SchemeInfo ZenInfo();
// Its cost function (registry.h), defined in cost.cc; BuiltinSchemes attaches
// it to the entry.
CostVolumes ZenCost(const CostInputs& in);

}  // namespace zen
