// UD reliability: what to retransmit, when to ack, when to give up on a peer. Pure logic: the
// caller passes the time (microseconds from any monotonic clock) and does the posting.
//
// Choices (compare anchors.md):
// - Go-back-N, as UCX UD and eRPC do: one retransmission timer per peer, on expiry every unacked
//   message is resent in order. The receiver's Sequencer holds out-of-order arrivals, so the
//   resent copies it already has come back as kDuplicate and cost only a re-ack; what was lost
//   fills the gap. No SACK bits fit in the 32-byte header and losses on a lossless fabric are
//   rare, so selective repeat is not worth its state.
// - No fast retransmit on duplicate acks: a peer has one UD QP per size class and the two
//   reorder freely, so duplicate acks are normal and would trigger spurious resends.
// - RTO: RFC 6298's estimator (SRTT + 4 RTTVAR from one sample per advancing ack, none from
//   a Seq that may have been resent: Karn), never below rto_min (5 ms here, eRPC's figure; the
//   transport passes RDMX_UD_RTO_US), doubled on every expiry without progress, capped (1 s).
//   Fabric RTTs are microseconds, so on a quiet machine the RTO stays at rto_min; it grows when
//   acks come late (a loaded host, a receiver busy in long RDMA writes), where a fixed RTO
//   resent hundreds of messages that were not lost.
// - Fixed send window (256) instead of UCX's AIMD 2..1025: congestion control can later shrink
//   the window that can_send() checks without changing the interface.
// - Peer dead: no ack progress for peer_timeout (30 s, UCX's figure) while messages are unacked.
// - Receiver: cumulative ack only (the Sequencer's), piggy-backed on every outgoing message to
//   the peer; a stand-alone kAck when ack_every messages are unacked or the oldest unacked one
//   has waited ack_delay, and at once on a duplicate (our ack was lost) or kFlagAckRequest.
//
// Not thread-safe: one peer's state is used by one thread at a time.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "protocol/serial.h"

namespace rdmx::protocol {

inline constexpr std::uint64_t kNoDeadline = std::numeric_limits<std::uint64_t>::max();

struct SendWindowConfig {
  std::size_t window = 256;                    // max unacked messages, <= the peer's reorder window
  std::uint64_t rto_min_us = 5'000;            // first and smallest retransmission timeout
  std::uint64_t rto_max_us = 1'000'000;        // backoff cap
  std::uint64_t peer_timeout_us = 30'000'000;  // no progress for this long: peer is dead
};

enum class AckResult : std::uint8_t {
  kAdvanced,   // freed at least one message
  kDuplicate,  // acks exactly what was already acked: nothing to do
  kStale,      // older than what was already acked (reordered): ignored
  kInvalid,    // acks a Seq never sent: ignored (a confused or stale peer)
};

// Sender side, one per peer. The `slot` stored with each message is the caller's handle for the
// send buffer (e.g. a bounce-buffer index); it must stay untouched until on_ack frees it, because
// a retransmission re-posts it. A retransmission may re-post a buffer whose previous post has
// not completed yet: the caller recycles a slot only when it is both acked and its sends have
// completed.
class SendWindow {
 public:
  // Throws std::invalid_argument on a bad config (window 0 or > kMaxSeqWindow, zero timeouts).
  explicit SendWindow(const SendWindowConfig& config, Seq first = 0);

  bool can_send() const noexcept { return in_flight_ < config_.window; }
  // The Seq to put in the next message's header.
  Seq next_seq() const noexcept { return next_; }
  // Oldest unacked Seq (== next_seq() when nothing is in flight).
  Seq oldest_unacked() const noexcept { return static_cast<Seq>(next_ - in_flight_); }
  std::size_t in_flight() const noexcept { return in_flight_; }

  // Records that message `seq` (== next_seq()) was posted from `slot`. False, and nothing
  // recorded, if seq is not next_seq() or the window is full.
  [[nodiscard]] bool on_send(Seq seq, std::uint32_t slot, std::uint64_t now_us) noexcept;

  // A cumulative ack (every Seq <= ack received). Calls freed(Seq, slot) for each newly acked
  // message, oldest first.
  template <class F>
  AckResult on_ack(Seq ack, std::uint64_t now_us, F&& freed) {
    const AckResult result = classify_ack(ack);
    if (result != AckResult::kAdvanced) {
      return result;
    }
    if (seq_ge(ack, karn_from_)) {
      on_rtt_sample(now_us - sent_us_[index(ack)]);
    }
    // classify_ack() proved ack is within the in-flight range, so this stops at ack.
    while (seq_le(oldest_unacked(), ack)) {
      const Seq seq = oldest_unacked();
      --in_flight_;
      freed(seq, ring_[index(seq)]);
    }
    if (seq_lt(karn_from_, oldest_unacked())) {
      karn_from_ = oldest_unacked();  // every resent Seq is acked: keep it near the window
    }
    on_progress(now_us);
    return result;
  }

  // Due when the timer has expired: calls resend(Seq, slot) -> bool for every unacked message,
  // oldest first, stopping early if resend returns false (send queue full: the rest go out on
  // the next expiry, the oldest first). Doubles the RTO (up to the cap) and restarts the timer.
  // Returns how many were resent. Check peer_dead() first: this never gives up on its own.
  template <class F>
  std::size_t due_for_retransmit(std::uint64_t now_us, F&& resend) {
    if (in_flight_ == 0 || now_us < deadline_us_) {
      return 0;
    }
    std::size_t sent = 0;
    for (Seq seq = oldest_unacked(); sent < in_flight_; seq = seq_add(seq, 1)) {
      if (!resend(seq, ring_[index(seq)])) {
        break;
      }
      ++sent;
    }
    retransmissions_ += sent;
    on_timeout(now_us);
    return sent;
  }

  // When due_for_retransmit() next has work (kNoDeadline with nothing in flight).
  std::uint64_t deadline_us() const noexcept {
    return in_flight_ == 0 ? kNoDeadline : deadline_us_;
  }
  std::uint64_t rto_us() const noexcept { return rto_us_; }
  // The smoothed round trip (0 before the first sample).
  std::uint64_t srtt_us() const noexcept { return srtt_us_; }

  // True once messages have been unacked with no progress for peer_timeout_us.
  bool peer_dead(std::uint64_t now_us) const noexcept {
    return in_flight_ > 0 && now_us >= progress_us_ &&
           now_us - progress_us_ >= config_.peer_timeout_us;
  }

  std::uint64_t retransmissions() const noexcept { return retransmissions_; }

  // Teardown: calls fn(Seq, slot) for every unacked message and empties the window.
  template <class F>
  void drain(F&& fn) {
    while (in_flight_ > 0) {
      const Seq seq = oldest_unacked();
      --in_flight_;
      fn(seq, ring_[index(seq)]);
    }
  }

 private:
  std::size_t index(Seq seq) const noexcept { return seq & mask_; }
  AckResult classify_ack(Seq ack) const noexcept;
  void on_progress(std::uint64_t now_us) noexcept;
  void on_timeout(std::uint64_t now_us) noexcept;
  void on_rtt_sample(std::uint64_t rtt_us) noexcept;

  SendWindowConfig config_;
  std::vector<std::uint32_t> ring_;     // slot of each in-flight Seq, indexed by Seq & mask_
  std::vector<std::uint64_t> sent_us_;  // when each in-flight Seq was first sent
  std::size_t mask_;
  std::size_t in_flight_ = 0;
  Seq next_;
  Seq karn_from_;  // Seqs before it may have been resent: their acks are no RTT sample
  std::uint64_t srtt_us_ = 0;
  std::uint64_t rttvar_us_ = 0;
  std::uint64_t rto_base_us_;  // the estimator's RTO, before backoff
  std::uint64_t rto_us_;
  std::uint64_t deadline_us_ = kNoDeadline;
  std::uint64_t progress_us_ = 0;  // last ack progress, or when the window became non-empty
  std::uint64_t retransmissions_ = 0;
};

struct AckPolicyConfig {
  std::size_t ack_every = 32;        // unacked messages that force a stand-alone ack
  std::uint64_t ack_delay_us = 200;  // longest a received message waits for its ack; well under
                                     // the sender's RTO so delayed acks never cause resends
};

// Receiver side, one per peer: decides when a stand-alone kAck must go out. The ack value
// itself is the peer's Sequencer::cumulative_ack().
class AckPolicy {
 public:
  // Throws std::invalid_argument if ack_every is 0.
  explicit AckPolicy(const AckPolicyConfig& config = {});

  // A new sequenced message was accepted (Arrival::kDeliver or kHeld).
  void on_received(std::uint64_t now_us) noexcept;
  // A kDuplicate or kOutOfWindow arrival: the sender is retransmitting, so our ack was lost or
  // is late; ack at once.
  void on_duplicate() noexcept { urgent_ = true; }
  // The message had kFlagAckRequest.
  void on_ack_requested() noexcept { urgent_ = true; }
  // Any ack left for this peer, piggy-backed or stand-alone.
  void on_ack_sent() noexcept;

  // A stand-alone ack should be sent now (nothing to piggy-back it on).
  bool ack_due(std::uint64_t now_us) const noexcept {
    return urgent_ || unacked_ >= config_.ack_every ||
           (unacked_ > 0 && now_us >= first_unacked_us_ + config_.ack_delay_us);
  }
  // When ack_due() turns true without further arrivals (kNoDeadline if never, 0 if now).
  std::uint64_t deadline_us() const noexcept;
  std::size_t unacked() const noexcept { return unacked_; }

 private:
  AckPolicyConfig config_;
  std::size_t unacked_ = 0;
  std::uint64_t first_unacked_us_ = 0;
  bool urgent_ = false;
};

// Inline: every UD message sent or received passes through these.

inline bool SendWindow::on_send(Seq seq, std::uint32_t slot, std::uint64_t now_us) noexcept {
  if (seq != next_ || !can_send()) {
    return false;
  }
  ring_[index(seq)] = slot;
  sent_us_[index(seq)] = now_us;
  next_ = seq_add(next_, 1);
  if (in_flight_++ == 0) {
    // The timer and the dead-peer clock run only while something is unacked.
    deadline_us_ = now_us + rto_us_;
    progress_us_ = now_us;
  }
  return true;
}

inline AckResult SendWindow::classify_ack(Seq ack) const noexcept {
  // Distance from the last acked Seq; 1..in_flight_ frees that many.
  const std::int32_t d = seq_diff(ack, static_cast<Seq>(oldest_unacked() - 1));
  if (d == 0) {
    return AckResult::kDuplicate;
  }
  if (d < 0) {
    return AckResult::kStale;
  }
  if (static_cast<std::size_t>(d) > in_flight_) {
    return AckResult::kInvalid;
  }
  return AckResult::kAdvanced;
}

inline void SendWindow::on_progress(std::uint64_t now_us) noexcept {
  rto_us_ = rto_base_us_;
  progress_us_ = now_us;
  deadline_us_ = now_us + rto_us_;
}

inline void SendWindow::on_rtt_sample(std::uint64_t rtt_us) noexcept {
  // RFC 6298 section 2, with its gains (1/8, 1/4) and K = 4, in whole microseconds.
  if (srtt_us_ == 0) {
    srtt_us_ = std::max<std::uint64_t>(rtt_us, 1);
    rttvar_us_ = rtt_us / 2;
  } else {
    const std::uint64_t err = srtt_us_ > rtt_us ? srtt_us_ - rtt_us : rtt_us - srtt_us_;
    rttvar_us_ = (3 * rttvar_us_ + err) / 4;
    srtt_us_ = std::max<std::uint64_t>((7 * srtt_us_ + rtt_us) / 8, 1);
  }
  rto_base_us_ = std::clamp(srtt_us_ + std::max<std::uint64_t>(4 * rttvar_us_, 1),
                            config_.rto_min_us, config_.rto_max_us);
}

inline void AckPolicy::on_received(std::uint64_t now_us) noexcept {
  if (unacked_++ == 0) {
    first_unacked_us_ = now_us;
  }
}

inline void AckPolicy::on_ack_sent() noexcept {
  unacked_ = 0;
  urgent_ = false;
}

inline std::uint64_t AckPolicy::deadline_us() const noexcept {
  if (urgent_ || unacked_ >= config_.ack_every) {
    return 0;
  }
  if (unacked_ == 0) {
    return kNoDeadline;
  }
  return first_unacked_us_ + config_.ack_delay_us;
}

}  // namespace rdmx::protocol
