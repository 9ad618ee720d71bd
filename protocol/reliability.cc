#include "protocol/reliability.h"

#include <algorithm>
#include <bit>
#include <stdexcept>

namespace rdmx::protocol {
namespace {

const SendWindowConfig& checked(const SendWindowConfig& config) {
  if (config.window == 0 || config.window > kMaxSeqWindow) {
    throw std::invalid_argument("SendWindow window must be in [1, 32768]");
  }
  if (config.rto_min_us == 0 || config.rto_max_us < config.rto_min_us ||
      config.peer_timeout_us == 0) {
    throw std::invalid_argument("SendWindow timeouts must be non-zero and rto_max >= rto_min");
  }
  return config;
}

const AckPolicyConfig& checked(const AckPolicyConfig& config) {
  if (config.ack_every == 0) {
    throw std::invalid_argument("AckPolicy ack_every must be at least 1");
  }
  return config;
}

}  // namespace

SendWindow::SendWindow(const SendWindowConfig& config, Seq first)
    : config_(checked(config)),
      ring_(std::bit_ceil(config.window)),
      sent_us_(ring_.size()),
      mask_(ring_.size() - 1),
      next_(first),
      karn_from_(first),
      rto_base_us_(config.rto_min_us),
      rto_us_(config.rto_min_us) {}

bool SendWindow::on_send(Seq seq, std::uint32_t slot, std::uint64_t now_us) noexcept {
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

AckResult SendWindow::classify_ack(Seq ack) const noexcept {
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

void SendWindow::on_progress(std::uint64_t now_us) noexcept {
  rto_us_ = rto_base_us_;
  progress_us_ = now_us;
  deadline_us_ = now_us + rto_us_;
}

void SendWindow::on_timeout(std::uint64_t now_us) noexcept {
  rto_us_ = rto_us_ > config_.rto_max_us / 2 ? config_.rto_max_us : rto_us_ * 2;
  deadline_us_ = now_us + rto_us_;
  karn_from_ = next_;  // everything in flight is resent: its acks are ambiguous
}

void SendWindow::on_rtt_sample(std::uint64_t rtt_us) noexcept {
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

AckPolicy::AckPolicy(const AckPolicyConfig& config) : config_(checked(config)) {}

void AckPolicy::on_received(std::uint64_t now_us) noexcept {
  if (unacked_++ == 0) {
    first_unacked_us_ = now_us;
  }
}

void AckPolicy::on_ack_sent() noexcept {
  unacked_ = 0;
  urgent_ = false;
}

std::uint64_t AckPolicy::deadline_us() const noexcept {
  if (urgent_ || unacked_ >= config_.ack_every) {
    return 0;
  }
  if (unacked_ == 0) {
    return kNoDeadline;
  }
  return first_unacked_us_ + config_.ack_delay_us;
}

}  // namespace rdmx::protocol
