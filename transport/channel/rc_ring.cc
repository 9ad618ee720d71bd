// RC eager rings: small messages RDMA-written into the receiver's memory (protocol/ring.h). The
// offer and its acceptance live here; the polling is in recv.cc (poll_ring), where the receive
// path's delivery, forced inline, is.
//
//   receiver                                            sender
//   ---------                                           ------
//   kRingOfferAfter messages in order from the peer:
//   register a ring, kRingOffer{addr, rkey, geometry} ─> tx_ring: from now on, a message that
//                                                        fits one inline write and finds a free
//                                                        slot is written into slot `head`
//   progress polls the next slot of every ring      <── RDMA_WRITE (inline, unsignalled, QP 0)
//   (one load while empty); a whole message whose
//   Seq is the one expected is delivered as if it
//   came through the SRQ, then the slot is cleared
//   ring_ack = messages taken, on every RC message  ─> tx_ring.taken: the slots are free again
//   (or a kAck once half the ring waits for it)
//
// Ordering: ring messages share the peer's sequence numbers with its SRQ messages. A ring is read
// strictly in order, and only the message whose Seq is next is taken: one whose predecessor is
// still on a QP waits in its slot (no copy, no hold). An SRQ message that arrives early drains
// the peer's ring first (RcChannel::admit), since what it follows may be placed there already.
//
// Flow control: the sender never has more than `slots` messages unacknowledged in the ring (it
// falls back to the SRQ path, never waits for a slot), and ring messages also take RC credits,
// so the SRQ credit scheme stays as it was. Memory: one slab of ring_peers rings, registered at
// the first offer (a constant, whatever the number of peers); rings are given on first come and
// live as long as the worker (the slab's MR goes after the QPs, before the PD).
//
// Sleeping (rdmx_worker_arm, wakeup.cc): a ring write makes no completion, so a worker whose
// peers may still write into its rings cannot sleep on its event fd. Its first arming takes
// them back, and no ring is offered after (a worker that sleeps gains little from them):
//
//   kRingWithdraw                                   ─> tx_ring cleared: every later message
//                                                      goes by the SRQs
//   rx_ring_open = false once this is delivered     <── kRingReleased (sequenced: every ring
//   in order; until then arming sleeps on a timer      message of this peer came before it)
//   that looks at the rings (kRingWithdrawPollUs)
#include <algorithm>
#include <cstdio>
#include <new>
#include <utility>

#include "transport/worker.h"
#include "verbs/error.h"

namespace rdmx::transport {

void Worker::offer_ring(Peer& p) {
  if (ring_peers_.size() >= res_.ring_peers || p.rc.rx_ring || p.state != PeerState::kConnected ||
      rings_withdrawn_) {
    return;
  }
  // The peer writes a message and its footer inline: the slot is no larger than its inline size.
  const std::uint32_t slot_size = std::min(res_.ring_slot_size, p.address.max_inline & ~7u);
  if (!protocol::ring_geometry_ok(res_.ring_slots, slot_size)) {
    return;  // a device without (enough) inline data: the SRQs serve it
  }
  if (!ring_slab_) {
    try {
      ring_slab_ = std::make_unique<eager::RingSlab>(*pd_, res_.ring_peers, res_.ring_slots,
                                                     res_.ring_slot_size);
    } catch (const verbs::Error& e) {
      // A fallback, not an error (as for a rendezvous buffer that cannot be registered): said
      // when verbose.
      if (config_.verbose >= 1) {
        std::fprintf(stderr,
                     "rdmx: no eager rings (%s): small messages keep using the SRQs; raise "
                     "`ulimit -l` or set RDMX_RING_PEERS=0\n",
                     e.what());
      }
      res_.ring_peers = 0;  // asked once
      return;
    } catch (const std::bad_alloc&) {
      res_.ring_peers = 0;
      return;
    }
  }
  const auto index = static_cast<std::uint32_t>(ring_peers_.size());
  p.rc.rx_ring.emplace(ring_slab_->ring(index), res_.ring_slots, slot_size);
  ring_peers_.push_back(&p);
  p.rc.rx_ring_open = true;
  ++open_rings_;
  if (config_.verbose >= 2) {
    std::fprintf(stderr, "rdmx: eager ring %u (%u x %u B) for %016llx\n", index, res_.ring_slots,
                 slot_size, static_cast<unsigned long long>(p.uid));
  }
  p.rc.ring_offer_due = true;
  (void)post_ring_messages(p);
}

void Worker::on_ring_offer(Peer& p, const protocol::RingBody& b) {
  const std::uint32_t max_image = std::min(b.slot_size, max_inline_);
  if (ud_mode_ || !protocol::ring_geometry_ok(b.slots, b.slot_size) ||
      max_image < protocol::kRingMinSlot) {
    if (config_.verbose >= 1) {
      std::fprintf(stderr, "rdmx: ignored a ring offer from %016llx (%u slots of %u bytes)\n",
                   static_cast<unsigned long long>(p.uid), b.slots, b.slot_size);
    }
    return;
  }
  p.rc.tx_ring =
      TxRing{.addr = b.addr,
             .rkey = b.rkey,
             .slots = b.slots,
             .slot_size = b.slot_size,
             .max_length = static_cast<std::uint32_t>(protocol::ring_max_length(max_image)),
             .next_end = b.addr + b.slot_size,
             .last_end = b.addr + std::uint64_t{b.slots} * b.slot_size,
             .sent = 0,
             .taken = 0};
}

void Worker::withdraw_rings() {
  rings_withdrawn_ = true;
  if (config_.verbose >= 2) {
    std::fprintf(stderr,
                 "rdmx: taking back %u eager ring(s): this worker sleeps on its event fd, and a "
                 "ring write makes no completion\n",
                 open_rings_);
  }
  for (Peer* p : ring_peers_) {
    if (!p->rc.rx_ring_open) {
      continue;
    }
    if (p->rc.ring_offer_due) {
      p->rc.ring_offer_due = false;  // never offered: nothing to take back
      close_rx_ring(*p);
      continue;
    }
    p->rc.ring_withdraw_due = true;
    (void)post_ring_messages(*p);
  }
}

void Worker::on_ring_withdraw(Peer& p) {
  if (ud_mode_) {
    ++stat_dropped_malformed_;  // UD workers give no rings
    return;
  }
  p.rc.tx_ring = TxRing{};  // nothing fits a ring of no slots: the SRQs carry what follows
  p.rc.ring_release_due = true;
  (void)post_ring_messages(p);
}

// Delivered in order: everything the peer wrote into the ring came before.
void Worker::on_ring_released(Peer& p) {
  if (!rings_withdrawn_ || !p.rc.rx_ring_open) {
    ++stat_dropped_malformed_;  // unasked: an open ring stays open
    return;
  }
  close_rx_ring(p);
  if (open_rings_ == 0 && config_.verbose >= 2) {
    std::fprintf(stderr,
                 "rdmx: every eager ring taken back: this worker sleeps without the ring timer\n");
  }
}

void Worker::close_rx_ring(Peer& p) noexcept {
  if (p.rc.rx_ring_open) {
    p.rc.rx_ring_open = false;
    --open_rings_;
  }
}

bool Worker::post_ring_messages(Peer& p) {
  if (p.rc.ring_offer_due) {
    const eager::RecvRing& r = *p.rc.rx_ring;
    const protocol::RingBody body{.addr = r.addr(),
                                  .rkey = ring_slab_->rkey(),
                                  .slots = r.slots(),
                                  .slot_size = r.slot_size(),
                                  .reserved = 0};
    if (post_message(p, protocol::MsgKind::kRingOffer, 0, 0, &body, sizeof(body), nullptr, 0) ==
        PostResult::kNoResource) {
      list_for_flush(p);
      return false;
    }
    p.rc.ring_offer_due = false;  // posted, or lost with the connection
  }
  for (auto [due, kind] : {std::pair{&p.rc.ring_withdraw_due, protocol::MsgKind::kRingWithdraw},
                           std::pair{&p.rc.ring_release_due, protocol::MsgKind::kRingReleased}}) {
    if (!*due) {
      continue;
    }
    if (post_message(p, kind, 0, 0, nullptr, 0, nullptr, 0) == PostResult::kNoResource) {
      list_for_flush(p);
      return false;
    }
    *due = false;  // posted, or lost with the connection
  }
  return true;
}

}  // namespace rdmx::transport
