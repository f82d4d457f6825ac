#include "zen/comm/rendezvous_value.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

#include "zen/core/error.h"

namespace zen {

namespace {
constexpr char kMagic[4] = {'Z', 'R', 'V', '1'};
constexpr size_t kHeader = 16;  // magic, world, rank, address_bytes
constexpr size_t kNonceBytes = sizeof(uint64_t);  // after the addresses
constexpr uint32_t kMaxAddressBytes = 4096;

uint32_t ReadU32(std::span<const char> b, size_t at) {
  uint32_t v;
  std::memcpy(&v, b.data() + at, sizeof(v));
  return v;
}
void PutU32(std::vector<char>& out, size_t at, uint32_t v) {
  std::memcpy(out.data() + at, &v, sizeof(v));
}
}  // namespace

std::span<const char> RendezvousValue::AddressFor(int peer) const {
  const int slot = peer < rank ? peer : peer - 1;
  return std::span<const char>(addresses).subspan(static_cast<size_t>(slot) * address_bytes,
                                                  address_bytes);
}

std::vector<char> EncodeRendezvousValue(const RendezvousValue& v) {
  std::vector<char> out(kHeader + v.addresses.size() + kNonceBytes);
  std::memcpy(out.data(), kMagic, 4);
  PutU32(out, 4, static_cast<uint32_t>(v.world));
  PutU32(out, 8, static_cast<uint32_t>(v.rank));
  PutU32(out, 12, v.address_bytes);
  if (!v.addresses.empty()) std::memcpy(out.data() + kHeader, v.addresses.data(), v.addresses.size());
  std::memcpy(out.data() + kHeader + v.addresses.size(), &v.nonce, kNonceBytes);
  return out;
}

RendezvousValue DecodeRendezvousValue(std::span<const char> b, int expected_world,
                                      int expected_rank, int self, const std::string& key) {
  if (b.size() < kHeader || std::memcmp(b.data(), kMagic, 4) != 0) {
    throw FormatError(Where{self}, "rendezvous: key '", key, "' holds ", b.size(),
                      " bytes that are not a zen rendezvous value (an earlier zen version, or "
                      "another program using this store and prefix?)");
  }
  const uint32_t world = ReadU32(b, 4), rank = ReadU32(b, 8), ab = ReadU32(b, 12);
  if (world != static_cast<uint32_t>(expected_world)) {
    throw MismatchError(Where{self}, "world size mismatch: rank ", rank, " runs with world size ",
                        world, ", this rank (", self, ") with world size ", expected_world,
                        " (key '", key, "'); start every rank with the same world size");
  }
  if (rank != static_cast<uint32_t>(expected_rank)) {
    throw FormatError(Where{self}, "rendezvous: key '", key, "' is for rank ", expected_rank,
                      " but its value names rank ", rank);
  }
  if (ab > kMaxAddressBytes) {
    throw FormatError(Where{self}, "rendezvous: key '", key, "' announces addresses of ", ab,
                      " bytes (at most ", kMaxAddressBytes, ")");
  }
  const uint64_t block = static_cast<uint64_t>(world - 1) * ab;  // world >= 1 here
  const uint64_t want = kHeader + block + kNonceBytes;
  if (b.size() != want) {
    throw FormatError(Where{self}, "rendezvous: key '", key, "' holds ", b.size(),
                      " bytes, a value of world size ", world, " with addresses of ", ab,
                      " bytes has ", want, " (an earlier zen version?)");
  }
  RendezvousValue v;
  v.world = static_cast<int>(world);
  v.rank = static_cast<int>(rank);
  v.address_bytes = ab;
  v.addresses.assign(b.begin() + kHeader, b.begin() + static_cast<std::ptrdiff_t>(kHeader + block));
  std::memcpy(&v.nonce, b.data() + kHeader + block, kNonceBytes);
  return v;
}

std::vector<char> SanitizeTcpAddress(std::span<const char> address) {
  constexpr size_t kSeqAt = sizeof(sockaddr_storage);
  if (address.size() != kSeqAt + sizeof(int64_t)) {
    throw FormatError(Where{}, "rendezvous: a TCP address has ", address.size(), " bytes, expected ",
                      kSeqAt + sizeof(int64_t));
  }
  sockaddr_storage ss;
  std::memcpy(&ss, address.data(), sizeof(ss));
  std::vector<char> out(address.size(), 0);
  if (ss.ss_family == AF_INET) {
    sockaddr_in in{};
    std::memcpy(&in, address.data(), sizeof(in));
    sockaddr_in clean{};
    clean.sin_family = AF_INET;
    clean.sin_port = in.sin_port;
    clean.sin_addr = in.sin_addr;
    std::memcpy(out.data(), &clean, sizeof(clean));
  } else if (ss.ss_family == AF_INET6) {
    sockaddr_in6 in6{};
    std::memcpy(&in6, address.data(), sizeof(in6));
    sockaddr_in6 clean{};
    clean.sin6_family = AF_INET6;
    clean.sin6_port = in6.sin6_port;
    clean.sin6_flowinfo = in6.sin6_flowinfo;
    clean.sin6_addr = in6.sin6_addr;
    clean.sin6_scope_id = in6.sin6_scope_id;
    std::memcpy(out.data(), &clean, sizeof(clean));
  } else {
    throw FormatError(Where{}, "rendezvous: a TCP address has address family ", ss.ss_family,
                      " (neither IPv4 nor IPv6)");
  }
  std::memcpy(out.data() + kSeqAt, address.data() + kSeqAt, sizeof(int64_t));
  return out;
}

}  // namespace zen
