// zen/testing/inproc_communicator.h — an in-process transport for tests: the
// ranks are threads of one process and messages go through shared
// mailboxes, so algorithm logic can be tested without a network.
//
// Semantics follow Communicator exactly: mailboxes are keyed by (src, dst,
// tag) and FIFO per key; Send copies the payload eagerly (the returned
// request is already complete); Recv waits up to the timeout given to
// Connect; a message of another size than the receive is a FormatError
// naming both sizes; a timeout is a TransportError naming the peer, the tag
// and the milliseconds waited. A receive destroyed before it was waited for
// gives up its place: the message it would have matched is dropped, so later
// receives under the same key stay in order.
//
// It is the "inproc" entry of a transport table when the test library adds
// it (AddInProcTransport): zen's product libraries do not carry it.
//
// Usage:
//   zen::InProcFabric fabric(4);                      // shared by the threads
//   // in thread r:
//   std::unique_ptr<zen::Communicator> comm =
//       fabric.Connect(r, std::chrono::seconds(30));
#pragma once

#include <chrono>
#include <memory>

#include "zen/comm/communicator.h"
#include "zen/comm/transport.h"

namespace zen {

namespace inproc {
struct Mailboxes;  // shared state, defined in the .cc
}

class InProcFabric {
 public:
  explicit InProcFabric(int size);
  ~InProcFabric();
  InProcFabric(const InProcFabric&) = delete;
  InProcFabric& operator=(const InProcFabric&) = delete;

  int size() const { return size_; }

  // The communicator of `rank`; may be called from any thread, once per
  // rank. Communicators share the mailboxes and may outlive the fabric.
  std::unique_ptr<Communicator> Connect(int rank, std::chrono::milliseconds timeout);

 private:
  int size_;
  std::shared_ptr<inproc::Mailboxes> boxes_;
};

// Adds the entry "inproc" to `transports`: its factory connects `rank` of
// `fabric` (size must be the fabric's; the options' timeout is the
// receive timeout, the other fields are ignored).
void AddInProcTransport(TransportRegistry& transports, std::shared_ptr<InProcFabric> fabric);

}  // namespace zen
