#include "zen/comm/rendezvous_url.h"

#include <algorithm>

#include "zen/core/error.h"

namespace zen {
namespace {

// Parses a decimal port in [1, 65535]; 0 when it is not one.
int ParsePort(const std::string& s) {
  if (s.empty() || s.size() > 5 || s.find_first_not_of("0123456789") != std::string::npos) return 0;
  const int p = std::stoi(s);
  return p >= 1 && p <= 65535 ? p : 0;
}

}  // namespace

bool ValidJobId(const std::string& job) {
  return !job.empty() && job.size() <= 128 &&
         job.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") ==
             std::string::npos;
}

RendezvousUrl ParseRendezvousUrl(const std::string& url) {
  RendezvousUrl out;
  std::string body = url;
  const auto q = url.find('?');
  if (q != std::string::npos) {
    body = url.substr(0, q);
    std::string query = url.substr(q + 1);
    size_t pos = 0;
    while (pos <= query.size()) {
      const size_t amp = std::min(query.find('&', pos), query.size());
      const std::string item = query.substr(pos, amp - pos);
      const auto eq = item.find('=');
      const std::string key = item.substr(0, eq);
      const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
      if (key != "job") {
        throw InvalidArgument(Where{}, "rendezvous URL '", url, "': unknown query key '", key,
                              "' (only job=ID is understood)");
      }
      if (!ValidJobId(value)) {
        throw InvalidArgument(Where{}, "rendezvous URL '", url, "': job id '", value,
                              "' must be 1 to 128 characters of [A-Za-z0-9._-]");
      }
      out.job = value;
      pos = amp + 1;
    }
  }
  out.base = body;
  auto host_port = [&](const std::string& scheme, const std::string& rest) {
    const auto colon = rest.rfind(':');
    const int port = colon == std::string::npos ? 0 : ParsePort(rest.substr(colon + 1));
    if (colon == std::string::npos || colon == 0 || port == 0) {
      throw InvalidArgument(Where{}, "rendezvous URL '", url, "': expected ", scheme,
                            "HOST:PORT with PORT in [1, 65535]");
    }
    out.host = rest.substr(0, colon);
    out.port = port;
  };
  if (body.rfind("file:", 0) == 0) {
    out.kind = RendezvousUrl::Kind::kFile;
    out.path = body.substr(5);
    if (out.path.empty()) throw InvalidArgument(Where{}, "rendezvous URL '", url, "' names no directory");
  } else if (body.rfind("redis://", 0) == 0) {
    out.kind = RendezvousUrl::Kind::kRedis;
    host_port("redis://", body.substr(8));
  } else if (body.rfind("tcp://", 0) == 0) {
    out.kind = RendezvousUrl::Kind::kTcp;
    host_port("tcp://", body.substr(6));
  } else if (body == "env://" || body == "env:") {
    out.kind = RendezvousUrl::Kind::kEnv;
  } else if (body == "mpi://" || body == "mpi:") {
    out.kind = RendezvousUrl::Kind::kMpi;
  } else {
    throw InvalidArgument(Where{}, "rendezvous URL '", url,
                          "' is none of file:DIR, redis://HOST:PORT, tcp://HOST:PORT, env://, "
                          "mpi://");
  }
  return out;
}
}  // namespace zen
