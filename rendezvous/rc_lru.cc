#include "rendezvous/rc_lru.h"

namespace rdmx::rendezvous {

void RcLru::unlink(std::uint32_t peer) noexcept {
  Node& n = nodes_[peer];
  if (n.prev != kNil) {
    nodes_[n.prev].next = n.next;
  } else {
    head_ = n.next;
  }
  if (n.next != kNil) {
    nodes_[n.next].prev = n.prev;
  } else {
    tail_ = n.prev;
  }
  n.prev = n.next = kNil;
}

void RcLru::push_back(std::uint32_t peer) noexcept {
  Node& n = nodes_[peer];
  n.prev = tail_;
  n.next = kNil;
  if (tail_ != kNil) {
    nodes_[tail_].next = peer;
  } else {
    head_ = peer;
  }
  tail_ = peer;
}

void RcLru::insert(std::uint32_t peer) {
  if (peer >= nodes_.size()) {
    nodes_.resize(std::size_t{peer} + 1);
  }
  if (nodes_[peer].present) {
    touch(peer);
    return;
  }
  nodes_[peer].present = true;
  push_back(peer);
  ++size_;
}

void RcLru::remove(std::uint32_t peer) noexcept {
  if (!contains(peer)) {
    return;
  }
  unlink(peer);
  nodes_[peer].present = false;
  --size_;
}

void RcLru::touch(std::uint32_t peer) noexcept {
  if (!contains(peer) || tail_ == peer) {
    return;
  }
  unlink(peer);
  push_back(peer);
}

std::vector<std::uint32_t> RcLru::order() const {
  std::vector<std::uint32_t> out;
  for (std::uint32_t p = head_; p != kNil; p = nodes_[p].next) {
    out.push_back(p);
  }
  return out;
}

}  // namespace rdmx::rendezvous
