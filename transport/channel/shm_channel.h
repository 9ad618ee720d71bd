// The shared-memory channel's hooks (channel.h), for peers on this node: each message is copied
// into our ring in the peer's segment (shm_segment.h) and taken out by the peer's progress, which
// polls its segment's rings before the CQs; no system call per message, nothing through the
// device. The ring is FIFO, so messages arrive in order and stream_full is a full ring.
// Rendezvous data moves in one copy by cross-memory attach (shm_send.cc), driven by the same
// engine as RDMA writes; a kernel that refuses it (ptrace scope, seccomp) or shm_cma=0 leaves
// the copy path, through the ring.
//
// Unlike RC and UD, which are chosen for the whole worker, this channel is chosen per peer when
// its address is known (Worker::set_address): both workers on the same node, both with a
// segment. A peer pair then uses it for all its traffic, both ways (matching order).
#pragma once

#include "transport/channel/channel.h"
#include "transport/worker.h"

namespace rdmx::transport {

struct ShmChannel {
  static rendezvous::PostResult post(Worker& w, Peer& peer, eager::SendPool& pool,
                                     protocol::MsgHeader& h, const void* body,
                                     std::size_t body_length, const void* payload,
                                     std::size_t length);  // shm_send.cc
  static bool stream_full(const Peer& p) noexcept { return p.shm.tx.full(); }
};

}  // namespace rdmx::transport
