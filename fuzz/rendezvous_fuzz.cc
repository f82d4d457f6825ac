// libFuzzer target: what zen reads during a rendezvous. The first byte picks
// the decoder, the rest is its input:
//   0  ParseRendezvousUrl on the text               (InvalidArgument only)
//   1  DecodeRendezvousValue on the bytes, with the expected world size and
//      rank from two parameter bytes                 (FormatError, MismatchError)
//   2  RendezvousFromEnv on "KEY=VALUE\n" lines       (InvalidArgument only)
//   3  SanitizeTcpAddress on the bytes                (FormatError only)
//   4  TimeoutFromSeconds on 8 bytes as a double      (InvalidArgument only)
// After a successful decode the target checks what the decoder promises.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <span>
#include <string>

#include "zen/comm/launch_env.h"
#include "zen/comm/rendezvous_url.h"
#include "zen/comm/rendezvous_value.h"
#include "zen/comm/timeout.h"
#include "zen/core/error.h"

namespace {

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "rendezvous fuzz: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0] % 5;
  const char* rest = reinterpret_cast<const char*>(data + 1);
  const size_t n = size - 1;
  switch (mode) {
    case 0:
      try {
        const zen::RendezvousUrl u = zen::ParseRendezvousUrl(std::string(rest, n));
        if ((u.kind == zen::RendezvousUrl::Kind::kRedis || u.kind == zen::RendezvousUrl::Kind::kTcp) &&
            (u.port < 1 || u.port > 65535 || u.host.empty())) {
          Fail("accepted a bad host:port");
        }
        if (u.job.size() > 128) Fail("accepted a long job id");
      } catch (const zen::InvalidArgument&) {
      }
      break;
    case 1: {
      if (n < 2) return 0;
      const int world = 1 + static_cast<uint8_t>(rest[0]) % 64;
      const int rank = static_cast<uint8_t>(rest[1]) % world;
      try {
        const zen::RendezvousValue v = zen::DecodeRendezvousValue(
            std::span<const char>(rest + 2, n - 2), world, rank, 0, "fuzz");
        if (v.world != world || v.rank != rank) Fail("decoded another world or rank");
        if (v.addresses.size() != static_cast<size_t>(world - 1) * v.address_bytes) {
          Fail("address block of the wrong size");
        }
        for (int p = 0; p < world; ++p) {
          if (p != rank && v.AddressFor(p).size() != v.address_bytes) Fail("AddressFor size");
        }
        if (zen::EncodeRendezvousValue(v).size() != n - 2) Fail("round trip size");
      } catch (const zen::FormatError&) {
      } catch (const zen::MismatchError&) {
      }
      break;
    }
    case 2: {
      std::map<std::string, std::string> env;
      const std::string text(rest, n);
      size_t pos = 0;
      while (pos < text.size()) {
        const size_t end = std::min(text.find('\n', pos), text.size());
        const std::string line = text.substr(pos, end - pos);
        const size_t eq = line.find('=');
        if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
        pos = end + 1;
      }
      try {
        const auto info = zen::RendezvousFromEnv(env);
        if (info) {
          if (info->size < 1 || info->rank < 0 || info->rank >= info->size) Fail("rank/size");
          zen::ParseRendezvousUrl(info->rendezvous);  // must be a valid URL
          if (!info->job.empty()) zen::ParseRendezvousUrl("file:x?job=" + info->job);
        }
      } catch (const zen::InvalidArgument&) {
      }
      break;
    }
    case 3:
      try {
        const auto clean = zen::SanitizeTcpAddress(std::span<const char>(rest, n));
        if (clean.size() != n) Fail("sanitized size");
      } catch (const zen::FormatError&) {
      }
      break;
    case 4: {
      if (n < 8) return 0;
      double s;
      std::memcpy(&s, rest, 8);
      try {
        const auto ms = zen::TimeoutFromSeconds(s);
        if (ms.count() <= 0 || ms > zen::kMaxTimeout) Fail("timeout out of range");
      } catch (const zen::InvalidArgument&) {
      }
      break;
    }
  }
  return 0;
}
