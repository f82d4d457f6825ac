// zen/schemes/zen/pull.cc — phase 4, pull: this server's sums to every
// rank (plain or grouped, see zen.h), and each server's pull read in place.
#include "zen/schemes/zen/zen.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "zen/comm/collectives.h"
#include "zen/core/error.h"
#include "zen/core/half.h"
#include "zen/schemes/zen/internal.h"

namespace zen {

using zen_internal::Clock;
using zen_internal::Since;
using zen_internal::SlotClass;
using zen_internal::ClassSlot;
using zen_internal::CheckNotFailed;

void ZenScheme::Pull(Communicator& comm, const HashDomains& domains, int64_t width,
                     const Where& where, OnPulled on_pulled, PositionCheck pulled_positions,
                     int64_t served, Rounds& rounds) {
  // This server's sum to everyone, hash bitmap or COO. Each peer's message
  // is parsed and handed to on_pulled (which decodes it into the output) as
  // soon as it is complete, while the later ones travel.
  const int n = comm.size();
  const int r = comm.rank();
  const size_t un = static_cast<size_t>(n);
  Workspace& ws = ws_;
  const bool grouped = !ws.group_starts.empty();
  auto t0 = Clock::now();
  double handed_on = 0;  // seconds spent parsing and in on_pulled
  stats_.pull_encoding = ws.pull_layout.encoding;
  if (!grouped) NarrowRowsValues(ws.pull_send, 0, call_.values);  // grouped: done
  stats_.pull_rows_sent =
      served * (n - 1) - (grouped ? static_cast<int64_t>(ws.left_out_rows) : 0);
  // Half-width values: a receiver's own sole rows, left out of a grouped
  // pull, must be what the others receive: its values rounded to the
  // wire's format and back (the pushes are encoded already, and this
  // server's own part is summed).
  if (rounds.windows && call_.values != WireValues::kFloat32) RoundPushedValues(r, width);
  ws.pulled.resize(un);
  ws.pulled_groups.resize(un);
  for (std::vector<RowsMessage>& g : ws.pulled_groups) g.clear();
  ws.pulled_own_sole.assign(un, 0);
  auto on_message = [&](int j) {
    const auto t = Clock::now();
    const RowsMessage m =
        rounds.windows ? ReadPeerWindow(j, domains.size(j), width, where, r)
                       : ReadPeerMessage(ws.pull_recv[static_cast<size_t>(j)], "pull", j,
                                         domains.size(j), j, width, where, pulled_positions);
    ws.pulled[static_cast<size_t>(j)] = m;
    (m.encoding == RowEncoding::kHashBitmap   ? stats_.pull_bitmap_messages
     : m.encoding == RowEncoding::kEliasFano ? stats_.pull_elias_fano_messages
                                             : stats_.pull_coo_messages)++;
    on_pulled(domains, j);
    handed_on += Since(t);
  };
  rounds.pull_sent = true;
  if (rounds.windows) {
    const std::span<const std::byte> all(ws.pull_send);
    FinishAllToAllVSpansEach(
        comm, rounds.pull_tag,
        [&](int d) {
          if (!grouped) return all;
          const size_t q = static_cast<size_t>(d);
          return all.subspan(ws.windows[2 * q], ws.windows[2 * q + 1] - ws.windows[2 * q]);
        },
        ws.pull_requests, on_message);
  } else {
    FinishAllGatherVEach(comm, rounds.pull_tag, ws.pull_send, ws.pull_requests, on_message);
  }
  stats_.pull_seconds = Since(t0) - handed_on;
  stats_.decode_seconds += handed_on;

  t0 = Clock::now();
  ReadOwnPull(domains, r, width, where, pulled_positions);
  on_pulled(domains, r);
  stats_.decode_seconds += Since(t0);
}

void ZenScheme::ReadOwnPull(const HashDomains& domains, int server, int64_t width,
                            const Where& where, PositionCheck pulled_positions) {
  // Every rank, this server included, uses the rounded sums it sent (the
  // sends are complete: its message may be widened in place).
  Workspace& ws = ws_;
  const size_t r = static_cast<size_t>(server);
  const int64_t domain_size = domains.size(server);
  ws.pulled_groups[r].clear();
  if (ws.group_starts.empty()) {
    WidenRowsValues(ws.pull_send, domain_size, width, call_.values, server, where);
    ws.pulled[r] = ParseRows(ws.pull_send, domain_size, server, width, where, pulled_positions,
                             ValueBytes());
    return;
  }
  // All of its first copy: every rank's sole rows (this server's own among
  // them), then the shared rows.
  WidenRowsSequence(ws.pull_send, ws.pull_send.size(), domain_size, width, call_.values, server,
                    where, ws.widen_scratch);
  size_t at = 0;
  for (size_t q = 0; q < ws.pulled.size(); ++q) {
    ws.pulled_groups[r].push_back(ParseRowsAt(ws.pull_send, at, domain_size, server, width, where,
                                              PositionCheck::kNow, ValueBytes()));
  }
  ws.pulled[r] = ParseRowsAt(ws.pull_send, at, domain_size, server, width, where,
                             PositionCheck::kNow, ValueBytes());
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
  WidenRowsSequence(window, window.size(), domain_size, width, call_.values, server,
                    where, ws_.widen_scratch);
  size_t at = 0;
  const size_t value_bytes = ValueBytes();
  const RowsMessage first = ParseRowsAt(window, at, domain_size, server, width, where,
                                        PositionCheck::kNow, value_bytes);
  if (at == window.size()) return first;
  const size_t n = ws_.pulled.size();
  const size_t shared_at = n - 1 - static_cast<size_t>(receiver);
  RowsMessage shared = first;
  if (shared_at != 0) got.push_back(first);
  for (size_t k = 1; k < n; ++k) {
    const RowsMessage m = ParseRowsAt(window, at, domain_size, server, width, where,
                                      PositionCheck::kNow, value_bytes);
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
  const WireValues v = call_.values;
  const size_t w = static_cast<size_t>(width);
  Partitions& mine = ws.mine.Of<float>();  // half-width wire values are float32's
  const int n = static_cast<int>(mine.offsets.size()) - 1;
  for (int j = 0; j < n; ++j) {
    if (j == server) continue;
    const auto first = static_cast<size_t>(mine.offsets[static_cast<size_t>(j)]);
    float* x = mine.values.data() + first * w;
    const size_t count = static_cast<size_t>(mine.count(j)) * w;
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
  const WireValues v = call_.values;
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

}  // namespace zen
