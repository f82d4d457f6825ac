// zen/engine/exchange_job.h — byte exchanges on a Context's communicator and
// progress thread, for collectives whose encoding lives with the caller:
// zen.fsdp's sparse reduce-scatter (python/zen/fsdp.py, transport "zen")
// agrees its counts with GatherRecords, then moves each owner's encoded
// chunk with ExchangeBytes. Both read and write the caller's buffers in
// place (no copy) and run in the context's Start()/Submit() order, so they
// interleave with DDP batches on the same context as every rank sees them.
//
// GatherRecords: every rank contributes one record of the same size; the
// table holds them indexed by rank. A record's first 8 bytes are the call's
// identity (zen.fsdp's magic word): a rank whose record starts otherwise is
// in another call, which marks the communicator out of step and raises
// MismatchError on every rank that sees it. The rest is compared by the
// caller (sizes, dtype, op: zen.fsdp raises on every rank from the table).
//
// ExchangeBytes: an all-to-all of byte segments whose sizes every rank
// already agreed (from the gathered records): segment p of `send` (at the
// sum of send_sizes[0..p)) goes to rank p, and what rank p sends lands in
// segment p of `recv`. The rank's own segments are not moved. Every pair
// exchanges one message, an empty one too, so sizes that differ between a
// sender and its receiver fail (FormatError or TransportError) instead of
// leaving a message behind.
//
// Errors: InvalidArgument for buffers that do not fit their sizes (raised
// on the caller's thread, before anything is queued); MismatchError for a
// communicator out of step; TransportError when a peer fails or the
// communicator's timeout passes.
//
// Usage:
//   zen::Context ctx(comm);
//   std::vector<int64_t> mine = {magic, n_in, ...}, table(mine.size() * world);
//   zen::StartGatherRecords(ctx, "zen.fsdp", zen::AsBytes(mine),
//                           std::as_writable_bytes(std::span(table))).Wait();
//   // ... plan and encode from the table ...
//   zen::Handle h = zen::StartExchangeBytes(ctx, "zen.fsdp", send, send_sizes,
//                                           recv, recv_sizes);
//   ...                                  // compute goes on
//   h.Wait();                            // recv holds every peer's segment
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "zen/comm/communicator.h"
#include "zen/engine/context.h"

namespace zen {

// The exchanges themselves, on the calling thread (what the jobs run).
void GatherRecords(Communicator& comm, std::string_view name, std::span<const std::byte> mine,
                   std::span<std::byte> table);
void ExchangeBytes(Communicator& comm, std::string_view name, std::span<const std::byte> send,
                   std::span<const int64_t> send_sizes, std::span<std::byte> recv,
                   std::span<const int64_t> recv_sizes);

// The same, queued on the context's progress thread. The buffers must stay
// alive and untouched until the handle completes; the sizes are copied.
Handle StartGatherRecords(Context& ctx, std::string name, std::span<const std::byte> mine,
                          std::span<std::byte> table,
                          std::function<void(std::exception_ptr)> on_done = {});
Handle StartExchangeBytes(Context& ctx, std::string name, std::span<const std::byte> send,
                          std::vector<int64_t> send_sizes, std::span<std::byte> recv,
                          std::vector<int64_t> recv_sizes,
                          std::function<void(std::exception_ptr)> on_done = {});

}  // namespace zen
