// zen/comm/rendezvous_value.h — the value each rank publishes at
// rendezvous, and its codec.
//
// A value carries a magic, the sender's world size and rank, its per-peer
// transport addresses and the generation's nonce; a value of another world
// size is a MismatchError naming both sizes, anything malformed a
// FormatError. Address padding is zeroed before publishing
// (SanitizeTcpAddress): no heap bytes leave the process.
//
// Usage:
//   zen::RendezvousValue mine{world, rank, address_bytes, addresses, nonce};
//   store.set(key, zen::EncodeRendezvousValue(mine));
//   zen::RendezvousValue peer = zen::DecodeRendezvousValue(store.get(key), world, r, rank, key);
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace zen {

// One rank's published value: its world size, rank and one transport address
// per peer (every address `address_bytes` long, in peer order, self skipped).
struct RendezvousValue {
  int world = 0;
  int rank = 0;
  uint32_t address_bytes = 0;
  std::vector<char> addresses;  // (world - 1) * address_bytes bytes
  // The generation's nonce (rank 0 draws it and stores it in "gen/<g>"):
  // every rank of one run carries the same, checked over the new mesh.
  uint64_t nonce = 0;
  // The address this value's sender published for `peer` (peer != rank).
  std::span<const char> AddressFor(int peer) const;
};

std::vector<char> EncodeRendezvousValue(const RendezvousValue& value);

// Decodes a value read from key `key`. MismatchError naming both world sizes
// when value's world != expected_world (checked first, from the fixed-size
// header); FormatError for anything malformed or for a rank other than
// expected_rank. `self` names the reading rank in errors.
RendezvousValue DecodeRendezvousValue(std::span<const char> bytes, int expected_world,
                                      int expected_rank, int self, const std::string& key);

// Replaces a Gloo TCP address (sockaddr_storage followed by a sequence
// number) by a copy in which every byte outside the family's sockaddr and the
// sequence number is zero. FormatError for another size or family.
std::vector<char> SanitizeTcpAddress(std::span<const char> address);

}  // namespace zen
