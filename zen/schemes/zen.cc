#include "zen/schemes/zen.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>

#include "zen/comm/collectives.h"
#include "zen/core/checked.h"
#include "zen/core/error.h"
#include "zen/core/half.h"

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

// The largest message a peer may announce: a COO message of `count` rows
// (a full bitmap is smaller); saturates instead of overflowing.
int64_t CooBound(int64_t count, int64_t width) {
  size_t rows_bytes = 0, total = 0;
  if (!TryMul(static_cast<size_t>(count), sizeof(int64_t) + static_cast<size_t>(width) * sizeof(float),
              rows_bytes) ||
      !TryAdd(rows_bytes, kRowHeaderBytes, total) || total > static_cast<size_t>(kAnyBytes)) {
    return kAnyBytes;
  }
  return static_cast<int64_t>(total);
}

// The largest pull window of wide rows: a COO message of `count` rows plus
// a grouped pull's n - 1 more headers and every message's padding;
// saturates.
int64_t WindowBound(int64_t count, int64_t width, int n) {
  const int64_t coo = CooBound(count, width);
  const int64_t extra = static_cast<int64_t>(n) * (static_cast<int64_t>(kRowHeaderBytes) + 8);
  return coo > kAnyBytes - extra ? kAnyBytes : coo + extra;
}

// A grouped pull's message slots (zen.h): slot m < n holds the sole rows of
// rank m (class 1 + m), slot n the shared rows (class 0).
size_t SlotClass(size_t slot, size_t n) { return slot == n ? 0 : slot + 1; }
size_t ClassSlot(size_t c, size_t n) { return c == 0 ? n : c - 1; }

// A message with no bytes is how a peer says it failed in this call (every
// real push or pull message has at least its header).
void CheckNotFailed(const ByteBuffer& message, const char* round, int peer, const Where& where) {
  if (message.empty()) {
    throw FormatError(where, "zen: rank ", peer, " failed during this call (its ", round,
                      " message is empty); its own error names the cause");
  }
}

}  // namespace

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
  if (options_.wire_values != WireValues::kFloat32) {
    out += out.empty() ? "" : ", ";
    out += "wire values ";
    out += WireValuesName(options_.wire_values);
  }
  return out;
}

Support ZenScheme::supports(const SparsityProfile& profile) const {
  if (profile.rows > kMaxPermutedRows) {
    return Support::No("rows " + std::to_string(profile.rows) + " exceed 2^62");
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

void ZenScheme::Exchange(Communicator& comm, const HashDomains& domains, int64_t width,
                         const Where& where, OnPulled on_pulled, PositionCheck pulled_positions) {
  const int n = comm.size();
  const int r = comm.rank();
  const size_t un = static_cast<size_t>(n);
  Workspace& ws = ws_;
  const Partitions& mine = ws.mine;

  // Both rounds' receives are posted first: a peer that finishes its part
  // of a round early sends at once (over Gloo its transfer finds this
  // rank's receive-ready already there), so a server's pull travels while
  // slower servers still aggregate, and no receive-ready handshake waits
  // behind bulk data on the critical path.
  auto t0 = Clock::now();
  const Snapshot before_push = Take(comm);
  const Tag push_tag =
      PostAllToAllV(comm, ws.push_recv, CooBound(domains.size(r), width), ws.push_requests);
  // Wide rows: each peer gets its window of the pull (a grouped pull leaves
  // the peer's own sole rows out; zen.h), an AllToAllV on every rank.
  const bool windows = width > 1;
  const Tag pull_tag =
      windows ? PostAllToAllV(comm, ws.pull_recv, WindowBound(domains.max_size(), width, n),
                              ws.pull_requests)
              : PostAllGatherV(comm, ws.pull_recv, CooBound(domains.max_size(), width),
                               ws.pull_requests);
  bool push_sent = false, pull_sent = false;
  Snapshot after_push, after_pull;
  try {
    // Push: domain positions, one message per other server, encoded
    // straight into the persistent send buffers: COO, or for element-sparse
    // rows the smallest index (COO32, Elias-Fano or the bitmap: the index
    // is half of such a message).
    ws.push_send.resize(un);
    for (int j = 0; j < n; ++j) {
      if (j == r) continue;
      EncodeRows(domains.size(j), width, mine.positions_of(j), mine.values_of(j),
                 CompactPush(width, domains.size(j)) ? EncodingChoice::kAuto
                                                     : EncodingChoice::kCoo,
                 ws.push_send[static_cast<size_t>(j)]);
      NarrowRowsValues(ws.push_send[static_cast<size_t>(j)], 0, options_.wire_values);
      stats_.pushed_rows += mine.count(j);
    }
    push_sent = true;  // FinishAllToAllVEach posts every send before it waits
    // Each peer's push is checked and parsed as soon as it is complete,
    // while the later ones travel.
    const bool compact = CompactPush(width, domains.size(r));
    ws.pushed.resize(un);
    FinishAllToAllVEach(comm, push_tag, ws.push_send, ws.push_requests, [&](int i) {
      const RowsMessage m = ReadPeerMessage(ws.push_recv[static_cast<size_t>(i)], "push", i,
                                            domains.size(r), r, width, where);
      if ((m.encoding == RowEncoding::kCoo) == compact) {
        throw FormatError(where, "zen: push message from rank ", i, " is ",
                          compact ? "COO, expected a compact index (COO32, Elias-Fano, bitmap)"
                                  : "not COO");
      }
      ws.pushed[static_cast<size_t>(i)] = m;
    });
    after_push = Take(comm);
    stats_.push_seconds = Since(t0);

    // Aggregate this server's partition straight out of the receive buffers.
    t0 = Clock::now();
    ws.parts.clear();
    for (int i = 0; i < n; ++i) {
      if (i == r) {
        ws.parts.push_back({mine.positions_of(r), mine.values_of(r)});
        continue;
      }
      const RowsMessage& m = ws.pushed[static_cast<size_t>(i)];
      // COO positions are int64 at an 8-byte aligned offset of the buffer
      // (compact ones are read by AggregateElements from the message).
      ws.parts.push_back(
          {compact ? std::span<const int64_t>()
                   : std::span(reinterpret_cast<const int64_t*>(m.index),
                               static_cast<size_t>(m.count)),
           std::span(m.row(0), static_cast<size_t>(m.count) * static_cast<size_t>(width))});
    }
    // The sum is written straight into the pull message.
    ws.group_starts.clear();
    const int64_t served = !sum_order_.empty() ? AggregateInSumOrder(domains, r, width)
                           : compact ? AggregateElements(domains.size(r), r)
                                     : AggregateRows(domains.size(r), width, r);
    const bool grouped = !ws.group_starts.empty();  // its indexes written already
    if (!grouped) {
      WriteRowsIndex(domains.size(r), width, ws.served_positions, ws.pull_layout, ws.pull_send);
    }
    stats_.served_rows = served;
    stats_.aggregate_seconds = Since(t0);

    // Pull: this server's sum to everyone, hash bitmap or COO. Each peer's
    // message is parsed and handed to on_pulled (which decodes it into the
    // output) as soon as it is complete, while the later ones travel.
    t0 = Clock::now();
    double handed_on = 0;  // seconds spent parsing and in on_pulled
    stats_.pull_encoding = ws.pull_layout.encoding;
    if (!grouped) NarrowRowsValues(ws.pull_send, 0, options_.wire_values);  // grouped: done
    stats_.pull_rows_sent =
        served * (n - 1) - (grouped ? static_cast<int64_t>(ws.left_out_rows) : 0);
    // Half-width values: a receiver's own sole rows, left out of a grouped
    // pull, must be what the others receive: its values rounded to the
    // wire's format and back (the pushes are encoded already, and this
    // server's own part is summed).
    if (windows && options_.wire_values != WireValues::kFloat32) RoundPushedValues(r, width);
    ws.pulled.resize(un);
    ws.pulled_groups.resize(un);
    for (std::vector<RowsMessage>& g : ws.pulled_groups) g.clear();
    ws.pulled_own_sole.assign(un, 0);
    auto on_message = [&](int j) {
      const auto t = Clock::now();
      const RowsMessage m =
          windows ? ReadPeerWindow(j, domains.size(j), width, where, r)
                 : ReadPeerMessage(ws.pull_recv[static_cast<size_t>(j)], "pull", j,
                                   domains.size(j), j, width, where, pulled_positions);
      ws.pulled[static_cast<size_t>(j)] = m;
      (m.encoding == RowEncoding::kHashBitmap   ? stats_.pull_bitmap_messages
       : m.encoding == RowEncoding::kEliasFano ? stats_.pull_elias_fano_messages
                                               : stats_.pull_coo_messages)++;
      on_pulled(domains, j);
      handed_on += Since(t);
    };
    pull_sent = true;
    if (windows) {
      const std::span<const std::byte> all(ws.pull_send);
      FinishAllToAllVSpansEach(
          comm, pull_tag,
          [&](int d) {
            if (!grouped) return all;
            const size_t q = static_cast<size_t>(d);
            return all.subspan(ws.windows[2 * q], ws.windows[2 * q + 1] - ws.windows[2 * q]);
          },
          ws.pull_requests, on_message);
    } else {
      FinishAllGatherVEach(comm, pull_tag, ws.pull_send, ws.pull_requests, on_message);
    }
    after_pull = Take(comm);
    stats_.pull_seconds = Since(t0) - handed_on;
    stats_.decode_seconds += handed_on;

    // Every rank, this server included, uses the rounded sums it sent (the
    // sends are complete: its message may be widened in place).
    t0 = Clock::now();
    ws.pulled_groups[static_cast<size_t>(r)].clear();
    if (grouped) {
      // All of its first copy: every rank's sole rows (this server's own
      // among them), then the shared rows.
      WidenRowsSequence(ws.pull_send, ws.pull_send.size(), domains.size(r), width,
                        options_.wire_values, r, where, ws.widen_scratch);
      size_t at = 0;
      for (size_t q = 0; q < un; ++q) {
        ws.pulled_groups[static_cast<size_t>(r)].push_back(
            ParseRowsAt(ws.pull_send, at, domains.size(r), r, width, where));
      }
      ws.pulled[static_cast<size_t>(r)] =
          ParseRowsAt(ws.pull_send, at, domains.size(r), r, width, where);
    } else {
      WidenRowsValues(ws.pull_send, domains.size(r), width, options_.wire_values, r, where);
      ws.pulled[static_cast<size_t>(r)] =
          ParseRows(ws.pull_send, domains.size(r), r, width, where, pulled_positions);
    }
    on_pulled(domains, r);
    stats_.decode_seconds += Since(t0);
  } catch (const TransportError&) {
    throw;  // the transport failed: there is nothing more to tell the peers through it
  } catch (...) {
    // This rank failed inside the exchange (a peer's malformed or empty
    // message, a limit): an empty message in each round not yet sent tells
    // every peer now, so that every rank raises instead of waiting out the
    // timeout; then the original error.
    TellPeersThisRankFailed(comm, push_sent ? nullptr : &push_tag,
                            pull_sent ? nullptr : &pull_tag, windows);
    throw;
  }

  stats_.push_bytes_sent = after_push.sent - before_push.sent;
  stats_.push_bytes_recv = after_push.recv - before_push.recv;
  stats_.pull_bytes_sent = after_pull.sent - after_push.sent;
  stats_.pull_bytes_recv = after_pull.recv - after_push.recv;
}

RowsMessage ZenScheme::ReadPeerMessage(ByteBuffer& message, const char* round, int peer,
                                       int64_t domain_size, int server, int64_t width,
                                       const Where& where, PositionCheck positions) const {
  CheckNotFailed(message, round, peer, where);
  WidenRowsValues(message, domain_size, width, options_.wire_values, peer, where);
  return ParseRows(message, domain_size, server, width, where, positions);
}

void ZenScheme::TellPeersThisRankFailed(Communicator& comm, const Tag* push_tag,
                                        const Tag* pull_tag, bool pull_windows) noexcept {
  try {
    if (push_tag != nullptr) {
      const std::vector<ByteBuffer> empty(static_cast<size_t>(comm.size()));
      FinishAllToAllV(comm, *push_tag, empty, ws_.push_requests);
    }
  } catch (...) {  // the original error is what the caller raises
  }
  try {
    if (pull_tag != nullptr && pull_windows) {
      const std::vector<ByteBuffer> empty(static_cast<size_t>(comm.size()));
      FinishAllToAllV(comm, *pull_tag, empty, ws_.pull_requests);
    } else if (pull_tag != nullptr) {
      FinishAllGatherV(comm, *pull_tag, {}, ws_.pull_requests);
    }
  } catch (...) {
  }
}

RowsMessage ZenScheme::ReadPeerWindow(int server, int64_t domain_size, int64_t width,
                                      const Where& where, int receiver) {
  const size_t j = static_cast<size_t>(server);
  ByteBuffer& window = ws_.pull_recv[j];
  CheckNotFailed(window, "pull", server, where);
  std::vector<RowsMessage>& got = ws_.pulled_groups[j];
  got.clear();
  // One plain message, or a grouped window: the sole rows of ranks
  // receiver + 1, ..., n - 1, the shared rows, then those of ranks 0, ...,
  // receiver - 1 (half-width values widened first).
  WidenRowsSequence(window, window.size(), domain_size, width, options_.wire_values, server,
                    where, ws_.widen_scratch);
  size_t at = 0;
  const RowsMessage first = ParseRowsAt(window, at, domain_size, server, width, where);
  if (at == window.size()) return first;
  const size_t n = ws_.pulled.size();
  const size_t shared_at = n - 1 - static_cast<size_t>(receiver);
  RowsMessage shared = first;
  if (shared_at != 0) got.push_back(first);
  for (size_t k = 1; k < n; ++k) {
    const RowsMessage m = ParseRowsAt(window, at, domain_size, server, width, where);
    if (k == shared_at) {
      shared = m;
    } else {
      got.push_back(m);
    }
  }
  if (at != window.size()) {
    throw FormatError(where, "zen: grouped pull from server ", server, ": ", window.size() - at,
                      " bytes after its ", n, " messages");
  }
  ws_.pulled_own_sole[j] = 1;
  return shared;
}

void ZenScheme::RoundPushedValues(int server, int64_t width) {
  Workspace& ws = ws_;
  const WireValues v = options_.wire_values;
  const size_t w = static_cast<size_t>(width);
  const int n = static_cast<int>(ws.mine.offsets.size()) - 1;
  for (int j = 0; j < n; ++j) {
    if (j == server) continue;
    const auto first = static_cast<size_t>(ws.mine.offsets[static_cast<size_t>(j)]);
    float* x = ws.mine.values.data() + first * w;
    const size_t count = static_cast<size_t>(ws.mine.count(j)) * w;
    for (size_t i = 0; i < count; ++i) {
      x[i] = v == WireValues::kBfloat16 ? Bfloat16BitsToFloat(FloatToBfloat16Bits(x[i]))
                                        : HalfBitsToFloat(FloatToHalfBits(x[i]));
    }
  }
}

bool ZenScheme::GroupsPay(size_t left_out_bytes, int servers) const {
  // Each peer's window carries n messages' headers and padding instead of
  // one (at most 40 bytes each).
  const size_t peers = static_cast<size_t>(servers) - 1;
  return config_.sole_rows_stay_home && config_.pull_encoding != EncodingChoice::kHashBitmap &&
         left_out_bytes > peers * static_cast<size_t>(servers) * (kRowHeaderBytes + 8);
}

void ZenScheme::WriteGroupedIndexes(int64_t domain_size, int64_t width) {
  Workspace& ws = ws_;
  const size_t classes = ws.class_rows.size();
  size_t first = 0;
  for (size_t c = 0; c < classes; ++c) {
    const RowsLayout& layout = ws.class_layouts[c];
    const size_t at = ws.group_starts[ClassSlot(c, classes - 1)];
    WriteRowsIndex(domain_size, width,
                   std::span<const int64_t>(ws.class_positions).subspan(first, ws.class_rows[c]),
                   layout, std::span(ws.pull_send).subspan(at, layout.bytes));
    first += ws.class_rows[c];
  }
}

int64_t ZenScheme::AggregateRows(int64_t domain_size, int64_t width, int server) {
  Workspace& ws = ws_;
  size_t total = 0;
  for (const RowsView& part : ws.parts) total += part.ids.size();
  if (domain_size <= (int64_t{1} << 32) && total < (size_t{1} << 32)) {
    return AggregateRowsSorted(domain_size, width, total, server);
  }
  // A keys-only merge counts the union (which fixes the encoding and the
  // values' offset); the second merge writes the summed values where they
  // are sent from.
  const int64_t served = static_cast<int64_t>(MergedCount(ws.parts, ws.merge));
  ws.pull_layout = LayoutRows(domain_size, served, width, config_.pull_encoding);
  ws.pull_send.resize(ws.pull_layout.bytes);
  ws.served_positions.resize(static_cast<size_t>(served));
  MergeSumRowsInto(ws.parts, width, ws.served_positions.data(),
                   reinterpret_cast<float*>(ws.pull_send.data() + ws.pull_layout.values_offset),
                   ws.merge);
  return served;
}

int64_t ZenScheme::AggregateRowsSorted(int64_t domain_size, int64_t width, size_t total,
                                       int server) {
  // One word per incoming row, its position above its index in agg_rows,
  // radix-sorted by position (stable: equal positions keep the parts' rank
  // order), then one pass counts the union and one sums each run of equal
  // positions into the pull message: the first row copied, the others
  // added in rank order, bit for bit what the n-way merge (AggregateRows'
  // fallback) gives. A heap merge costs a few mispredicted branches per row
  // and ran twice (count, then sum); this is a few streaming passes.
  Workspace& ws = ws_;
  const size_t w = static_cast<size_t>(width);
  const size_t parts = ws.parts.size();
  ws.words.resize(total);
  ws.agg_rows.resize(total);
  ws.agg_parts.resize(total);
  size_t k = 0;
  for (size_t q = 0; q < parts; ++q) {
    const float* v = ws.parts[q].values.data();
    for (const int64_t p : ws.parts[q].ids) {
      ws.words[k] = static_cast<uint64_t>(p) << 32 | k;
      ws.agg_parts[k] = static_cast<uint32_t>(q);
      ws.agg_rows[k++] = v;
      v += w;
    }
  }
  SortWordsByBits(ws.words, ws.word_scratch, 32, KeyBits(domain_size));
  const uint64_t* words = ws.words.data();
  const float* const* rows = ws.agg_rows.data();
  // The rows are read in position order, i.e. at random: prefetched ahead.
  constexpr size_t kAhead = 8;
  auto row = [&](size_t i) {
    if (i + kAhead < total) __builtin_prefetch(rows[static_cast<uint32_t>(words[i + kAhead])]);
    return rows[static_cast<uint32_t>(words[i])];
  };
  // Sums each run of equal positions into place(served row index), then
  // done(served row index, the sum).
  auto sum_runs = [&](auto place, auto done) {
    size_t s = 0;
    for (size_t i = 0; i < total; ++s) {
      const uint64_t p = words[i] >> 32;
      float* out = place(s);
      CopyRow(out, row(i), width);
      for (++i; i < total && (words[i] >> 32) == p; ++i) {
        const float* src = row(i);
        for (size_t c = 0; c < w; ++c) out[c] += src[c];
      }
      done(s, out);
    }
  };
  auto nothing = [](size_t, float*) {};
  if (parts < 2 || !GroupsPay(SIZE_MAX, static_cast<int>(parts))) {  // never pays
    float* out = LayoutServed(domain_size, width);
    sum_runs([&](size_t s) { return out + s * w; }, nothing);
    return static_cast<int64_t>(ws.served_positions.size());
  }
  // Each served row's class: shared (two or more contributors) or the sole
  // row of the rank whose part holds it.
  ws.served_positions.resize(total);  // at most one per word; cut below
  ws.served_class.resize(total);
  ws.class_rows.assign(parts + 1, 0);
  size_t served = 0;
  for (size_t i = 0; i < total; ++served) {
    const uint64_t p = words[i] >> 32;
    const size_t first = i;
    for (++i; i < total && (words[i] >> 32) == p; ++i) {
    }
    const uint32_t c = i - first == 1 ? 1 + ws.agg_parts[static_cast<uint32_t>(words[first])] : 0;
    ws.served_positions[served] = static_cast<int64_t>(p);
    ws.served_class[served] = c;
    ++ws.class_rows[c];
  }
  ws.served_positions.resize(served);
  ws.served_class.resize(served);
  size_t& left_out = ws.left_out_rows;  // rows not sent back to their sole contributor
  left_out = 0;
  for (size_t q = 0; q < parts; ++q) {
    if (q != static_cast<size_t>(server)) left_out += ws.class_rows[1 + q];
  }
  if (!GroupsPay(left_out * w * sizeof(float), static_cast<int>(parts))) {
    float* out = LayoutServedPositions(domain_size, width);
    sum_runs([&](size_t s) { return out + s * w; }, nothing);
    return static_cast<int64_t>(served);
  }
  // Grouped: each class a message of its own, back to back, 8-byte
  // aligned, the padding zeroed: rank 0's sole rows, ..., rank n-1's, then
  // the shared rows (slot m holds class SlotClass(m)); then, for the
  // windows (CopyGroupsForWindows), slots 0..n-2 again. With float32 values
  // the second copy is written in the same pass as the first (each sole
  // row stored at its two places: no pass of its own); half-width values
  // are narrowed and packed first, then copied.
  const size_t classes = parts + 1;
  ws.class_layouts.resize(classes);
  for (size_t c = 0; c < classes; ++c) {
    ws.class_layouts[c] = LayoutRows(domain_size, static_cast<int64_t>(ws.class_rows[c]), width,
                                     config_.pull_encoding);
  }
  ws.group_starts.resize(classes + 1);
  size_t end = 0;
  for (size_t m = 0; m < classes; ++m) {
    ws.group_starts[m] = end;
    end = RowsPadded(end + ws.class_layouts[SlotClass(m, parts)].bytes);
  }
  ws.group_starts[classes] = end;
  const bool twice = options_.wire_values == WireValues::kFloat32;
  const size_t again = twice ? ws.group_starts[parts - 1] : 0;  // slots 0..n-2
  ws.pull_send.resize(end + again);
  for (size_t m = 0; m < classes; ++m) {
    const size_t used = ws.group_starts[m] + ws.class_layouts[SlotClass(m, parts)].bytes;
    for (const size_t copy : {size_t{0}, end}) {
      if (copy != 0 && (!twice || m + 1 >= parts)) continue;
      std::fill(ws.pull_send.begin() + static_cast<std::ptrdiff_t>(copy + used),
                ws.pull_send.begin() + static_cast<std::ptrdiff_t>(copy + ws.group_starts[m + 1]),
                std::byte{0});
    }
  }
  ws.pull_layout = ws.class_layouts[0];
  // The positions grouped by class (each group ascending), and where each
  // class's next row goes.
  ws.class_positions.resize(served);
  ws.class_slots.resize(classes);
  size_t first = 0;
  for (size_t c = 0; c < classes; ++c) {
    ws.class_slots[c] = first;
    first += ws.class_rows[c];
  }
  for (size_t s = 0; s < served; ++s) {
    ws.class_positions[ws.class_slots[ws.served_class[s]]++] = ws.served_positions[s];
  }
  // Each class's next row (a pointer into its message's values).
  ws.class_next.resize(classes);
  for (size_t c = 0; c < classes; ++c) {
    ws.class_next[c] = reinterpret_cast<float*>(ws.pull_send.data() +
                                                ws.group_starts[ClassSlot(c, parts)] +
                                                ws.class_layouts[c].values_offset);
  }
  const uint32_t* cls = ws.served_class.data();
  float** next = ws.class_next.data();
  const size_t twin = end / sizeof(float);  // the second copy, in floats (end is 8-aligned)
  const uint32_t last_twinned = static_cast<uint32_t>(parts - 1);  // class of slot n-2
  sum_runs(
      [&](size_t s) {
        float* out = next[cls[s]];
        next[cls[s]] = out + w;
        return out;
      },
      [&](size_t s, float* out) {
        if (twice && cls[s] != 0 && cls[s] <= last_twinned) CopyRow(out + twin, out, width);
      });
  WriteGroupedIndexes(domain_size, width);
  if (twice) {
    // The second copy's headers and indexes (its values are in place).
    for (size_t m = 0; m + 1 < parts; ++m) {
      const size_t at = ws.group_starts[m];
      std::memcpy(ws.pull_send.data() + end + at, ws.pull_send.data() + at,
                  ws.class_layouts[SlotClass(m, parts)].values_offset);
    }
  } else {
    NarrowGroupedPull();
  }
  CopyGroupsForWindows(twice);
  return static_cast<int64_t>(served);
}

void ZenScheme::CopyGroupsForWindows(bool copied) {
  // After the first copy (sole rows of ranks 0..n-1, then the shared rows):
  // the sole rows of ranks 0..n-2 again (unless `copied`: written with the
  // first), so that each rank d's window is one span: d + 1..n-1, shared,
  // 0..d-1.
  Workspace& ws = ws_;
  const size_t n = ws.class_layouts.size() - 1;
  const size_t first_end = ws.group_starts[n + 1];
  const size_t again = ws.group_starts[n - 1];  // slots 0..n-2, padded
  if (!copied) {
    ws.pull_send.resize(first_end + again);
    std::memcpy(ws.pull_send.data() + first_end, ws.pull_send.data(), again);
  }
  ws.windows.resize(2 * n);
  for (size_t d = 0; d < n; ++d) {
    ws.windows[2 * d] = ws.group_starts[d + 1];  // slot d + 1 (the shared rows for n - 1)
    ws.windows[2 * d + 1] = first_end + ws.group_starts[d];  // where slot d's copy starts
  }
}

void ZenScheme::NarrowGroupedPull() {
  const WireValues v = options_.wire_values;
  if (v == WireValues::kFloat32) return;
  // Each message narrowed in place and moved down to the end of the one
  // before (never right: narrowing shrinks), padding zeroed.
  Workspace& ws = ws_;
  const size_t classes = ws.class_layouts.size();
  size_t out = 0;
  for (size_t m = 0; m < classes; ++m) {
    const size_t at = ws.group_starts[m];
    const size_t bytes = ws.class_layouts[SlotClass(m, classes - 1)].bytes;
    const size_t size = NarrowRowsValuesIn(std::span(ws.pull_send).subspan(at, bytes), v);
    std::memmove(ws.pull_send.data() + out, ws.pull_send.data() + at, size);
    ws.group_starts[m] = out;
    const size_t end = RowsPadded(out + size);
    std::fill(ws.pull_send.begin() + static_cast<std::ptrdiff_t>(out + size),
              ws.pull_send.begin() + static_cast<std::ptrdiff_t>(end), std::byte{0});
    out = end;
  }
  ws.group_starts[classes] = out;
  ws.pull_send.resize(out);
}

float* ZenScheme::LayoutServed(int64_t domain_size, int64_t width) {
  Workspace& ws = ws_;
  ws.served_positions.clear();
  for (const uint64_t x : ws.words) {
    const int64_t p = static_cast<int64_t>(x >> 32);
    if (ws.served_positions.empty() || ws.served_positions.back() != p) {
      ws.served_positions.push_back(p);
    }
  }
  return LayoutServedPositions(domain_size, width);
}

float* ZenScheme::LayoutServedPositions(int64_t domain_size, int64_t width) {
  Workspace& ws = ws_;
  const auto served = static_cast<int64_t>(ws.served_positions.size());
  ws.pull_layout = LayoutRows(domain_size, served, width, config_.pull_encoding);
  ws.pull_send.resize(ws.pull_layout.bytes);
  return reinterpret_cast<float*>(ws.pull_send.data() + ws.pull_layout.values_offset);
}

int64_t ZenScheme::AggregateInSumOrder(const HashDomains& domains, int server, int64_t width) {
  Workspace& ws = ws_;
  const int n = domains.servers();
  const size_t w = static_cast<size_t>(width);
  const int64_t served = static_cast<int64_t>(MergedCount(ws.parts, ws.merge));
  ws.pull_layout = LayoutRows(domains.size(server), served, width, config_.pull_encoding);
  ws.pull_send.resize(ws.pull_layout.bytes);
  float* out = reinterpret_cast<float*>(ws.pull_send.data() + ws.pull_layout.values_offset);
  ws.served_positions.clear();
  contrib_.assign(static_cast<size_t>(n), nullptr);
  const RowOwner& owner = domains.owner();
  const int64_t start = domains.start(server);
  // Sums the row of `key` (its contributions in contrib_) into out.
  auto flush = [&](int64_t key) {
    const int64_t id = owner.IdOfKey(start + key);
    float* dst = out + ws.served_positions.size() * w;
    ws.served_positions.push_back(key);
    int64_t e = id * width;  // < rows x width: checked when the call was validated
    auto step = std::upper_bound(sum_order_.begin(), sum_order_.end(), e,
                                 [](int64_t v, const std::pair<int64_t, int>& s) {
                                   return v < s.first;
                                 });
    for (size_t k = 0; k < w; ++k, ++e) {
      while (step != sum_order_.end() && step->first <= e) ++step;
      const int first = step == sum_order_.begin() ? n - 1 : (step - 1)->second;
      float acc = 0;
      bool any = false;
      for (int j = 0, q = first; j < n; ++j, q = q == 0 ? n - 1 : q - 1) {
        const float* row = contrib_[static_cast<size_t>(q)];
        if (row == nullptr) continue;
        acc = any ? row[k] + acc : row[k];
        any = true;
      }
      dst[k] = acc;
    }
    std::fill(contrib_.begin(), contrib_.end(), nullptr);
  };
  bool pending = false;
  int64_t current = 0;
  ForEachMerged(ws.parts, ws.merge, [&](int64_t key, size_t part, size_t i) {
    if (pending && key != current) flush(current);
    current = key;
    pending = true;
    contrib_[part] = ws.parts[part].values.data() + i * w;
  });
  if (pending) flush(current);
  return served;
}

int64_t ZenScheme::AggregateElements(int64_t domain_size, int server) {
  // Width 1, positions below 2^32: one word per incoming element, the
  // position above the value's bits, read from every part in rank order
  // (the peers' positions from their messages in place, any compact index:
  // RowsMessage::ForEach). Each part's positions ascend (the pushes' were
  // checked by ParseRows, this server's own come sorted from the
  // partitioner), so the parts' words of a range of 2^11 positions are a
  // run in each part: the ranges are taken in order, each summed in an
  // accumulator in cache (a position's first value assigned, later ones
  // added in rank order: bit for bit the n-way merge's sums) and read out
  // in position order from a bitmap of the positions seen. No sort, no
  // scatter. Domains too sparse for it (more ranges x parts than 4 x the
  // words) take a radix sort of the words and one pass that sums runs of
  // equal positions (stable: the same order).
  Workspace& ws = ws_;
  const size_t parts = ws.parts.size();
  size_t total = 0;
  for (const RowsView& part : ws.parts) total += part.values.size();
  ws.words.resize(total);
  ws.part_ends.resize(parts);
  uint64_t* w = ws.words.data();
  for (size_t q = 0; q < parts; ++q) {
    const std::span<const float> values = ws.parts[q].values;
    auto word = [&](size_t i, uint64_t position) {
      uint32_t bits;
      std::memcpy(&bits, &values[i], sizeof(bits));
      *w++ = position << 32 | bits;
    };
    if (static_cast<int>(q) == server) {
      const std::span<const int64_t> own = ws.parts[q].ids;
      for (size_t i = 0; i < values.size(); ++i) word(i, static_cast<uint64_t>(own[i]));
    } else {
      ws.pushed[q].ForEach([&](size_t i, int64_t p) { word(i, static_cast<uint64_t>(p)); });
    }
    ws.part_ends[q] = static_cast<size_t>(w - ws.words.data());
  }
  constexpr int kRangeBits = 11;
  constexpr uint64_t kRange = uint64_t{1} << kRangeBits;
  const uint64_t domain = static_cast<uint64_t>(std::max<int64_t>(domain_size, 1));
  const uint64_t ranges = (domain - 1) / kRange + 1;
  if (ranges * parts > 4 * static_cast<uint64_t>(total)) {
    SortWordsByBits(ws.words, ws.word_scratch, 32, KeyBits(domain_size));
    float* out = LayoutServed(domain_size, 1);
    size_t k = 0;
    for (size_t i = 0; i < total;) {
      const uint64_t p = ws.words[i] >> 32;
      float sum;
      uint32_t bits = static_cast<uint32_t>(ws.words[i]);
      std::memcpy(&sum, &bits, sizeof(sum));
      for (++i; i < total && (ws.words[i] >> 32) == p; ++i) {
        float v;
        bits = static_cast<uint32_t>(ws.words[i]);
        std::memcpy(&v, &bits, sizeof(v));
        sum += v;
      }
      out[k++] = sum;
    }
    return static_cast<int64_t>(ws.served_positions.size());
  }
  ws.served_positions.clear();
  ws.served_sums.clear();
  ws.cursors.resize(parts);
  for (size_t q = 0; q < parts; ++q) ws.cursors[q] = q == 0 ? 0 : ws.part_ends[q - 1];
  float acc[kRange];                // a range's sums, valid where seen
  uint64_t seen[kRange / 64] = {};  // the range's positions seen
  const uint64_t* words = ws.words.data();
  for (uint64_t r = 0; r < ranges; ++r) {
    const uint64_t start = r * kRange;
    for (size_t q = 0; q < parts; ++q) {
      size_t i = ws.cursors[q];
      const size_t end = ws.part_ends[q];
      for (; i < end; ++i) {
        // A position below the range (positions that do not ascend) ends
        // the run too; the check below finds it.
        const uint64_t p = (words[i] >> 32) - start;
        if (p >= kRange) break;
        uint32_t bits = static_cast<uint32_t>(words[i]);
        float v;
        std::memcpy(&v, &bits, sizeof(v));
        const uint64_t bit = uint64_t{1} << (p & 63);
        const bool first = (seen[p >> 6] & bit) == 0;
        seen[p >> 6] |= bit;
        acc[p] = first ? v : acc[p] + v;
      }
      ws.cursors[q] = i;
    }
    for (uint64_t k = 0; k < kRange / 64; ++k) {
      for (uint64_t x = seen[k]; x != 0; x &= x - 1) {
        const uint64_t p = k * 64 + static_cast<uint64_t>(std::countr_zero(x));
        ws.served_positions.push_back(static_cast<int64_t>(start + p));
        ws.served_sums.push_back(acc[p]);
      }
      seen[k] = 0;
    }
  }
  for (size_t q = 0; q < parts; ++q) {
    if (ws.cursors[q] != ws.part_ends[q]) {
      throw FormatError(Where{}, "zen: server ", server, ": the positions rank ", q,
                        " pushed do not ascend (element ", ws.cursors[q], ")");
    }
  }
  float* out = LayoutServedPositions(domain_size, 1);
  std::copy(ws.served_sums.begin(), ws.served_sums.end(), out);
  return static_cast<int64_t>(ws.served_positions.size());
}

template <typename Fn>
size_t ZenScheme::ForEachPulledRow(const HashDomains& domains, int server, const Where& where,
                                   Fn&& fn, bool own_sole_rows) {
  const size_t j = static_cast<size_t>(server);
  const uint64_t start = static_cast<uint64_t>(domains.start(server));
  const RowOwner& owner = domains.owner();
  // The rows' ids are computed in batches (the permutation's batched
  // inverse): one scalar inverse per row, with its cycle walks, cost more
  // than copying a narrow row (width 4, rows 3M: a quarter of zen's CPU).
  constexpr size_t kBatch = 512;
  uint64_t ids[kBatch];
  const float* rows[kBatch];
  size_t n = 0;  // rows in the batch
  auto flush = [&] {
    owner.IdsOfKeysInPlace(std::span(ids, n), 0);
    for (size_t k = 0; k < n; ++k) fn(static_cast<int64_t>(ids[k]), rows[k]);
    n = 0;
  };
  // A grouped pull's rows come from several messages (each checked
  // strictly ascending) and this rank's partition: each position is marked,
  // and one seen before is an error. A plain message needs no marks.
  const bool grouped = ws_.pulled_own_sole[j] != 0 || !ws_.pulled_groups[j].empty();
  std::vector<uint64_t>& seen = ws_.seen_positions;
  if (grouped) seen.assign(static_cast<size_t>(domains.size(server) + 63) / 64, 0);
  auto mark = [&](int64_t p) {
    uint64_t& word = seen[static_cast<uint64_t>(p) >> 6];
    const uint64_t bit = uint64_t{1} << (p & 63);
    if ((word & bit) != 0) {
      throw FormatError(where, "zen: row ", domains.IdAt(server, p),
                        " is twice in the grouped pull of server ", server,
                        " (a malformed pull: a shared row also sent as a sole row, a sole row "
                        "twice, or a row this rank sent among another rank's sole rows)");
    }
    word |= bit;
  };
  auto add = [&](const RowsMessage& m, size_t i, int64_t p) {
    if (grouped) mark(p);
    ids[n] = start + static_cast<uint64_t>(p);
    rows[n++] = m.row(i);
    if (n == kBatch) flush();
  };
  const RowsMessage& shared = ws_.pulled[j];
  size_t sole = 0;  // this rank's sole rows
  if (ws_.pulled_own_sole[j] != 0) {
    // This rank's sole rows, left out of the pull: the positions it pushed
    // here that are not shared (both ascending), its own ids and values.
    const Partitions& mine = ws_.mine;
    const std::span<const int64_t> pushed = mine.positions_of(server);
    const int64_t* own_ids = mine.ids.data() + mine.offsets[j];
    const float* own = mine.values_of(server).data();
    const size_t w = static_cast<size_t>(shared.width);
    auto own_row = [&](size_t o) {
      mark(pushed[o]);
      ++sole;
      if (own_sole_rows) fn(own_ids[o], own + o * w);
    };
    size_t o = 0;
    shared.ForEach([&](size_t i, int64_t p) {
      for (; o < pushed.size() && pushed[o] < p; ++o) own_row(o);
      if (o < pushed.size() && pushed[o] == p) ++o;
      add(shared, i, p);
    });
    for (; o < pushed.size(); ++o) own_row(o);
  } else {
    shared.ForEach([&](size_t i, int64_t p) { add(shared, i, p); });
  }
  for (const RowsMessage& g : ws_.pulled_groups[j]) {
    g.ForEach([&](size_t i, int64_t p) { add(g, i, p); });
  }
  if (n > 0) flush();
  return sole;
}

std::optional<HashDomains> ZenScheme::SparseExchange(Communicator& comm,
                                                     const SparseTensor& local,
                                                     std::span<float> zero, OnPulled on_pulled) {
  sum_order_.clear();  // dense calls only
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
  sparse_partitioner_->PartitionSparse(local.ids(), local.values(), local.width(), domains.owner(),
                                       ws_.mine);
  stats_.partition_seconds = Since(t0);
  t0 = Clock::now();
  std::fill(zero.begin(), zero.end(), 0.0f);
  stats_.decode_seconds = Since(t0);
  // Element-sparse rows are read by ElementWords, which checks the
  // positions as it decodes them (no decoding pass of ParseRows' own).
  Exchange(comm, domains, local.width(), where, on_pulled,
           ElementPath(local) ? PositionCheck::kByReader : PositionCheck::kNow);
  return domains;
}

std::span<uint64_t> ZenScheme::ElementWords(const HashDomains& domains, int server,
                                            const Where& where, size_t at) {
  const RowsMessage& m = ws_.pulled[static_cast<size_t>(server)];
  const size_t count = static_cast<size_t>(m.count);
  // Grown only, never shrunk: a steady state neither allocates nor zeroes.
  if (ws_.result_words.size() < at + count) ws_.result_words.resize(at + count);
  uint64_t* out = ws_.result_words.data() + at;
  // The positions are checked on the way (ParseRows left them to this
  // reader); a bad one raises before the words are used.
  const uint64_t start = static_cast<uint64_t>(domains.start(server));
  const float* v = m.row(0);
  // Keys first (the lambda holds copies: its stores cannot alias them; a
  // branch-light pass over the index), then the ids.
  m.ForEachChecked(domains.size(server), server, where, [out, v, start](size_t i, int64_t p) {
    uint32_t bits;
    std::memcpy(&bits, v + i, sizeof(bits));
    out[i] = (start + static_cast<uint64_t>(p)) << 32 | bits;
  });
  const std::span<uint64_t> words(out, count);
  const RowOwner& owner = domains.owner();
  if (const int b = owner.block_bits(); b > 0) {
    // The keys' runs, in a pass over the words in cache (the positions
    // ascend, so a block's keys are one run), then each run's block of ids
    // (batched); the words keep their keys.
    const size_t first_run = ws_.runs.size();
    const int shift = 32 + b;
    uint64_t last = ~uint64_t{0};
    for (size_t i = 0; i < count; ++i) {
      const uint64_t block = out[i] >> shift;
      if (block == last) continue;
      last = block;
      ws_.runs.push_back(block << 32 | ws_.run_starts.size());
      ws_.run_starts.push_back(at + i);
    }
    owner.IdBlocksOfKeyBlocksInPlace(std::span(ws_.runs).subspan(first_run), 32);
    return words;
  }
  // The inverse permutation, batched (RowPermutation::InverseInPlace).
  owner.IdsOfKeysInPlace(words, 32);
  return words;
}

SparseTensor ZenScheme::DoSync(Communicator& comm, const SparseTensor& local) {
  // The servers' partitions are disjoint: each pulled message's rows are
  // collected as it arrives (for element-sparse tensors, width 1, one word
  // per row: the id above the value's bits; for wider rows the row's id and
  // where it lies), then the union is ordered by id (radix sort) and ids and
  // values are written once.
  const size_t w = static_cast<size_t>(local.width());
  const bool element = ElementPath(local);
  const Where where{comm.rank(), local.name()};
  // Wider rows below 2^32: one word per row too, the id above the row's
  // index (half the bytes of a KeyItem to sort).
  const bool packed = !element && local.rows() <= (int64_t{1} << 32);
  // (The element path writes each message's words at the start of
  // ws_.result_words, never zeroed: see ElementWords.)
  if (!element) ws_.result_words.clear();
  ws_.order.clear();
  ws_.rows.clear();
  // Element path: each message's words go to the result's sort as soon as
  // they are made.
  if (element) ws_.result_sort.Reset(32, KeyBits(local.rows()), static_cast<size_t>(comm.size()));
  // Element path with blocks (RowOwner::Permuted's block_bits > 0): each
  // message's words are kept where they are made, as runs of one block
  // each (a block's ids ascend within the message that holds it, and no
  // other message holds any of them); the runs are sorted by block after
  // the last message.
  int block_bits = 0;
  size_t filled = 0;
  ws_.runs.clear();
  ws_.run_starts.clear();
  const std::optional<HashDomains> exchanged =
      SparseExchange(comm, local, {}, [&](const HashDomains& domains, int j) {
    if (element) {
      block_bits = domains.owner().block_bits();
      if (block_bits > 0) {
        filled += ElementWords(domains, j, where, filled).size();
        return;
      }
      // The sort buckets the words by their ids' high bits while they are
      // in cache, and while later messages still travel.
      ws_.result_sort.Add(ElementWords(domains, j, where));
      return;
    }
    ForEachPulledRow(domains, j, where, [&](int64_t id, const float* row) {
      if (packed) {
        ws_.result_words.push_back(static_cast<uint64_t>(id) << 32 | ws_.rows.size());
      } else {
        ws_.order.push_back({id, static_cast<int64_t>(ws_.rows.size())});
      }
      ws_.rows.push_back(row);
    });
  });
  if (!exchanged) return local;
  auto t0 = Clock::now();
  std::vector<int64_t> ids;
  std::vector<float> values;
  if (element && block_bits > 0) {
    // The runs in block order (one word each: the block of ids above the
    // run's ordinal), then each run's words (keys) into the result in turn,
    // the id its block's base and the key's offset: ids and values written
    // once, in order.
    ws_.run_starts.push_back(filled);
    SortWordsByBits(ws_.runs, ws_.word_scratch, 32, KeyBits((local.rows() >> block_bits) + 1));
    ids.resize(filled);
    values.resize(filled);
    int64_t* id = ids.data();
    float* value = values.data();
    const uint64_t* words = ws_.result_words.data();
    const size_t* starts = ws_.run_starts.data();
    const size_t runs = ws_.runs.size();
    const uint64_t mask = (uint64_t{1} << block_bits) - 1;
    constexpr size_t kAhead = 8;  // the runs lie at random in result_words
    for (size_t r = 0; r < runs; ++r) {
      if (r + kAhead < runs) {
        __builtin_prefetch(words + starts[static_cast<uint32_t>(ws_.runs[r + kAhead])]);
      }
      const size_t k = static_cast<uint32_t>(ws_.runs[r]);
      const uint64_t base = ws_.runs[r] >> 32 << block_bits;
      for (size_t i = starts[k]; i < starts[k + 1]; ++i) {
        const uint64_t x = words[i];
        *id++ = static_cast<int64_t>(base | ((x >> 32) & mask));
        const uint32_t bits = static_cast<uint32_t>(x);
        std::memcpy(value++, &bits, sizeof(bits));
      }
    }
  } else if (element) {
    // Sorting the words orders the values too; the sort hands each word to
    // its place in the result as it ranks each bucket (no unpacking pass).
    ids.resize(ws_.result_sort.size());
    values.resize(ws_.result_sort.size());
    int64_t* id = ids.data();
    float* value = values.data();
    ws_.result_sort.Sort(ws_.word_scratch, [&](size_t i, uint64_t x) {
      id[i] = static_cast<int64_t>(x >> 32);
      const uint32_t bits = static_cast<uint32_t>(x);
      std::memcpy(value + i, &bits, sizeof(bits));
    });
  } else {
    // The row's index is the payload: each row is copied once, in id order.
    // id_at(i) / row_at(i): the i-th row of the sorted order.
    auto gather = [&](size_t total, auto id_at, auto row_at) {
      ids.reserve(total);
      if (w <= 16) {
        // Narrow rows: a zeroing pass over the values is cheaper than an
        // append (a memcpy call) per row; the rows are read in id order,
        // i.e. at random in the receive buffers, so each is prefetched a
        // few rows ahead (wide rows too, below: their first bytes).
        values.resize(total * w);
        float* dst = values.data();
        constexpr size_t kAhead = 16;
        for (size_t i = 0; i < total; ++i, dst += w) {
          if (i + kAhead < total) __builtin_prefetch(row_at(i + kAhead));
          ids.push_back(id_at(i));
          CopyRow(dst, row_at(i), local.width());
        }
      } else {
        // Appended into storage reserved without a zeroing pass.
        values.reserve(total * w);  // <= rows x width: checked when the call was validated
        // The row kAhead rows ahead (rows lie at random places): a row of
        // up to four cache lines (64 floats) is prefetched whole (the
        // larger workload, 2026-12-06: its decode phase 5-27% shorter than
        // with its first line alone, docs/performance.md), a wider one by
        // its first line (the hardware's stream prefetch takes the rest).
        constexpr size_t kAhead = 4;
        const size_t row_bytes = w * sizeof(float) <= 256 ? w * sizeof(float) : 1;
        for (size_t i = 0; i < total; ++i) {
          if (i + kAhead < total) {
            const char* ahead = reinterpret_cast<const char*>(row_at(i + kAhead));
            for (size_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(ahead + b);
          }
          ids.push_back(id_at(i));
          const float* row = row_at(i);
          values.insert(values.end(), row, row + w);
        }
      }
    };
    if (packed) {
      SortWordsByBits(ws_.result_words, ws_.word_scratch, 32, KeyBits(local.rows()));
      const uint64_t* words = ws_.result_words.data();
      gather(
          ws_.result_words.size(), [&](size_t i) { return static_cast<int64_t>(words[i] >> 32); },
          [&](size_t i) { return ws_.rows[static_cast<uint32_t>(words[i])]; });
    } else {
      SortByKey(ws_.order, ws_.sort_scratch, local.rows());
      const KeyItem* order = ws_.order.data();
      gather(
          ws_.order.size(), [&](size_t i) { return order[i].key; },
          [&](size_t i) { return ws_.rows[static_cast<size_t>(order[i].item)]; });
    }
  }
  stats_.decode_seconds += Since(t0);
  stats_.result_rows = static_cast<int64_t>(ids.size());
  // Sorted, and unique by construction: the servers' domains are disjoint,
  // each message's positions were checked strictly ascending (by ParseRows
  // or as they were read), and a grouped pull's messages disjoint
  // (ForEachPulledRow).
  return SparseTensor::FromSortedUnchecked(local.rows(), local.width(), std::move(ids),
                                           std::move(values), local.name());
}

void ZenScheme::DoSyncInto(Communicator& comm, const SparseTensor& local, std::span<float> out,
                           float divisor) {
  // The output is zeroed while the partition is done and before the
  // exchange, where it overlaps the wait for the slowest peer; each pulled
  // message is written into it as soon as it arrives (the servers'
  // partitions are disjoint, so the order does not matter).
  const bool scaled = divisor != 1.0f;
  const bool element = ElementPath(local);
  const Where where{comm.rank(), local.name()};
  const size_t w = static_cast<size_t>(local.width());
  const std::optional<HashDomains> exchanged =
      SparseExchange(comm, local, out, [&](const HashDomains& domains, int j) {
    if (element && domains.owner().block_bits() > 0) {
      // Each run's block of ids, then its values written in order (a run's
      // targets are adjacent).
      const int b = domains.owner().block_bits();
      const uint64_t mask = (uint64_t{1} << b) - 1;
      ws_.runs.clear();
      ws_.run_starts.clear();
      const std::span<const uint64_t> words = ElementWords(domains, j, where);
      ws_.run_starts.push_back(words.size());
      for (size_t r = 0; r < ws_.runs.size(); ++r) {
        float* dst = out.data() + (ws_.runs[r] >> 32 << b);
        for (size_t i = ws_.run_starts[r]; i < ws_.run_starts[r + 1]; ++i) {
          const uint64_t x = words[i];
          const uint32_t bits = static_cast<uint32_t>(x);
          float v;
          std::memcpy(&v, &bits, sizeof(v));
          dst[(x >> 32) & mask] = scaled ? v / divisor : v;
        }
      }
      stats_.result_rows += ws_.pulled[static_cast<size_t>(j)].count;
      return;
    }
    if (element) {
      float* dst = out.data();
      for (const uint64_t x : ElementWords(domains, j, where)) {
        const uint32_t bits = static_cast<uint32_t>(x);
        float v;
        std::memcpy(&v, &bits, sizeof(v));
        dst[x >> 32] = scaled ? v / divisor : v;
      }
      stats_.result_rows += ws_.pulled[static_cast<size_t>(j)].count;
      return;
    }
    ForEachPulledRow(domains, j, where, [&](int64_t id, const float* row) {
      float* dst = out.data() + static_cast<size_t>(id) * w;
      if (scaled) {
        for (size_t k = 0; k < w; ++k) dst[k] = row[k] / divisor;
      } else {
        CopyRow(dst, row, local.width());
      }
      ++stats_.result_rows;
    });
  });
  if (!exchanged) WriteInto(local, out, divisor);
}

void ZenScheme::DoSyncDense(Communicator& comm, std::span<float> buffer, int64_t rows,
                            int64_t width, std::string_view tensor) {
  struct ClearOrder {
    std::vector<std::pair<int64_t, int>>& order;
    ~ClearOrder() { order.clear(); }
  } clear_order{sum_order_};
  stats_ = ZenStats{};
  stats_.world = comm.size();
  stats_.rows = rows;
  stats_.width = width;
  stats_.dense_path = true;
  const Where where{comm.rank(), tensor};
  if (comm.size() == 1) {
    auto t0 = Clock::now();
    dense_partitioner_->PartitionDense(buffer, rows, width, RowOwner::Range(rows, 1), ws_.mine);
    stats_.partition_seconds = Since(t0);
    stats_.local_rows = stats_.result_rows = ws_.mine.total();
    return;  // the buffer already holds the sum
  }
  const HashDomains domains = Prepare(comm, rows, width, where);
  auto t0 = Clock::now();
  dense_partitioner_->PartitionDense(buffer, rows, width, domains.owner(), ws_.mine);
  stats_.partition_seconds = Since(t0);
  stats_.local_rows = ws_.mine.total();

  // Every locally non-zero row is in the union, so writing the union's rows
  // overwrites all of them; rows outside the union are zero already. Each
  // pulled message is written as it arrives: the pushes were encoded and
  // this server's part aggregated before the pull round, so nothing reads
  // the buffer's old rows any more.
  // (A grouped pull's rows that only this rank contributed are its own,
  // in the buffer already: not rewritten.)
  Exchange(comm, domains, width, where, [&](const HashDomains&, int j) {
    stats_.result_rows += static_cast<int64_t>(ForEachPulledRow(
        domains, j, where,
        [&](int64_t id, const float* row) {
          CopyRow(buffer.data() + static_cast<size_t>(id) * static_cast<size_t>(width), row,
                  width);
          ++stats_.result_rows;
        },
        // (rewritten with half-width values: rounded as the others get them)
        /*own_sole_rows=*/options_.wire_values != WireValues::kFloat32));
  });
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
  return info;
}

}  // namespace zen

// ---- Cost (registry.h): bytes per rank and rounds of one zen call ----
#include <algorithm>
#include <cmath>

namespace zen {

namespace {

// Elias-Fano's index bytes for `count` rows of a domain of `domain`
// positions (hash_bitmap.h): L = floor(log2(domain / count)) low bits per
// row, count + domain / 2^L + 1 high bits.
double EliasFanoIndexBytes(double domain, double count) {
  if (count < 1) return 8;
  const double l = std::floor(std::log2(std::max(1.0, domain / count)));
  return (count * (l + 1) + std::floor(domain / std::exp2(l)) + 1) / 8;
}

}  // namespace

// Push COO of the rows h0 maps to each server (balanced: nnz / n per
// server; element-sparse rows, width 1, with the smallest index: 4-byte
// positions, COO32, Elias-Fano or the bitmap), pull each server's summed share U / n
// as values plus the smallest index: a hash bitmap over its domain (|D_s| ~
// rows / n bits, in uint64 words), COO positions (4 bytes each in domains
// of at most 2^32 positions, else 8) or Elias-Fano. One AllToAllV and one
// AllGatherV.
CostVolumes ZenCost(const CostInputs& in) {
  CostVolumes v = NewVolumes(in);
  if (in.n == 1) return v;
  const double share = in.Union(in.n) / in.n;
  const double domain = static_cast<double>(in.rows) / in.n;
  const bool coo32 = domain <= static_cast<double>(kMaxCoo32Domain);
  const double bitmap = std::ceil(domain / 64) * 8;
  const double ids =
      std::min({bitmap, share * (coo32 ? 4 : 8), EliasFanoIndexBytes(domain, share)});
  const double pushed = in.nnz / in.n;  // to each server
  const double push_row =
      in.width == 1 && coo32
          ? in.vals + std::min({4.0, EliasFanoIndexBytes(domain, pushed) / std::max(1.0, pushed),
                                bitmap / std::max(1.0, pushed)})
          : in.row;
  const double push = (in.n - 1) * in.nnz / in.n * push_row;
  double pull = (in.n - 1) * (ids + share * in.vals);
  if (in.width > 1) {
    // Wide rows: the grouped pull (where it pays, as GroupsPay) leaves out
    // each rank's sole rows, about Union(n) - Union(n-1) (what the last
    // rank adds to the union), (n-1)/n of them in other servers' domains,
    // and adds n - 1 headers and their padding to each peer's window.
    const double sole = std::max(0.0, in.Union(in.n) - in.Union(in.n - 1));
    if (sole / in.n * in.vals > in.n * (kRowHeaderBytes + 8.0)) {
      pull -= sole * (in.n - 1) / in.n * in.vals;
      pull += (in.n - 1.0) * (in.n - 1.0) * (kRowHeaderBytes + 4.0);
    }
  }
  for (int r = 0; r < in.n; ++r) {
    v.recv[static_cast<size_t>(r)] += push + pull;
    v.sent[static_cast<size_t>(r)] += push + pull;
  }
  v.rounds += 2;
  return v;
}

}  // namespace zen
