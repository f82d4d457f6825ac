#include "zen/engine/exchange_job.h"

#include <cstring>
#include <memory>
#include <utility>

#include "zen/comm/peer_pattern.h"
#include "zen/core/checked.h"
#include "zen/core/error.h"

namespace zen {
namespace {

constexpr size_t kIdentityBytes = 8;

void CheckInStep(const Communicator& comm, std::string_view name) {
  if (!comm.out_of_step().empty()) {
    throw MismatchError(Where{comm.rank(), name}, "the ranks are out of step since an earlier call (",
                        comm.out_of_step(),
                        "); this communicator cannot pair calls any more: build a new one");
  }
}

void CheckGather(int rank, int world, std::string_view name, std::span<const std::byte> mine,
                 std::span<const std::byte> table) {
  const Where where{rank, name};
  if (mine.size() < kIdentityBytes) {
    throw InvalidArgument(where, "a record has ", mine.size(),
                          " bytes, at least 8 (its identity word) are needed");
  }
  size_t want = 0;
  if (!TryMul(mine.size(), static_cast<size_t>(world), want) || table.size() != want) {
    throw InvalidArgument(where, "the table has ", table.size(), " bytes, expected world size ",
                          world, " x record ", mine.size());
  }
}

// Where each rank's segment starts: offsets[p] = sizes[0] + ... + sizes[p - 1].
std::vector<size_t> Offsets(int rank, std::string_view name, const char* what,
                            std::span<const int64_t> sizes, size_t buffer, int world) {
  const Where where{rank, name};
  if (sizes.size() != static_cast<size_t>(world)) {
    throw InvalidArgument(where, what, " sizes have ", sizes.size(),
                          " entries, expected one per rank (", world, ")");
  }
  std::vector<size_t> offsets(sizes.size());
  int64_t total = 0;
  for (size_t p = 0; p < sizes.size(); ++p) {
    offsets[p] = static_cast<size_t>(total);
    if (sizes[p] < 0 || !TryAdd(total, sizes[p], total)) {
      throw InvalidArgument(where, what, " size for rank ", p, " is ", sizes[p],
                            ": negative, or the sizes overflow int64");
    }
  }
  if (static_cast<uint64_t>(total) > buffer) {
    throw InvalidArgument(where, what, " sizes add up to ", total, " bytes, the buffer has ",
                          buffer);
  }
  return offsets;
}

void WaitAll(std::vector<std::unique_ptr<Request>>& requests) {
  for (auto& r : requests) r->Wait();
}

void DoGather(Communicator& comm, std::string_view name, std::span<const std::byte> mine,
              std::span<std::byte> table) {
  CheckInStep(comm, name);
  const int n = comm.size();
  const int r = comm.rank();
  const size_t m = mine.size();
  std::memcpy(table.data() + static_cast<size_t>(r) * m, mine.data(), m);
  if (n == 1) return;
  const Tag tag = comm.NextTag();
  std::vector<std::unique_ptr<Request>> requests;
  requests.reserve(2 * static_cast<size_t>(n - 1));
  for (int s = 1; s < n; ++s) {
    const int from = AllToAllRecvPeer(r, n, s);
    requests.push_back(comm.Recv(from, tag, table.subspan(static_cast<size_t>(from) * m, m)));
  }
  for (int s = 1; s < n; ++s) requests.push_back(comm.Send(AllToAllSendPeer(r, n, s), tag, mine));
  WaitAll(requests);
  for (int p = 0; p < n; ++p) {
    const std::byte* theirs = table.data() + static_cast<size_t>(p) * m;
    if (std::memcmp(theirs, mine.data(), kIdentityBytes) == 0) continue;
    uint64_t a = 0, b = 0;
    std::memcpy(&a, theirs, kIdentityBytes);
    std::memcpy(&b, mine.data(), kIdentityBytes);
    const std::string why =
        detail::Concat("rank ", p, " was in another call (its record starts with ", a,
                       ", this rank's with ", b, ")");
    comm.MarkOutOfStep(why);
    throw MismatchError(Where{r, name}, "ranks disagree on the call: ", why);
  }
}

void DoExchange(Communicator& comm, std::string_view name, std::span<const std::byte> send,
                std::span<const int64_t> send_sizes, std::span<const size_t> send_offsets,
                std::span<std::byte> recv, std::span<const int64_t> recv_sizes,
                std::span<const size_t> recv_offsets) {
  CheckInStep(comm, name);
  const int n = comm.size();
  const int r = comm.rank();
  if (n == 1) return;
  const Tag tag = comm.NextTag();
  std::vector<std::unique_ptr<Request>> requests;
  requests.reserve(2 * static_cast<size_t>(n - 1));
  for (int s = 1; s < n; ++s) {
    const auto from = static_cast<size_t>(AllToAllRecvPeer(r, n, s));
    requests.push_back(comm.Recv(static_cast<int>(from), tag,
                                 recv.subspan(recv_offsets[from],
                                              static_cast<size_t>(recv_sizes[from]))));
  }
  for (int s = 1; s < n; ++s) {
    const auto to = static_cast<size_t>(AllToAllSendPeer(r, n, s));
    requests.push_back(comm.Send(static_cast<int>(to), tag,
                                 send.subspan(send_offsets[to], static_cast<size_t>(send_sizes[to]))));
  }
  WaitAll(requests);
}

}  // namespace

void GatherRecords(Communicator& comm, std::string_view name, std::span<const std::byte> mine,
                   std::span<std::byte> table) {
  CheckGather(comm.rank(), comm.size(), name, mine, table);
  DoGather(comm, name, mine, table);
}

void ExchangeBytes(Communicator& comm, std::string_view name, std::span<const std::byte> send,
                   std::span<const int64_t> send_sizes, std::span<std::byte> recv,
                   std::span<const int64_t> recv_sizes) {
  const std::vector<size_t> send_offsets =
      Offsets(comm.rank(), name, "send", send_sizes, send.size(), comm.size());
  const std::vector<size_t> recv_offsets =
      Offsets(comm.rank(), name, "receive", recv_sizes, recv.size(), comm.size());
  DoExchange(comm, name, send, send_sizes, send_offsets, recv, recv_sizes, recv_offsets);
}

Handle StartGatherRecords(Context& ctx, std::string name, std::span<const std::byte> mine,
                          std::span<std::byte> table,
                          std::function<void(std::exception_ptr)> on_done) {
  CheckGather(ctx.comm().rank(), ctx.comm().size(), name, mine, table);
  return ctx.Submit(
      [name = std::move(name), mine, table](Communicator& comm) {
        DoGather(comm, name, mine, table);
      },
      std::move(on_done));
}

Handle StartExchangeBytes(Context& ctx, std::string name, std::span<const std::byte> send,
                          std::vector<int64_t> send_sizes, std::span<std::byte> recv,
                          std::vector<int64_t> recv_sizes,
                          std::function<void(std::exception_ptr)> on_done) {
  const int rank = ctx.comm().rank(), world = ctx.comm().size();
  std::vector<size_t> send_offsets = Offsets(rank, name, "send", send_sizes, send.size(), world);
  std::vector<size_t> recv_offsets =
      Offsets(rank, name, "receive", recv_sizes, recv.size(), world);
  return ctx.Submit(
      [name = std::move(name), send, send_sizes = std::move(send_sizes),
       send_offsets = std::move(send_offsets), recv, recv_sizes = std::move(recv_sizes),
       recv_offsets = std::move(recv_offsets)](Communicator& comm) {
        DoExchange(comm, name, send, send_sizes, send_offsets, recv, recv_sizes, recv_offsets);
      },
      std::move(on_done));
}

}  // namespace zen
