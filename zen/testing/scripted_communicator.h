// zen/testing/scripted_communicator.h — rank 0 of a world of two whose
// peer is a script (zen_testing: not installed with zen::zen).
//
// Every receive is answered, when waited for, by the script, which sees the
// tag, the size expected and what rank 0 sent under that tag (oldest
// first); a framed receive (RecvUpTo) first asks `announce` for the length
// the peer claims and checks it against the bound before anything is
// allocated, as a real framed transport does. Used to feed schemes hostile
// sizes and corrupt messages.
//
// Usage (in a test):
//   zen::testing::ScriptedComm comm([](zen::Tag, size_t size, auto& sent) {
//     zen::ByteBuffer echo = std::move(sent.front());   // mirror rank 0
//     sent.pop_front();
//     return echo;
//   });
//   EXPECT_THROW(scheme->Sync(comm, local), zen::FormatError);
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <utility>

#include "zen/comm/communicator.h"
#include "zen/core/error.h"

namespace zen::testing {

// Bytes of one answer; `tag`, `size` and `sent` (what rank 0 sent under the
// tag, oldest first) let the script decide.
using Script = std::function<ByteBuffer(Tag tag, size_t size, std::deque<ByteBuffer>& sent)>;

class DoneRequest final : public Request {
 public:
  void Wait() override {}
};

class ScriptedRecv final : public Request {
 public:
  explicit ScriptedRecv(std::function<void()> fill) : fill_(std::move(fill)) {}
  void Wait() override {
    if (fill_) std::exchange(fill_, nullptr)();
  }

 private:
  std::function<void()> fill_;
};

// The length a framed message announces (RecvUpTo), given its true one.
using Announce = std::function<int64_t(Tag tag, int64_t true_size)>;

// Rank 0 of a world of two whose peer is a script.
class ScriptedComm final : public Communicator {
 public:
  explicit ScriptedComm(Script script, Announce announce = [](Tag, int64_t n) { return n; })
      : Communicator(0, 2, std::chrono::milliseconds(1000)),
        script_(std::move(script)),
        announce_(std::move(announce)) {}

  std::unique_ptr<Request> Send(int peer, Tag tag, std::span<const std::byte> data) override {
    CheckPeer(peer);
    sent_[tag].emplace_back(data.begin(), data.end());
    return std::make_unique<DoneRequest>();
  }

  std::unique_ptr<Request> Recv(int peer, Tag tag, std::span<std::byte> data) override {
    CheckPeer(peer);
    return std::make_unique<ScriptedRecv>([this, tag, data] {
      const ByteBuffer reply = script_(tag, data.size(), sent_[tag]);
      if (reply.size() != data.size()) {
        throw FormatError(Where{rank()}, "scripted peer answers ", reply.size(), " bytes, receive ",
                          "expects ", data.size());
      }
      std::copy(reply.begin(), reply.end(), data.begin());
    });
  }

  // Models a framed transport: the length comes first and is checked
  // against the bound before anything is allocated for it.
  std::unique_ptr<Request> RecvUpTo(int peer, Tag tag, ByteBuffer& out,
                                    int64_t max_bytes) override {
    CheckPeer(peer);
    return std::make_unique<ScriptedRecv>([this, tag, &out, max_bytes] {
      std::deque<ByteBuffer>& sent = sent_[tag];
      const int64_t truth = sent.empty() ? 0 : static_cast<int64_t>(sent.front().size());
      const int64_t announced = announce_(tag, truth);
      if (announced < 0 || announced > max_bytes) {
        throw FormatError(Where{rank()}, "scripted peer announces ", announced,
                          " bytes under tag ", tag, ", more than the ", max_bytes,
                          " bytes this receive can hold");
      }
      ByteBuffer reply = script_(tag, static_cast<size_t>(announced), sent);
      if (static_cast<int64_t>(reply.size()) != announced) {
        throw FormatError(Where{rank()}, "scripted peer answers ", reply.size(), " bytes, ",
                          "announced ", announced);
      }
      out = std::move(reply);
    });
  }

 private:
  Script script_;
  Announce announce_;
  std::map<Tag, std::deque<ByteBuffer>> sent_;
};

}  // namespace zen::testing
