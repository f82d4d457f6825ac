// zen/schemes/zen/push.cc — phase 2, push: this rank's rows to the servers
// that own them, and each peer's push read in place.
#include "zen/schemes/zen/zen.h"

#include "zen/comm/collectives.h"
#include "zen/core/error.h"
#include "zen/schemes/zen/internal.h"

namespace zen {

using zen_internal::CheckNotFailed;

template <typename T>
void ZenScheme::Push(Communicator& comm, const HashDomains& domains, int64_t width,
                     const Where& where, Rounds& rounds) {
  const int n = comm.size();
  const int r = comm.rank();
  Workspace& ws = ws_;
  const PartitionsOf<T>& mine = ws.mine.Of<T>();
  // Domain positions, one message per other server, encoded straight into
  // the persistent send buffers: COO, or for element-sparse rows the
  // smallest index (COO32, Elias-Fano or the bitmap: the index is half of
  // such a message).
  // The values move as bytes (the partition holds the tensor's values).
  ws.push_send.resize(static_cast<size_t>(n));
  const size_t value_bytes = ValueBytes();
  for (int j = 0; j < n; ++j) {
    if (j == r) continue;
    EncodeRowsAt(domains.size(j), width, mine.positions_of(j), std::as_bytes(mine.values_of(j)),
                 value_bytes,
                 CompactPush(width, domains.size(j)) ? EncodingChoice::kAuto : EncodingChoice::kCoo,
                 ws.push_send[static_cast<size_t>(j)], 0);
    NarrowRowsValues(ws.push_send[static_cast<size_t>(j)], 0, call_.values);
    stats_.pushed_rows += mine.count(j);
  }
  rounds.push_sent = true;  // FinishAllToAllVEach posts every send before it waits
  // Each peer's push is checked and parsed as soon as it is complete,
  // while the later ones travel.
  const bool compact = CompactPush(width, domains.size(r));
  ws.pushed.resize(static_cast<size_t>(n));
  FinishAllToAllVEach(comm, rounds.push_tag, ws.push_send, ws.push_requests, [&](int i) {
    const RowsMessage m = ReadPeerMessage(ws.push_recv[static_cast<size_t>(i)], "push", i,
                                          domains.size(r), r, width, where);
    if ((m.encoding == RowEncoding::kCoo) == compact) {
      throw FormatError(where, "zen: push message from rank ", i, " is ",
                        compact ? "COO, expected a compact index (COO32, Elias-Fano, bitmap)"
                                : "not COO");
    }
    ws.pushed[static_cast<size_t>(i)] = m;
  });
}

#define ZEN_INSTANTIATE(T, ...)                                                              \
  template void ZenScheme::Push<T>(Communicator&, const HashDomains&, int64_t, const Where&, \
                                   Rounds&);
ZEN_FOR_EACH_VALUE_TYPE(ZEN_INSTANTIATE)
#undef ZEN_INSTANTIATE

RowsMessage ZenScheme::ReadPeerMessage(ByteBuffer& message, const char* round, int peer,
                                       int64_t domain_size, int server, int64_t width,
                                       const Where& where, PositionCheck positions) const {
  CheckNotFailed(message, round, peer, where);
  WidenRowsValues(message, domain_size, width, call_.values, peer, where);
  return ParseRows(message, domain_size, server, width, where, positions, ValueBytes());
}

}  // namespace zen
