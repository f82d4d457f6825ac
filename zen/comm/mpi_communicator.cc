#include "zen/comm/mpi_communicator.h"

#include "zen/comm/timeout.h"
#include "zen/core/error.h"

#ifdef ZEN_HAVE_MPI
#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>
#endif

namespace zen {

#ifndef ZEN_HAVE_MPI

bool MpiAvailable() { return false; }

std::unique_ptr<Communicator> ConnectMpi(const MpiOptions&) {
  throw InvalidArgument(Where{}, "ConnectMpi: this build has no MPI transport (configure with "
                                 "libopenmpi-dev installed and ZEN_WITH_MPI=ON)");
}

#else

namespace {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

Millis Since(Clock::time_point start) {
  return std::chrono::duration_cast<Millis>(Clock::now() - start);
}

std::string MpiMessage(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(len));
}

class MpiCommunicator;

// What one transfer is, for error messages.
struct Transfer {
  int rank = 0;
  int peer = 0;
  Tag tag = 0;
  uint64_t bytes = 0;
  bool is_send = false;
};

// One send or receive. Receives of unknown size (RecvUpTo) start as a
// pending probe and become an MPI receive once matched.
class MpiRequest final : public Request {
 public:
  MpiRequest(MpiCommunicator& comm, Transfer t) : comm_(comm), t_(t) {}
  ~MpiRequest() override;

  void Wait() override;
  // Non-blocking completion check (also advances pending probe receives).
  // Rethrows the error of a failed request.
  // TODO(lead, after merging the engine branch): mark `override`.
  [[maybe_unused]] bool Test();

 private:
  friend class MpiCommunicator;
  // Advances this request without blocking; true when complete.
  bool Poll();
  // Tries to match a pending probe receive; true when matched (or failed).
  bool TryMatch();
  void Fail(std::exception_ptr e);
  [[noreturn]] void ThrowMpi(const char* stage, int code);

  MpiCommunicator& comm_;
  Transfer t_;
  MPI_Request req_ = MPI_REQUEST_NULL;
  bool done_ = false;
  bool pending_probe_ = false;  // RecvUpTo not matched yet
  std::exception_ptr error_;
  // Receive targets.
  std::span<std::byte> exact_;
  ByteBuffer* out_ = nullptr;
  uint64_t max_bytes_ = 0;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, int rank, int size, Millis timeout, int tag_mask)
      : Communicator(rank, size, timeout), comm_(comm), tag_mask_(tag_mask) {}

  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  std::unique_ptr<Request> Send(int peer, Tag tag, std::span<const std::byte> data) override {
    auto r = Make(peer, tag, data.size(), true);
    CheckCount(data.size());
    const int rc = MPI_Isend(data.data(), static_cast<int>(data.size()), MPI_BYTE, peer,
                             MpiTag(tag), comm_, &r->req_);
    if (rc != MPI_SUCCESS) r->ThrowMpi("posting the send", rc);
    mutable_counters().AddSent(peer, data.size());
    mutable_counters().AddMessage();
    return r;
  }

  std::unique_ptr<Request> Recv(int peer, Tag tag, std::span<std::byte> data) override {
    auto r = Make(peer, tag, data.size(), false);
    CheckCount(data.size());
    r->exact_ = data;
    const int rc = MPI_Irecv(data.data(), static_cast<int>(data.size()), MPI_BYTE, peer,
                             MpiTag(tag), comm_, &r->req_);
    if (rc != MPI_SUCCESS) r->ThrowMpi("posting the receive", rc);
    return r;
  }

  std::unique_ptr<Request> RecvUpTo(int peer, Tag tag, ByteBuffer& out,
                                    int64_t max_bytes) override {
    if (max_bytes < 0) {
      throw InvalidArgument(Where{rank()}, "RecvUpTo: max_bytes ", max_bytes, " is negative");
    }
    auto r = Make(peer, tag, static_cast<uint64_t>(max_bytes), false);
    r->out_ = &out;
    r->max_bytes_ = static_cast<uint64_t>(max_bytes);
    r->pending_probe_ = true;
    probes_.push_back(r.get());
    return r;
  }

  void CountRecv(int peer, uint64_t n) { mutable_counters().AddRecv(peer, n); }
  int MpiTag(Tag tag) const { return static_cast<int>(tag & static_cast<Tag>(tag_mask_)); }
  MPI_Comm comm() const { return comm_; }

  // Matches pending probe receives in the order they were posted.
  void Progress() {
    for (auto it = probes_.begin(); it != probes_.end();) {
      if ((*it)->TryMatch()) {
        it = probes_.erase(it);
      } else {
        ++it;
      }
    }
  }
  void Forget(MpiRequest* r) { probes_.remove(r); }
  void MarkBroken(const std::string& why) {
    if (broken_.empty()) broken_ = why;
  }

 private:
  std::unique_ptr<MpiRequest> Make(int peer, Tag tag, uint64_t bytes, bool is_send) {
    CheckPeer(peer);
    if (!broken_.empty()) {
      throw TransportError(Where{rank()}, "MPI communicator is no longer usable after: ", broken_);
    }
    return std::make_unique<MpiRequest>(*this, Transfer{rank(), peer, tag, bytes, is_send});
  }
  void CheckCount(size_t bytes) const {
    if (bytes > static_cast<size_t>(std::numeric_limits<int>::max())) {
      throw InvalidArgument(Where{rank()}, "MPI transport: a message of ", bytes,
                            " bytes exceeds MPI's int count (2^31 - 1 bytes)");
    }
  }

  MPI_Comm comm_;
  int tag_mask_;
  std::list<MpiRequest*> probes_;
  std::string broken_;
};

void MpiRequest::ThrowMpi(const char* stage, int code) {
  throw TransportError(Where{t_.rank}, t_.is_send ? "send to" : "receive from", " peer ", t_.peer,
                       " under tag ", t_.tag, " (", t_.bytes, " bytes) failed while ", stage, ": ",
                       MpiMessage(code));
}

void MpiRequest::Fail(std::exception_ptr e) {
  done_ = true;
  error_ = e;
}

bool MpiRequest::TryMatch() {
  if (!pending_probe_) return true;
  int flag = 0;
  MPI_Message msg;
  MPI_Status st;
  int rc = MPI_Improbe(t_.peer, comm_.MpiTag(t_.tag), comm_.comm(), &flag, &msg, &st);
  try {
    if (rc != MPI_SUCCESS) ThrowMpi("probing for the message", rc);
    if (!flag) return false;
    pending_probe_ = false;
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    const uint64_t length = static_cast<uint64_t>(std::max(count, 0));
    if (length > max_bytes_) {
      std::vector<std::byte> scratch(length);  // drain it, so the sender completes
      MPI_Mrecv(scratch.data(), count, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
      throw FormatError(Where{t_.rank}, "message from peer ", t_.peer, " under tag ", t_.tag,
                        " has ", length, " bytes, more than the ", max_bytes_,
                        " bytes this receive can hold");
    }
    out_->resize(length);
    rc = MPI_Imrecv(out_->data(), count, MPI_BYTE, &msg, &req_);
    if (rc != MPI_SUCCESS) ThrowMpi("receiving the matched message", rc);
  } catch (...) {
    pending_probe_ = false;
    Fail(std::current_exception());
  }
  return true;
}

bool MpiRequest::Poll() {
  if (done_) return true;
  comm_.Progress();
  if (pending_probe_ || done_) return done_;
  int flag = 0;
  MPI_Status st;
  const int rc = MPI_Test(&req_, &flag, &st);
  try {
    if (rc != MPI_SUCCESS) {
      int cls = 0;
      MPI_Error_class(rc, &cls);
      if (!t_.is_send && (cls == MPI_ERR_TRUNCATE || st.MPI_ERROR == MPI_ERR_TRUNCATE)) {
        throw FormatError(Where{t_.rank}, "message from peer ", t_.peer, " under tag ", t_.tag,
                          " is longer than the ", exact_.size(), " bytes the receive expects");
      }
      ThrowMpi("waiting", rc);
    }
    if (!flag) return false;
    done_ = true;
    if (!t_.is_send) {
      int count = 0;
      MPI_Get_count(&st, MPI_BYTE, &count);
      const uint64_t length = static_cast<uint64_t>(std::max(count, 0));
      if (!out_ && length != exact_.size()) {
        throw FormatError(Where{t_.rank}, "message from peer ", t_.peer, " under tag ", t_.tag,
                          " has ", length, " bytes, the receive expects ", exact_.size(),
                          " bytes");
      }
      comm_.CountRecv(t_.peer, length);
    }
  } catch (...) {
    Fail(std::current_exception());
  }
  return true;
}

bool MpiRequest::Test() {
  const bool complete = Poll();
  if (complete && error_) std::rethrow_exception(error_);
  return complete;
}

void MpiRequest::Wait() {
  const auto start = Clock::now();
  int spins = 0;
  while (!Poll()) {
    if (Since(start) >= comm_.timeout()) {
      // Give up: cancel a receive, release the request; the communicator is
      // no longer trusted.
      if (pending_probe_) {
        comm_.Forget(this);
        pending_probe_ = false;
      } else if (req_ != MPI_REQUEST_NULL) {
        if (!t_.is_send) MPI_Cancel(&req_);
        MPI_Request_free(&req_);
      }
      const std::string what = std::string(t_.is_send ? "send to" : "receive from") + " peer " +
                               std::to_string(t_.peer) + " under tag " + std::to_string(t_.tag) +
                               " timed out";
      comm_.MarkBroken(what);
      Fail(std::make_exception_ptr(TransportError(
          Where{t_.rank}, what, " (", t_.bytes, " bytes) after ", Since(start).count(),
          " ms (timeout ", comm_.timeout().count(),
          " ms); this MPI communicator is no longer usable")));
      break;
    }
    if (++spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if (error_) std::rethrow_exception(error_);
}

MpiRequest::~MpiRequest() {
  if (!done_) {
    try {
      Wait();
    } catch (...) {  // the owner chose not to wait
    }
  }
  if (pending_probe_) comm_.Forget(this);
}

void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

bool MpiAvailable() { return true; }

std::unique_ptr<Communicator> ConnectMpi(const MpiOptions& options) {
  CheckTimeout(options.timeout, "ConnectMpi");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) {
      throw TransportError(Where{}, "ConnectMpi: MPI_Init_thread failed: ", MpiMessage(rc));
    }
    static std::once_flag once;
    std::call_once(once, [] { std::atexit(FinalizeAtExit); });
  }
  MPI_Comm comm;
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  if (rc != MPI_SUCCESS) {
    throw TransportError(Where{}, "ConnectMpi: MPI_Comm_dup failed: ", MpiMessage(rc));
  }
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int* ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  const int tag_ub = flag && ub ? *ub : 32767;
  int mask = 1;
  while (mask <= tag_ub / 2) mask = mask * 2 + 1;  // the largest 2^k - 1 <= tag_ub
  if (mask > tag_ub) mask = tag_ub;
  return std::make_unique<MpiCommunicator>(comm, rank, size, options.timeout, mask);
}

#endif  // ZEN_HAVE_MPI

}  // namespace zen
