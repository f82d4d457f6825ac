// zen/comm/file_store.h — the rendezvous store of "file:DIR": one file per
// key in a directory every rank sees.
//
// A key's file is written to a temporary file of mode 0600 and linked into
// place, so a set is atomic and fails when the key exists. The directory is
// created with mode 0700 when missing; an existing one that other users
// could write into (not sticky) is refused, and a key file that is not a
// regular file of this user (a FIFO, a link, another user's file) is a
// FormatError, never a blocking open.
//
// Usage:
//   zen::FileStore store("/shared/run");      // or OpenStore("file:/shared/run")
//   store.set("k", {'v'});
//   std::vector<char> v = store.get("k");
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <string>
#include <vector>

#include "zen/comm/store.h"

namespace zen {

class FileStore final : public gloo::rendezvous::Store, public KeyCheck {
 public:
  explicit FileStore(std::string dir);
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;
  bool Has(const std::string& key) override;

  // The file that holds `key` (for tests and diagnostics).
  std::string PathOf(const std::string& key) const;

 private:
  std::string dir_;
};

}  // namespace zen
