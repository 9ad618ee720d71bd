// The shared-memory channel (shm_channel.h): the segment's set-up and teardown, the choice and
// attachment of node-local peers, posting into a peer's ring, and the rendezvous engine's writes
// and reads as cross-memory-attach copies. Polling our rings is in recv.cc (poll_shm), beside
// the delivery it inlines.
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "transport/channel/shm_channel.h"
#include "transport/worker.h"

namespace rdmx::transport {

// --- set-up and teardown -----------------------------------------------------------------------

void Worker::create_segment() {
  if (!res_.shm) {
    return;
  }
  node_id_ = config_.node_id != 0 ? config_.node_id : shm::node_identity();
  // A slot takes the largest message a peer sends us: header, body, and a payload no larger than
  // our large receive class (the eager limit, a batch and a copy-path fragment all fit in it).
  const shm::Geometry g{.rings = res_.shm_rings,
                        .slots = res_.shm_slots,
                        .slot_size = shm::slot_size_for(protocol::kHeaderSize +
                                                        protocol::kMaxBodySize + res_.large_buf)};
  auto seg = std::make_unique<shm::Segment>();
  std::string why;
  if (!seg->create(g, static_cast<std::uint32_t>(getpid()), instance_, config_.shm_local_peers,
                   &why)) {
    // Not fatal: this worker reaches every peer through the device (its address says so).
    std::fprintf(stderr, "rdmx: no shared memory for node-local peers: %s\n", why.c_str());
    return;
  }
  if (config_.verbose >= 1) {
    std::fprintf(stderr,
                 "rdmx: shared memory for node-local peers: %u rings of %u slots of %u bytes "
                 "(/dev/shm%s, node %016llx)\n",
                 g.rings, g.slots, g.slot_size,
                 shm::segment_name(static_cast<std::uint32_t>(getpid()), instance_).c_str(),
                 static_cast<unsigned long long>(node_id_));
  }
  shm_rx_.reserve(g.rings);
  shm_done_.reserve(64);
  shm_ = std::move(seg);
}

void Worker::close_segment() noexcept {
  shm_done_.clear();
  shm_rx_.clear();
  shm_gone_.clear();
  shm_.reset();  // unmapped, and its name removed if no peer did
}

// --- peers -------------------------------------------------------------------------------------

bool Worker::wants_shm(const WorkerAddress& a) const noexcept {
  return shm_ != nullptr && (a.caps & protocol::kCapShm) != 0 && a.node_id == node_id_;
}

int Worker::attach_shm(Peer& peer, const WorkerAddress& a) {
  ShmPeer& s = peer.shm;
  std::string why;
  if (a.uid == uid_ && a.instance == instance_) {
    // Ourselves: a ring of our own segment; the rendezvous copies are memcpy.
    const std::uint32_t ring = shm_->claim(uid_, &why);
    if (ring != shm::Segment::kNoRing) {
      s.tx = shm_->producer(ring);
      s.cma = true;
    }
  } else {
    auto seg = std::make_unique<shm::Segment>();
    if (seg->attach(a.pid, a.instance, uid_, &why)) {
      s.tx = seg->producer(seg->ring());
      s.cma = res_.shm_cma && seg->cma_works(static_cast<pid_t>(a.pid));
      s.segment = std::move(seg);
    }
  }
  if (!s.tx.valid()) {
    std::fprintf(stderr,
                 "rdmx: cannot reach node-local peer %016llx (pid %u) through shared memory: %s\n",
                 static_cast<unsigned long long>(a.uid), a.pid, why.c_str());
    return RDMX_ERR_UNREACHABLE;
  }
  if (config_.verbose >= 1) {
    std::fprintf(
        stderr, "rdmx: %016llx: peer %016llx (pid %u) is on this node: shared memory, %s\n",
        static_cast<unsigned long long>(uid_), static_cast<unsigned long long>(a.uid), a.pid,
        s.cma           ? "rendezvous by cross-memory attach"
        : !res_.shm_cma ? "rendezvous copied through the ring (shm_cma=0)"
                        : "rendezvous copied through the ring (the kernel refuses "
                          "process_vm_readv to it: ptrace scope or seccomp)");
  }
  return RDMX_OK;
}

// --- posting -----------------------------------------------------------------------------------

rendezvous::PostResult ShmChannel::post(Worker&, Peer& peer, eager::SendPool&,
                                        protocol::MsgHeader& h, const void* body,
                                        std::size_t body_length, const void* payload,
                                        std::size_t length) {
  shm::Producer& tx = peer.shm.tx;
  if (peer.state == PeerState::kFailed) [[unlikely]] {
    return rendezvous::PostResult::kFailed;
  }
  if (tx.full()) [[unlikely]] {
    return rendezvous::PostResult::kNoResource;  // the peer's progress gives slots back
  }
  if (protocol::kHeaderSize + body_length + length > tx.max_message()) [[unlikely]] {
    std::fprintf(stderr, "rdmx: a %zu-byte message does not fit the shared-memory slot of %zu\n",
                 protocol::kHeaderSize + body_length + length, tx.max_message());
    return rendezvous::PostResult::kFailed;
  }
  h.seq = peer.shm.next_seq;
  peer.shm.next_seq = protocol::seq_add(peer.shm.next_seq, 1);
  std::byte header[protocol::kHeaderSize];
  protocol::store_wire(header, h);
  tx.push(header, sizeof(header), body, body_length, payload, length);
  ++peer.shm.sends;
  return rendezvous::PostResult::kPosted;
}

// --- rendezvous: single copies by cross-memory attach -------------------------------------------

namespace {

// `length` bytes between our `local` and the peer's `remote`: process_vm_writev (write) or
// process_vm_readv; memcpy for ourselves (pid 0). The kernel copies page by page and may stop
// short (the peer unmapped or died): only a whole copy counts. 0, or the errno.
int cma_copy(pid_t pid, void* local, std::uint64_t remote, std::size_t length, bool write) {
  if (pid == 0) {
    void* r = reinterpret_cast<void*>(remote);
    std::memcpy(write ? r : local, write ? local : r, length);
    return 0;
  }
  std::size_t done = 0;
  while (done < length) {
    iovec l{static_cast<std::byte*>(local) + done, length - done};
    iovec r{reinterpret_cast<void*>(remote + done), length - done};
    const ssize_t n =
        write ? process_vm_writev(pid, &l, 1, &r, 1, 0) : process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (n <= 0) {
      const int e = n == 0 ? EFAULT : errno;
      if (e != ESRCH) {  // a peer that is gone is reported once, by fail_peer
        std::fprintf(stderr, "rdmx: cross-memory %s of %zu bytes with pid %d failed: %s\n",
                     write ? "write" : "read", length - done, pid, std::strerror(e));
      }
      return e;
    }
    done += static_cast<std::size_t>(n);
  }
  return 0;
}

pid_t cma_pid(const Peer& p) {
  return p.shm.segment != nullptr ? static_cast<pid_t>(p.address.pid) : 0;
}

}  // namespace

rendezvous::PostResult Worker::shm_write(Peer& p, const rendezvous::WriteRequest& w) {
  if (p.state == PeerState::kFailed) {
    return rendezvous::PostResult::kFailed;
  }
  // The immediate goes through the ring after the bytes: make sure it has room before copying.
  if (w.with_imm && p.shm.tx.full()) {
    return rendezvous::PostResult::kNoResource;
  }
  if (w.length != 0) {
    const int e = cma_copy(cma_pid(p), const_cast<void*>(w.local_addr), w.remote_addr, w.length,
                           /*write=*/true);
    if (e != 0) {
      return shm_copy_failed(p, e);
    }
  }
  stat_cma_bytes_ += w.length;
  if (w.with_imm && post_message(p, protocol::MsgKind::kRndvImm, 0, w.imm, nullptr, 0) !=
                        rendezvous::PostResult::kPosted) {
    return rendezvous::PostResult::kFailed;
  }
  shm_done_.push_back({.token = w.token, .read = false});
  return rendezvous::PostResult::kPosted;
}

rendezvous::PostResult Worker::shm_read(Peer& p, const rendezvous::ReadRequest& r) {
  if (p.state == PeerState::kFailed || !p.shm.cma) {  // start_rndv_recv asks for no reads then
    return rendezvous::PostResult::kFailed;
  }
  if (r.length != 0) {
    const int e = cma_copy(cma_pid(p), r.local_addr, r.remote_addr, r.length, /*write=*/false);
    if (e != 0) {
      return shm_copy_failed(p, e);
    }
  }
  stat_cma_bytes_ += r.length;
  shm_done_.push_back({.token = r.token, .read = true});
  return rendezvous::PostResult::kPosted;
}

rendezvous::PostResult Worker::shm_copy_failed(Peer& p, int error) {
  if (error != ESRCH) {
    return rendezvous::PostResult::kFailed;  // the transfer fails (the peer's memory is gone)
  }
  // The peer's process is gone: the peer fails (its transfers with RDMX_ERR_UNREACHABLE, as for
  // any dead peer) from the next progress call, not from inside the engine's hook; until then
  // the engine retries and meets the same.
  if (std::find(shm_gone_.begin(), shm_gone_.end(), &p) == shm_gone_.end()) {
    shm_gone_.push_back(&p);
  }
  return rendezvous::PostResult::kNoResource;
}

int Worker::run_shm_done() {
  for (Peer* p : shm_gone_) {
    fail_peer(*p, RDMX_ERR_UNREACHABLE, "its process is gone (node-local peer)");
  }
  shm_gone_.clear();
  // A completion may post the transfer's next copy, which lands here too: by index, by value.
  std::size_t i = 0;
  for (; i < shm_done_.size(); ++i) {
    const ShmDone d = shm_done_[i];
    if (d.read) {
      rndv_->on_read_completion(d.token, true);
    } else {
      rndv_->on_write_completion(d.token, true);
    }
  }
  shm_done_.clear();
  return static_cast<int>(i);
}

}  // namespace rdmx::transport
