// MPI tag matching: the posted-receive queue and the unexpected-message queue.
//
// Semantics (MPI-3.1 section 3.5, "order"):
// - an arriving message matches the OLDEST posted receive it satisfies;
// - a newly posted receive matches the OLDEST unexpected message it satisfies;
// - a receive names a source (or kAnySource) and a 64-bit tag with a 64-bit mask: every bit set
//   in the mask must be equal in the message tag, bits clear in the mask are wildcards. The MTL
//   packs context id and MPI tag into the 64 bits, so MPI_ANY_TAG is a mask that clears only the
//   MPI-tag bits.
// Messages must be fed in per-source order (the sequencer's job): matching is only as ordered as
// its input.
//
// Memory: nothing is allocated after construction. The caller embeds (or derives from)
// PostedRecv in its receive request and UnexpectedMsg in its unexpected-message descriptor and
// keeps them alive while queued; the matcher only links them. Removal is O(1).
//
// Speed: both queues are binned by source (source mod bins) so a receive from a specific source
// scans only that source's entries. Wildcard-source receives sit in their own queue; arrival
// order across bins is kept by a second, global list of unexpected messages and by a post
// counter on receives. Matching with tag wildcards is still a linear scan of the bin.
//
// Not thread-safe: one matcher is used by one thread at a time (the caller serialises).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "protocol/intrusive_list.h"

namespace rdmx::protocol {

// Source ids are the senders' job-wide endpoint ids (MsgHeader::src_ep); the MTL translates a
// communicator rank to one before posting.
inline constexpr std::uint32_t kAnySource = 0xffffffff;
inline constexpr std::uint64_t kMatchAllBits = ~std::uint64_t{0};

struct RecvSpec {
  std::uint32_t source = kAnySource;
  std::uint64_t tag = 0;
  std::uint64_t mask = kMatchAllBits;  // bit set = must match
};

constexpr bool tag_matches(std::uint64_t recv_tag, std::uint64_t mask,
                           std::uint64_t msg_tag) noexcept {
  return ((recv_tag ^ msg_tag) & mask) == 0;
}

constexpr bool spec_matches(const RecvSpec& spec, std::uint32_t msg_source,
                            std::uint64_t msg_tag) noexcept {
  return (spec.source == kAnySource || spec.source == msg_source) &&
         tag_matches(spec.tag, spec.mask, msg_tag);
}

// A posted receive. Set `spec` before posting and leave it alone while posted().
class PostedRecv {
 public:
  RecvSpec spec;

  bool posted() const noexcept { return posted_; }

 private:
  friend class TagMatcher;
  detail::Links<PostedRecv> links_;
  std::uint64_t order_ = 0;  // post counter: orders wildcard vs per-source receives
  bool posted_ = false;
};

// A message that arrived before its receive. Set source and tag before queueing.
class UnexpectedMsg {
 public:
  std::uint32_t source = 0;  // never kAnySource
  std::uint64_t tag = 0;

  bool queued() const noexcept { return queued_; }

 private:
  friend class TagMatcher;
  detail::Links<UnexpectedMsg> bin_links_;  // same-bin messages, arrival order
  detail::Links<UnexpectedMsg> all_links_;  // every message, arrival order (wildcard receives)
  bool queued_ = false;
};

class TagMatcher {
 public:
  // source_bins is rounded up to a power of two; the number of peers is a good choice (dense
  // endpoint ids then never share a bin). The only allocation the matcher makes.
  explicit TagMatcher(std::size_t source_bins = 64);

  TagMatcher(const TagMatcher&) = delete;
  TagMatcher& operator=(const TagMatcher&) = delete;

  // An arriving tagged message. Returns the oldest matching posted receive, already removed, or
  // nullptr: then the caller keeps the message and calls add_unexpected().
  [[nodiscard]] PostedRecv* match_message(std::uint32_t source, std::uint64_t tag) noexcept;

  // Queues a message that match_message() found no receive for. Precondition: !msg.queued().
  void add_unexpected(UnexpectedMsg& msg) noexcept;

  // Posts a receive. Returns the oldest matching unexpected message, already removed (the
  // receive is then NOT posted), or nullptr: the receive is now posted.
  // Precondition: !recv.posted().
  [[nodiscard]] UnexpectedMsg* post_receive(PostedRecv& recv) noexcept;
  // Posts a receive that the caller has just seen probe() match nothing: post_receive without
  // searching the unexpected queue a second time. Precondition: !recv.posted(), and no
  // unexpected message added since that probe.
  void post_unmatched(PostedRecv& recv) noexcept;

  // MPI_Iprobe: the message a receive with `spec` would match now, left in the queue.
  [[nodiscard]] UnexpectedMsg* probe(const RecvSpec& spec) const noexcept;

  // MPI_Improbe: as probe(), but removes the message; the pointer is the MPI_Message handle that
  // MPI_Imrecv later consumes. No later receive can match it.
  [[nodiscard]] UnexpectedMsg* mprobe(const RecvSpec& spec) noexcept;

  // MPI_Cancel of a receive: true if it was still posted (now removed), false if it has already
  // been matched and must complete normally.
  bool cancel(PostedRecv& recv) noexcept;

  // Drops a queued unexpected message (e.g. its peer failed). True if it was queued.
  bool remove_unexpected(UnexpectedMsg& msg) noexcept;

  std::size_t posted_count() const noexcept { return posted_count_; }
  std::size_t unexpected_count() const noexcept { return unexpected_count_; }
  std::size_t bin_count() const noexcept { return unexpected_bins_.size(); }

 private:
  using PostedList = detail::List<PostedRecv, &PostedRecv::links_>;
  using BinList = detail::List<UnexpectedMsg, &UnexpectedMsg::bin_links_>;
  using AllList = detail::List<UnexpectedMsg, &UnexpectedMsg::all_links_>;

  std::size_t bin_of(std::uint32_t source) const noexcept { return source & bin_mask_; }
  void unlink_unexpected(UnexpectedMsg& msg) noexcept;
  void unlink_posted(PostedRecv& recv) noexcept;

  std::uint32_t bin_mask_;
  std::vector<PostedList> posted_bins_;  // receives naming a source
  PostedList posted_any_;                // kAnySource receives
  std::vector<BinList> unexpected_bins_;
  AllList unexpected_all_;
  std::uint64_t next_order_ = 0;
  std::size_t posted_count_ = 0;
  std::size_t unexpected_count_ = 0;
};

}  // namespace rdmx::protocol
