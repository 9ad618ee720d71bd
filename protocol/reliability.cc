#include "protocol/reliability.h"

#include <bit>
#include <stdexcept>

namespace rdmx::protocol {
namespace {

const SendWindowConfig& checked(const SendWindowConfig& config) {
  if (config.window == 0 || config.window > kMaxSeqWindow) {
    throw std::invalid_argument("SendWindow window must be in [1, 32768]");
  }
  if (config.rto_initial_us == 0 || config.rto_max_us < config.rto_initial_us ||
      config.peer_timeout_us == 0) {
    throw std::invalid_argument("SendWindow timeouts must be non-zero and rto_max >= rto_initial");
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
      mask_(ring_.size() - 1),
      next_(first),
      rto_us_(config.rto_initial_us) {}

bool SendWindow::on_send(Seq seq, std::uint32_t slot, std::uint64_t now_us) noexcept {
  if (seq != next_ || !can_send()) {
    return false;
  }
  ring_[index(seq)] = slot;
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
  rto_us_ = config_.rto_initial_us;
  progress_us_ = now_us;
  deadline_us_ = now_us + rto_us_;
}

void SendWindow::on_timeout(std::uint64_t now_us) noexcept {
  rto_us_ = rto_us_ > config_.rto_max_us / 2 ? config_.rto_max_us : rto_us_ * 2;
  deadline_us_ = now_us + rto_us_;
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
