// Liveness of quiet peers, and the reporting of dead ones.
//
// Sends find a dead peer by themselves (RC watchdog, UD retransmission timeout: send.cc). A
// worker that only waits for a peer (a posted receive, a probe loop) sends it nothing, and would
// wait for ever. So while requests are active, or a probe found nothing since the last look, the
// watchdog (every kWatchdogPeriodUs from progress: no clock read or other work per message)
// compares each connected peer's mark -- messages received in order, RC send completions, UD
// pongs -- with the last one. A peer whose mark has not moved for T / kLiveProbeDiv
// (T = peer_timeout_ms) is probed:
//   RC: a signalled zero-length RDMA write (post_rc_flush), consuming nothing at the peer. Its
//       adapter answers it even while the process computes or sleeps; the RC watchdog fails the
//       peer if it has not completed within T (rxe on 6.1 never reports retry exhaustion for a
//       killed peer). One probe per idle peer every T / kLiveProbeDiv while something waits.
//   UD: a kConnect{connect_op::kPing} over the control QP, repeated every T / kLiveProbeDiv; the
//   peer's
//       progress answers connect_op::kPong. Unanswered for kUdPingBoundFactor x T (and at least
//       kLiveProbeDiv pings, so that a pause of our own does not count): dead. A live UD peer
//       must call progress at least once in that time while someone waits on it (60 s by
//       default): more generous than UD's send timeout (T without an ack).
// A peer found dead (fail_peer with dead = true) fails the receives that name it and is reported
// once through the peer-failure callback, at the end of the progress call that found it
// (run_completions), before the callbacks of the requests it failed; never from inside a post
// call, and in MULTI mode with no lock held.
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <utility>

#include "transport/worker.h"

namespace rdmx::transport {

void Worker::run_watchdogs(std::uint64_t now) {
  next_watchdog_us_ = now + kWatchdogPeriodUs;
  run_liveness(now);
  check_port(now);
  if (ud_qps_in_error_ != 0) [[unlikely]] {
    recover_ud_qps();
  }
  if (!ud_mode_) {
    run_rc_watchdog(now);
  }
}

void Worker::run_liveness(std::uint64_t now) {
  const bool probed = probe_waiting_.exchange(false, std::memory_order_relaxed);
  const bool waiting = active_head_ != nullptr || probed;
  const std::uint64_t timeout_us = std::uint64_t{config_.peer_timeout_ms} * 1000;
  const std::uint64_t quiet_us = timeout_us / kLiveProbeDiv;
  for (auto& owned : peers_) {
    Peer& p = *owned;
    if (p.state != PeerState::kConnected || !p.rx) {
      continue;
    }
    if (p.shm.on()) {
      // On this node: the process is there or it is not (a live one that does not progress is
      // only slow, as for any shared-memory transport).
      if (waiting && p.shm.segment != nullptr && kill(static_cast<pid_t>(p.address.pid), 0) != 0 &&
          errno == ESRCH) {
        fail_peer(p, RDMX_ERR_UNREACHABLE, "its process is gone (node-local peer)");
      }
      continue;
    }
    // Monotonic parts (the Seq wraps; a wrap to the same value only costs one probe).
    const std::uint64_t mark = p.rx->expected() + p.rc.completions + p.pongs;
    if (!waiting || mark != p.live_mark || p.live_since_us == 0) {
      p.live_mark = mark;
      p.live_since_us = now;
      p.ping_first_us = 0;
      p.pings = 0;
      continue;
    }
    if (now - p.live_since_us < quiet_us) {
      continue;
    }
    if (!ud_mode_) {
      // What is in flight is watched by the RC watchdog already; an idle peer gets the probe.
      if (p.rc.sq[0].outstanding() == 0 && p.rc.sq[1].outstanding() == 0) {
        (void)post_rc_flush(p, 0);
      }
      continue;
    }
    if (p.ping_first_us != 0 && p.pings >= kLiveProbeDiv &&
        now - p.ping_first_us >= kUdPingBoundFactor * timeout_us) {
      fail_peer(p, RDMX_ERR_UNREACHABLE,
                "no answer to liveness pings within 2 x peer_timeout_ms (a UD peer must call "
                "progress while others wait for it)");
      continue;
    }
    if ((p.ping_first_us == 0 || now - p.ping_last_us >= quiet_us) &&
        send_wqp_ctrl(p, connect_op::kPing, 0, 0)) {
      if (p.ping_first_us == 0) {
        p.ping_first_us = now;
      }
      p.ping_last_us = now;
      ++p.pings;
    }
  }
}

void Worker::on_ping(Peer& peer, std::uint8_t op) {
  if (op == connect_op::kPing) {
    (void)send_wqp_ctrl(peer, connect_op::kPong, 0, 0);  // a lost pong: the next ping asks again
  } else {
    ++peer.pongs;  // moves the peer's liveness mark
  }
}

template <class Pick>
std::size_t Worker::fail_posted_recvs_if(Pick fails, std::uint64_t source_uid, int code) {
  // Failure path only: a walk over the active requests.
  std::size_t failed = 0;
  Request* r = active_head_;
  while (r != nullptr) {
    Request* next = r->active_next;  // complete() unlinks r
    if (r->type == ReqType::kRecv && r->state == ReqState::kActive && r->recv.posted() &&
        fails(r->recv.spec) && matcher_.cancel(r->recv)) {
      r->status.source = source_uid;
      r->status.length = 0;
      complete(r, code);
      ++failed;
    }
    r = next;
  }
  return failed;
}

std::size_t Worker::fail_posted_recvs(const Peer* peer, int code) {
  if (peer == nullptr) {
    return fail_posted_recvs_if([](const protocol::RecvSpec&) { return true; }, RDMX_ANY_SOURCE,
                                code);
  }
  const std::uint32_t index = peer->index;
  return fail_posted_recvs_if(
      [index](const protocol::RecvSpec& spec) { return spec.source == index; }, peer->uid, code);
}

std::size_t Worker::fail_any_source_recvs(std::uint64_t tag, std::uint64_t mask, int code) {
  return fail_posted_recvs_if(
      [tag, mask](const protocol::RecvSpec& spec) {
        return spec.source == protocol::kAnySource && ((spec.tag ^ tag) & mask) == 0;
      },
      RDMX_ANY_SOURCE, code);
}

void Worker::notify_peer_failures(const Completions& c) {
  if (c.failure_cb == nullptr) {
    return;
  }
  for (const std::uint64_t uid : c.failed_uids) {
    c.failure_cb(uid, c.failure_arg);
  }
}

}  // namespace rdmx::transport
