#include "protocol/tag_match.h"

#include <bit>
#include <cassert>

namespace rdmx::protocol {
namespace {

// Bins beyond this only cost memory: endpoint ids are 32-bit, and a million peers is far more
// than one process talks to.
constexpr std::size_t kMaxBins = std::size_t{1} << 20;

std::size_t round_bins(std::size_t requested) {
  if (requested <= 1) {
    return 1;
  }
  return std::bit_ceil(requested < kMaxBins ? requested : kMaxBins);
}

}  // namespace

TagMatcher::TagMatcher(std::size_t source_bins)
    : bin_mask_(static_cast<std::uint32_t>(round_bins(source_bins) - 1)),
      posted_bins_(round_bins(source_bins)),
      unexpected_bins_(round_bins(source_bins)) {}

PostedRecv* TagMatcher::match_message(std::uint32_t source, std::uint64_t tag) noexcept {
  assert(source != kAnySource);
  PostedRecv* best = nullptr;
  for (PostedRecv* r = posted_bins_[bin_of(source)].front(); r != nullptr;
       r = PostedList::next(r)) {
    if (r->spec.source == source && tag_matches(r->spec.tag, r->spec.mask, tag)) {
      best = r;
      break;
    }
  }
  // A wildcard receive wins only if it was posted before the per-source candidate; both lists
  // are in post order, so the scan stops at the candidate's post counter.
  for (PostedRecv* r = posted_any_.front(); r != nullptr; r = PostedList::next(r)) {
    if (best != nullptr && r->order_ > best->order_) {
      break;
    }
    if (tag_matches(r->spec.tag, r->spec.mask, tag)) {
      best = r;
      break;
    }
  }
  if (best != nullptr) {
    unlink_posted(*best);
  }
  return best;
}

void TagMatcher::add_unexpected(UnexpectedMsg& msg) noexcept {
  assert(!msg.queued_ && msg.source != kAnySource);
  unexpected_bins_[bin_of(msg.source)].push_back(&msg);
  unexpected_all_.push_back(&msg);
  msg.queued_ = true;
  ++unexpected_count_;
}

UnexpectedMsg* TagMatcher::post_receive(PostedRecv& recv) noexcept {
  assert(!recv.posted_);
  if (UnexpectedMsg* msg = mprobe(recv.spec); msg != nullptr) {
    return msg;
  }
  post_unmatched(recv);
  return nullptr;
}

void TagMatcher::post_unmatched(PostedRecv& recv) noexcept {
  assert(!recv.posted_);
  assert(probe(recv.spec) == nullptr);
  recv.order_ = next_order_++;
  if (recv.spec.source == kAnySource) {
    posted_any_.push_back(&recv);
  } else {
    posted_bins_[bin_of(recv.spec.source)].push_back(&recv);
  }
  recv.posted_ = true;
  ++posted_count_;
}

UnexpectedMsg* TagMatcher::probe(const RecvSpec& spec) const noexcept {
  if (spec.source == kAnySource) {
    for (UnexpectedMsg* m = unexpected_all_.front(); m != nullptr; m = AllList::next(m)) {
      if (tag_matches(spec.tag, spec.mask, m->tag)) {
        return m;
      }
    }
    return nullptr;
  }
  for (UnexpectedMsg* m = unexpected_bins_[bin_of(spec.source)].front(); m != nullptr;
       m = BinList::next(m)) {
    if (m->source == spec.source && tag_matches(spec.tag, spec.mask, m->tag)) {
      return m;
    }
  }
  return nullptr;
}

UnexpectedMsg* TagMatcher::mprobe(const RecvSpec& spec) noexcept {
  UnexpectedMsg* msg = probe(spec);
  if (msg != nullptr) {
    unlink_unexpected(*msg);
  }
  return msg;
}

bool TagMatcher::cancel(PostedRecv& recv) noexcept {
  if (!recv.posted_) {
    return false;
  }
  unlink_posted(recv);
  return true;
}

bool TagMatcher::remove_unexpected(UnexpectedMsg& msg) noexcept {
  if (!msg.queued_) {
    return false;
  }
  unlink_unexpected(msg);
  return true;
}

void TagMatcher::unlink_unexpected(UnexpectedMsg& msg) noexcept {
  unexpected_bins_[bin_of(msg.source)].remove(&msg);
  unexpected_all_.remove(&msg);
  msg.queued_ = false;
  --unexpected_count_;
}

void TagMatcher::unlink_posted(PostedRecv& recv) noexcept {
  if (recv.spec.source == kAnySource) {
    posted_any_.remove(&recv);
  } else {
    posted_bins_[bin_of(recv.spec.source)].remove(&recv);
  }
  recv.posted_ = false;
  --posted_count_;
}

}  // namespace rdmx::protocol
