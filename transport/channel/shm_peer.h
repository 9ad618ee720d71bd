// What the shared-memory channel (shm_channel.h) keeps per node-local peer: the peer's segment
// mapped here, the ring of it we write into, our sequence numbers and whether the kernel lets us
// reach the peer's memory (cross-memory attach). Inside Peer as peer.shm.
#pragma once

#include <cstdint>
#include <memory>

#include "protocol/serial.h"
#include "transport/channel/shm_segment.h"

namespace rdmx::transport {

struct ShmPeer {
  // This peer's traffic goes through shared memory, both ways: we hold a ring in its segment.
  bool on() const noexcept { return tx.valid(); }
  bool cma = false;  // process_vm_readv/writev to the peer work: single-copy rendezvous
  std::unique_ptr<shm::Segment> segment;  // the peer's (nullptr for ourselves: our own)
  shm::Producer tx;                       // our ring in the peer's segment
  protocol::Seq next_seq = 0;
  std::uint64_t sends = 0;  // Worker::stats sums them (counted under the peer's post lock)
};

}  // namespace rdmx::transport
