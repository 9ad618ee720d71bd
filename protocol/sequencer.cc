#include "protocol/sequencer.h"

#include <bit>
#include <cassert>
#include <stdexcept>

namespace rdmx::protocol {
namespace {

std::size_t checked_window(std::size_t window) {
  // Setup-time misuse: throwing here is the project's convention (errors at setup, codes on the
  // live path).
  if (window == 0 || window > kMaxSeqWindow || !std::has_single_bit(window)) {
    throw std::invalid_argument("Sequencer window must be a power of two in [1, 32768]");
  }
  return window;
}

}  // namespace

Sequencer::Sequencer(std::size_t window, Seq first)
    : ring_(checked_window(window)), mask_(window - 1), expected_(first) {}

Arrival Sequencer::on_arrival(Seq seq, std::uint64_t cookie) noexcept {
  const std::int32_t ahead = seq_diff(seq, expected_);
  if (ahead < 0) {
    return Arrival::kDuplicate;
  }
  if (static_cast<std::size_t>(ahead) >= ring_.size()) {
    return Arrival::kOutOfWindow;
  }
  // Within the window each Seq has its own slot, so a full slot means this very Seq is held.
  Slot& slot = ring_[index(seq)];
  if (slot.full) {
    return Arrival::kDuplicate;
  }
  if (ahead == 0) {
    expected_ = seq_add(expected_, 1);
    return Arrival::kDeliver;
  }
  slot.cookie = cookie;
  slot.full = true;
  ++held_;
  return Arrival::kHeld;
}

std::optional<std::uint64_t> Sequencer::pop_ready() noexcept {
  if (held_ == 0) {
    return std::nullopt;
  }
  Slot& slot = ring_[index(expected_)];
  if (!slot.full) {
    return std::nullopt;
  }
  slot.full = false;
  --held_;
  expected_ = seq_add(expected_, 1);
  return slot.cookie;
}

}  // namespace rdmx::protocol
