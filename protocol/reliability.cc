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

void SendWindow::on_timeout(std::uint64_t now_us) noexcept {
  rto_us_ = rto_us_ > config_.rto_max_us / 2 ? config_.rto_max_us : rto_us_ * 2;
  deadline_us_ = now_us + rto_us_;
  karn_from_ = next_;  // everything in flight is resent: its acks are ambiguous
}

AckPolicy::AckPolicy(const AckPolicyConfig& config) : config_(checked(config)) {}

}  // namespace rdmx::protocol
