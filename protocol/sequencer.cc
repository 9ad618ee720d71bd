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

}  // namespace rdmx::protocol
