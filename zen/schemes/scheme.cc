#include "zen/schemes/scheme.h"

#include <array>
#include <cstring>

#include "zen/core/error.h"

namespace zen {
namespace {

constexpr uint64_t kMetaMagic = 0x7A656E6D65746131ULL;  // "zenmeta1"
constexpr uint64_t kDtypeF32 = 1;

// FNV-1a: a stable fingerprint of the scheme name for the exchange.
uint64_t Fingerprint(std::string_view s) {
  uint64_t h = 1469598103934665603ULL;
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ULL;
  return h;
}

struct Meta {
  uint64_t magic;
  int64_t rows;
  int64_t width;
  uint64_t dtype;
  uint64_t scheme;
  uint64_t call;
  uint64_t bad_input;
};

std::string Describe(const Meta& m, int rank) {
  return detail::Concat("rank ", rank, " has rows=", m.rows, " width=", m.width,
                        " call=", m.call);
}

// The first field in which `other` differs from `mine`, or empty.
std::string Difference(const Meta& mine, const Meta& other) {
  if (other.magic != kMetaMagic) return "a corrupt metadata message";
  if (other.scheme != mine.scheme) return "a different scheme";
  if (other.rows != mine.rows) return detail::Concat("rows ", other.rows, " vs ", mine.rows);
  if (other.width != mine.width) return detail::Concat("width ", other.width, " vs ", mine.width);
  if (other.dtype != mine.dtype) return "a different dtype";
  if (other.call != mine.call) {
    return detail::Concat("call number ", other.call, " vs ", mine.call,
                          " (ranks issued different sequences of collective calls)");
  }
  return {};
}

}  // namespace

Support Scheme::supports(const SparsityProfile&) const { return Support::Yes(); }

void CheckRanksAgree(Communicator& comm, std::string_view scheme, int64_t rows, int64_t width,
                     std::string_view tensor, const std::string& local_error) {
  const Meta mine{kMetaMagic, rows,  width, kDtypeF32, Fingerprint(scheme), comm.NextTag(),
                  local_error.empty() ? 0u : 1u};
  const int n = comm.size();
  std::vector<Meta> all(static_cast<size_t>(n));
  all[static_cast<size_t>(comm.rank())] = mine;
  std::vector<std::unique_ptr<Request>> pending;
  for (int s = 1; s < n; ++s) {
    const int from = (comm.rank() - s + n) % n;
    auto* slot = reinterpret_cast<std::byte*>(&all[static_cast<size_t>(from)]);
    pending.push_back(comm.Recv(from, kControlTag, std::span<std::byte>(slot, sizeof(Meta))));
  }
  const auto* self = reinterpret_cast<const std::byte*>(&mine);
  for (int s = 1; s < n; ++s) {
    pending.push_back(comm.Send((comm.rank() + s) % n, kControlTag,
                                std::span<const std::byte>(self, sizeof(Meta))));
  }
  for (auto& r : pending) r->Wait();
  const Where where{comm.rank(), tensor};
  if (!local_error.empty()) throw InvalidArgument(where, local_error);
  for (int r = 0; r < n; ++r) {
    if (all[static_cast<size_t>(r)].bad_input && all[static_cast<size_t>(r)].magic == kMetaMagic) {
      throw InvalidArgument(where, "rank ", r, " rejected its input for scheme '", scheme,
                            "' (see that rank's error)");
    }
  }
  for (int r = 0; r < n; ++r) {
    const std::string diff = Difference(mine, all[static_cast<size_t>(r)]);
    if (!diff.empty()) {
      throw MismatchError(where, "ranks disagree before '", scheme, "': rank ", r, " sent ", diff,
                          "; ", Describe(all[static_cast<size_t>(r)], r), ", ",
                          Describe(mine, comm.rank()));
    }
  }
}

SparseTensor Scheme::Sync(Communicator& comm, const SparseTensor& local) {
  std::string error;
  if (local.rows() < 1 || local.width() < 1) {
    error = detail::Concat("shape [", local.rows(), ", ", local.width(),
                           "] is invalid: rows and width must be >= 1");
  }
  if (check_agreement_) {
    CheckRanksAgree(comm, name(), local.rows(), local.width(), local.name(), error);
  } else if (!error.empty()) {
    throw InvalidArgument(Where{comm.rank(), local.name()}, error);
  }
  return DoSync(comm, local);
}

void Scheme::SyncDense(Communicator& comm, std::span<float> buffer, int64_t rows, int64_t width,
                       std::string_view tensor) {
  std::string error;
  if (rows < 1 || width < 1) {
    error = detail::Concat("shape [", rows, ", ", width, "] is invalid: rows and width must be >= 1");
  } else if (buffer.size() != static_cast<size_t>(rows) * static_cast<size_t>(width)) {
    error = detail::Concat("dense buffer has ", buffer.size(), " floats, expected rows ", rows,
                           " x width ", width);
  }
  if (check_agreement_) {
    CheckRanksAgree(comm, name(), rows, width, tensor, error);
  } else if (!error.empty()) {
    throw InvalidArgument(Where{comm.rank(), tensor}, error);
  }
  DoSyncDense(comm, buffer, rows, width, tensor);
}

void Scheme::DoSyncDense(Communicator& comm, std::span<float> buffer, int64_t rows, int64_t width,
                         std::string_view tensor) {
  const SparseTensor local = SparseTensor::FromDense(buffer, rows, width, std::string(tensor));
  const SparseTensor sum = DoSync(comm, local);
  sum.ToDense(buffer);
}

}  // namespace zen
