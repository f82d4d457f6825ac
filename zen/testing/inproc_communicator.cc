#include "zen/testing/inproc_communicator.h"

#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <vector>

#include "zen/core/error.h"

namespace zen {
namespace inproc {

struct Key {
  int src = 0;
  int dst = 0;
  Tag tag = 0;
  auto operator<=>(const Key&) const = default;
};

// The messages of one (src, dst, tag). Sends and receives are numbered in
// the order they are issued; receive number k takes message number k.
struct Box {
  std::map<uint64_t, std::vector<std::byte>> messages;  // arrived, not yet taken
  std::set<uint64_t> abandoned;  // receives given up before their message came
  uint64_t sent = 0;
  uint64_t posted = 0;
  bool Idle() const { return messages.empty() && abandoned.empty() && sent == posted; }
};

struct Mailboxes {
  explicit Mailboxes(int size) : arrived(static_cast<size_t>(size)) {}
  std::mutex mu;
  std::vector<std::condition_variable> arrived;  // one per destination rank
  std::map<Key, Box> boxes;

  // Drops the box when nothing refers to it any more. Holds mu.
  void Tidy(const Key& key) {
    auto it = boxes.find(key);
    if (it != boxes.end() && it->second.Idle()) boxes.erase(it);
  }
};

}  // namespace inproc

namespace {

using inproc::Key;
using inproc::Mailboxes;

class DoneRequest final : public Request {
 public:
  void Wait() override {}
};

// One receive: of exactly data.size() bytes, or (when `out` is set) of any
// size up to max_bytes, written to *out.
class InProcRecv final : public Request {
 public:
  InProcRecv(std::shared_ptr<Mailboxes> boxes, Key key, uint64_t seq, std::span<std::byte> data,
             ByteBuffer* out, int64_t max_bytes, std::chrono::milliseconds timeout,
             ByteCounters* counters)
      : boxes_(std::move(boxes)),
        key_(key),
        seq_(seq),
        data_(data),
        out_(out),
        max_bytes_(max_bytes),
        timeout_(timeout),
        counters_(counters) {}

  ~InProcRecv() override {
    if (settled_) return;
    std::lock_guard lock(boxes_->mu);
    GiveUp();
  }

  void Wait() override {
    if (settled_) {
      if (error_) std::rethrow_exception(error_);
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    std::unique_lock lock(boxes_->mu);
    auto& cv = boxes_->arrived[static_cast<size_t>(key_.dst)];
    const bool arrived = cv.wait_until(
        lock, start + timeout_, [&] { return boxes_->boxes.at(key_).messages.count(seq_) > 0; });
    settled_ = true;
    if (!arrived) {
      GiveUp();
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - start);
      error_ = std::make_exception_ptr(TransportError(
          Where{key_.dst}, "no message from peer ", key_.src, " under tag ", key_.tag, " after ",
          waited.count(), " ms (timeout ", timeout_.count(), " ms, in-process transport)"));
      std::rethrow_exception(error_);
    }
    inproc::Box& box = boxes_->boxes.at(key_);
    auto node = box.messages.extract(seq_);
    boxes_->Tidy(key_);
    lock.unlock();
    std::vector<std::byte>& msg = node.mapped();
    if (out_) {
      if (msg.size() > static_cast<uint64_t>(max_bytes_)) {
        error_ = std::make_exception_ptr(FormatError(
            Where{key_.dst}, "message from peer ", key_.src, " under tag ", key_.tag, " has ",
            msg.size(), " bytes, more than the ", max_bytes_, " bytes this receive can hold"));
        std::rethrow_exception(error_);
      }
      counters_->AddRecv(key_.src, msg.size());
      *out_ = std::move(msg);
      return;
    }
    if (msg.size() != data_.size()) {
      error_ = std::make_exception_ptr(
          FormatError(Where{key_.dst}, "message from peer ", key_.src, " under tag ", key_.tag,
                      " has ", msg.size(), " bytes, the receive expects ", data_.size(), " bytes"));
      std::rethrow_exception(error_);
    }
    std::copy(msg.begin(), msg.end(), data_.begin());
    counters_->AddRecv(key_.src, msg.size());
  }

 private:
  // Takes the message if it is there, otherwise leaves a mark so that the
  // sender drops it. Holds mu.
  void GiveUp() {
    auto it = boxes_->boxes.find(key_);
    if (it == boxes_->boxes.end()) return;
    if (it->second.messages.erase(seq_) == 0) it->second.abandoned.insert(seq_);
    boxes_->Tidy(key_);
  }

  std::shared_ptr<Mailboxes> boxes_;
  Key key_;
  uint64_t seq_;
  std::span<std::byte> data_;
  ByteBuffer* out_;
  int64_t max_bytes_;
  std::chrono::milliseconds timeout_;
  ByteCounters* counters_;
  bool settled_ = false;
  std::exception_ptr error_;
};

class InProcCommunicator final : public Communicator {
 public:
  InProcCommunicator(std::shared_ptr<Mailboxes> boxes, int rank, int size,
                     std::chrono::milliseconds timeout)
      : Communicator(rank, size, timeout), boxes_(std::move(boxes)) {}

  std::unique_ptr<Request> Send(int peer, Tag tag, std::span<const std::byte> data) override {
    CheckPeer(peer);
    std::vector<std::byte> copy(data.begin(), data.end());
    const Key key{rank(), peer, tag};
    {
      std::lock_guard lock(boxes_->mu);
      inproc::Box& box = boxes_->boxes[key];
      const uint64_t seq = box.sent++;
      if (box.abandoned.erase(seq) == 0) box.messages.emplace(seq, std::move(copy));
      boxes_->Tidy(key);
    }
    boxes_->arrived[static_cast<size_t>(peer)].notify_all();
    mutable_counters().AddSent(peer, data.size());
    mutable_counters().AddMessage();
    return std::make_unique<DoneRequest>();
  }

  std::unique_ptr<Request> Recv(int peer, Tag tag, std::span<std::byte> data) override {
    return Post(peer, tag, data, nullptr, 0);
  }

  std::unique_ptr<Request> RecvUpTo(int peer, Tag tag, ByteBuffer& out,
                                    int64_t max_bytes) override {
    if (max_bytes < 0) {
      throw InvalidArgument(Where{rank()}, "RecvUpTo: max_bytes ", max_bytes, " is negative");
    }
    return Post(peer, tag, {}, &out, max_bytes);
  }

 private:
  std::unique_ptr<Request> Post(int peer, Tag tag, std::span<std::byte> data, ByteBuffer* out,
                                int64_t max_bytes) {
    CheckPeer(peer);
    const Key key{peer, rank(), tag};
    uint64_t seq = 0;
    {
      std::lock_guard lock(boxes_->mu);
      seq = boxes_->boxes[key].posted++;
    }
    return std::make_unique<InProcRecv>(boxes_, key, seq, data, out, max_bytes, timeout(),
                                        &mutable_counters());
  }

  std::shared_ptr<Mailboxes> boxes_;
};

}  // namespace

InProcFabric::InProcFabric(int size) : size_(size) {
  if (size < 1) throw InvalidArgument(Where{}, "InProcFabric: world size ", size, " < 1");
  boxes_ = std::make_shared<Mailboxes>(size);
}

InProcFabric::~InProcFabric() = default;

std::unique_ptr<Communicator> InProcFabric::Connect(int rank, std::chrono::milliseconds timeout) {
  if (rank < 0 || rank >= size_) {
    throw InvalidArgument(Where{rank}, "InProcFabric: rank is outside [0, ", size_, ")");
  }
  if (timeout.count() <= 0) {
    throw InvalidArgument(Where{rank}, "InProcFabric: timeout ", timeout.count(),
                          " ms is not positive");
  }
  return std::make_unique<InProcCommunicator>(boxes_, rank, size_, timeout);
}

void AddInProcTransport(TransportRegistry& transports, std::shared_ptr<InProcFabric> fabric) {
  if (!fabric) throw InvalidArgument("AddInProcTransport: no fabric");
  transports.Add({"inproc", "in-process mailboxes; ranks are threads of one process (tests only)",
                  [fabric](int rank, int size, const ConnectOptions& options) {
                    if (size != fabric->size()) {
                      throw InvalidArgument(Where{rank}, "transport inproc: size ", size,
                                            " differs from the fabric's ", fabric->size());
                    }
                    return fabric->Connect(rank, options.timeout);
                  },
                  {},
                  /*ranks_from_launcher=*/false,
                  /*builtin=*/false});
}

}  // namespace zen
