#include "protocol/tag_match.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <random>
#include <vector>

namespace rdmx::protocol {
namespace {

// Callers derive from the nodes to find their own object again; the tests do the same.
struct Recv : PostedRecv {
  int id = -1;
};
struct Msg : UnexpectedMsg {
  int id = -1;
};

Recv make_recv(int id, std::uint32_t source, std::uint64_t tag,
               std::uint64_t mask = kMatchAllBits) {
  Recv r;
  r.id = id;
  r.spec = RecvSpec{source, tag, mask};
  return r;
}

Msg make_msg(int id, std::uint32_t source, std::uint64_t tag) {
  Msg m;
  m.id = id;
  m.source = source;
  m.tag = tag;
  return m;
}

int id_of(PostedRecv* r) {
  return r == nullptr ? -1 : static_cast<Recv*>(r)->id;
}
int id_of(UnexpectedMsg* m) {
  return m == nullptr ? -1 : static_cast<Msg*>(m)->id;
}

TEST(TagMatch, MaskSemantics) {
  EXPECT_TRUE(tag_matches(0x12, kMatchAllBits, 0x12));
  EXPECT_FALSE(tag_matches(0x12, kMatchAllBits, 0x13));
  EXPECT_TRUE(tag_matches(0x12, ~std::uint64_t{1}, 0x13));  // bit 0 is a wildcard
  EXPECT_TRUE(tag_matches(0, 0, 0xffffffffffffffff));       // all wildcard
  EXPECT_FALSE(tag_matches(std::uint64_t{1} << 63, std::uint64_t{1} << 63, 0));
  EXPECT_TRUE(spec_matches(RecvSpec{kAnySource, 5, kMatchAllBits}, 77, 5));
  EXPECT_FALSE(spec_matches(RecvSpec{3, 5, kMatchAllBits}, 4, 5));
}

TEST(TagMatch, MessageMatchesPostedReceive) {
  TagMatcher m;
  Recv r = make_recv(1, 3, 42);
  EXPECT_EQ(m.post_receive(r), nullptr);
  EXPECT_TRUE(r.posted());
  EXPECT_EQ(m.posted_count(), 1u);
  EXPECT_EQ(m.match_message(3, 41), nullptr);  // wrong tag
  EXPECT_EQ(m.match_message(4, 42), nullptr);  // wrong source
  EXPECT_EQ(id_of(m.match_message(3, 42)), 1);
  EXPECT_FALSE(r.posted());
  EXPECT_EQ(m.posted_count(), 0u);
  EXPECT_EQ(m.match_message(3, 42), nullptr);  // consumed
}

TEST(TagMatch, ReceiveMatchesUnexpectedMessage) {
  TagMatcher m;
  Msg a = make_msg(1, 2, 7);
  m.add_unexpected(a);
  EXPECT_TRUE(a.queued());
  Recv wrong = make_recv(10, 2, 8);
  EXPECT_EQ(m.post_receive(wrong), nullptr);
  Recv right = make_recv(11, 2, 7);
  EXPECT_EQ(id_of(m.post_receive(right)), 1);
  EXPECT_FALSE(right.posted()) << "a receive that matched at post time is not queued";
  EXPECT_FALSE(a.queued());
  EXPECT_EQ(m.unexpected_count(), 0u);
  EXPECT_EQ(m.posted_count(), 1u);
}

TEST(TagMatch, ReceivePostedAfterAnEmptyProbeKeepsPostingOrder) {
  // post_unmatched (the shared-lock receive path: probe first, then post) takes its place in
  // the posting order beside post_receive's, specific and any-source alike.
  TagMatcher m;
  Msg other = make_msg(9, 1, 8);
  m.add_unexpected(other);  // in the queue, but matches neither receive
  Recv r1 = make_recv(1, 1, 5);
  Recv r2 = make_recv(2, kAnySource, 5);
  Recv r3 = make_recv(3, 1, 5);
  ASSERT_EQ(m.post_receive(r1), nullptr);
  ASSERT_EQ(m.probe(r2.spec), nullptr);
  m.post_unmatched(r2);
  ASSERT_EQ(m.probe(r3.spec), nullptr);
  m.post_unmatched(r3);
  EXPECT_TRUE(r2.posted());
  EXPECT_TRUE(r3.posted());
  EXPECT_EQ(m.posted_count(), 3u);
  EXPECT_EQ(id_of(m.match_message(1, 5)), 1);
  EXPECT_EQ(id_of(m.match_message(1, 5)), 2);
  EXPECT_EQ(id_of(m.match_message(1, 5)), 3);
  EXPECT_EQ(m.posted_count(), 0u);
  EXPECT_EQ(m.unexpected_count(), 1u);
}

TEST(TagMatch, MessageTakesOldestMatchingReceive) {
  TagMatcher m;
  Recv r1 = make_recv(1, 0, 5);
  Recv r2 = make_recv(2, 0, 5);
  Recv r3 = make_recv(3, 0, 5);
  ASSERT_EQ(m.post_receive(r1), nullptr);
  ASSERT_EQ(m.post_receive(r2), nullptr);
  ASSERT_EQ(m.post_receive(r3), nullptr);
  EXPECT_EQ(id_of(m.match_message(0, 5)), 1);
  EXPECT_EQ(id_of(m.match_message(0, 5)), 2);
  EXPECT_EQ(id_of(m.match_message(0, 5)), 3);
}

TEST(TagMatch, ReceiveTakesOldestMatchingMessage) {
  TagMatcher m;
  Msg a = make_msg(1, 0, 5);
  Msg b = make_msg(2, 0, 6);
  Msg c = make_msg(3, 0, 5);
  m.add_unexpected(a);
  m.add_unexpected(b);
  m.add_unexpected(c);
  Recv r1 = make_recv(10, 0, 5);
  Recv r2 = make_recv(11, 0, 5);
  EXPECT_EQ(id_of(m.post_receive(r1)), 1);
  EXPECT_EQ(id_of(m.post_receive(r2)), 3);
  EXPECT_EQ(m.unexpected_count(), 1u);
}

TEST(TagMatch, WildcardSourceReceiveOrderAgainstSpecificReceive) {
  TagMatcher m;
  Recv any = make_recv(1, kAnySource, 9);
  Recv specific = make_recv(2, 4, 9);
  ASSERT_EQ(m.post_receive(any), nullptr);
  ASSERT_EQ(m.post_receive(specific), nullptr);
  EXPECT_EQ(id_of(m.match_message(4, 9)), 1) << "the wildcard was posted first";
  EXPECT_EQ(id_of(m.match_message(4, 9)), 2);

  // And the other way round.
  Recv specific2 = make_recv(3, 4, 9);
  Recv any2 = make_recv(4, kAnySource, 9);
  ASSERT_EQ(m.post_receive(specific2), nullptr);
  ASSERT_EQ(m.post_receive(any2), nullptr);
  EXPECT_EQ(id_of(m.match_message(4, 9)), 3);
  EXPECT_EQ(id_of(m.match_message(7, 9)), 4);
}

TEST(TagMatch, WildcardSourceReceiveTakesOldestAcrossSources) {
  TagMatcher m(4);
  Msg a = make_msg(1, 3, 1);
  Msg b = make_msg(2, 1, 1);
  Msg c = make_msg(3, 2, 1);
  m.add_unexpected(a);
  m.add_unexpected(b);
  m.add_unexpected(c);
  Recv any = make_recv(10, kAnySource, 1);
  EXPECT_EQ(id_of(m.post_receive(any)), 1);
  Recv from2 = make_recv(11, 2, 1);
  EXPECT_EQ(id_of(m.post_receive(from2)), 3);
  Recv any2 = make_recv(12, kAnySource, 1);
  EXPECT_EQ(id_of(m.post_receive(any2)), 2);
}

TEST(TagMatch, SourcesSharingABinStayApart) {
  TagMatcher m(2);  // sources 1 and 3 share a bin
  Msg from1 = make_msg(1, 1, 0);
  m.add_unexpected(from1);
  Recv from3 = make_recv(10, 3, 0);
  EXPECT_EQ(m.post_receive(from3), nullptr);
  EXPECT_EQ(m.match_message(1, 0), nullptr) << "receive for source 3 must not take source 1";
  EXPECT_EQ(id_of(m.match_message(3, 0)), 10);
}

TEST(TagMatch, MaskWildcards) {
  TagMatcher m;
  // Upper 32 bits = context id, must match; lower 32 = MPI tag, wildcard (MPI_ANY_TAG).
  const std::uint64_t ctx_mask = 0xffffffff00000000;
  Recv any_tag = make_recv(1, 0, 0x0000000700000000, ctx_mask);
  ASSERT_EQ(m.post_receive(any_tag), nullptr);
  EXPECT_EQ(m.match_message(0, 0x0000000800000001), nullptr) << "other communicator";
  EXPECT_EQ(id_of(m.match_message(0, 0x00000007deadbeef)), 1);
}

TEST(TagMatch, ProbeDoesNotConsume) {
  TagMatcher m;
  Msg a = make_msg(1, 5, 50);
  m.add_unexpected(a);
  EXPECT_EQ(id_of(m.probe(RecvSpec{5, 50, kMatchAllBits})), 1);
  EXPECT_EQ(id_of(m.probe(RecvSpec{kAnySource, 0, 0})), 1);
  EXPECT_EQ(m.probe(RecvSpec{6, 50, kMatchAllBits}), nullptr);
  EXPECT_EQ(m.unexpected_count(), 1u);
  EXPECT_TRUE(a.queued());
  Recv r = make_recv(10, 5, 50);
  EXPECT_EQ(id_of(m.post_receive(r)), 1);
}

TEST(TagMatch, ProbeIgnoresPostedReceives) {
  TagMatcher m;
  Recv r = make_recv(1, 0, 0);
  ASSERT_EQ(m.post_receive(r), nullptr);
  EXPECT_EQ(m.probe(RecvSpec{0, 0, kMatchAllBits}), nullptr);
}

TEST(TagMatch, MprobeRemovesMessage) {
  TagMatcher m;
  Msg a = make_msg(1, 5, 50);
  Msg b = make_msg(2, 5, 50);
  m.add_unexpected(a);
  m.add_unexpected(b);
  UnexpectedMsg* handle = m.mprobe(RecvSpec{5, 50, kMatchAllBits});
  EXPECT_EQ(id_of(handle), 1);
  EXPECT_FALSE(a.queued());
  // A later receive cannot take the mprobed message; it gets the next one.
  Recv r = make_recv(10, 5, 50);
  EXPECT_EQ(id_of(m.post_receive(r)), 2);
  EXPECT_EQ(m.mprobe(RecvSpec{5, 50, kMatchAllBits}), nullptr);
}

TEST(TagMatch, CancelPostedReceive) {
  TagMatcher m;
  Recv r1 = make_recv(1, 0, 1);
  Recv r2 = make_recv(2, kAnySource, 1);
  ASSERT_EQ(m.post_receive(r1), nullptr);
  ASSERT_EQ(m.post_receive(r2), nullptr);
  EXPECT_TRUE(m.cancel(r1));
  EXPECT_FALSE(r1.posted());
  EXPECT_FALSE(m.cancel(r1)) << "second cancel is a no-op";
  EXPECT_EQ(id_of(m.match_message(0, 1)), 2);
  EXPECT_FALSE(m.cancel(r2)) << "a matched receive cannot be cancelled";
  EXPECT_EQ(m.posted_count(), 0u);
}

TEST(TagMatch, RemovedNodesCanBeReused) {
  TagMatcher m;
  Recv r = make_recv(1, 0, 1);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(m.post_receive(r), nullptr);
    ASSERT_EQ(id_of(m.match_message(0, 1)), 1);
  }
  Msg a = make_msg(2, 0, 1);
  for (int i = 0; i < 3; ++i) {
    m.add_unexpected(a);
    ASSERT_EQ(id_of(m.mprobe(RecvSpec{0, 1, kMatchAllBits})), 2);
  }
}

TEST(TagMatch, RemoveUnexpectedFromMiddle) {
  TagMatcher m;
  Msg a = make_msg(1, 0, 1);
  Msg b = make_msg(2, 0, 1);
  Msg c = make_msg(3, 0, 1);
  m.add_unexpected(a);
  m.add_unexpected(b);
  m.add_unexpected(c);
  EXPECT_TRUE(m.remove_unexpected(b));
  EXPECT_FALSE(m.remove_unexpected(b));
  Recv r1 = make_recv(10, kAnySource, 1);
  Recv r2 = make_recv(11, 0, 1);
  EXPECT_EQ(id_of(m.post_receive(r1)), 1);
  EXPECT_EQ(id_of(m.post_receive(r2)), 3);
  EXPECT_EQ(m.unexpected_count(), 0u);
}

TEST(TagMatch, BinCountRoundsUpToPowerOfTwo) {
  EXPECT_EQ(TagMatcher(0).bin_count(), 1u);
  EXPECT_EQ(TagMatcher(5).bin_count(), 8u);
  EXPECT_EQ(TagMatcher(64).bin_count(), 64u);
}

// The reference: the two queues as plain vectors in order, matched by linear search, exactly as
// the MPI standard words it.
class ReferenceMatcher {
 public:
  struct R {
    int id;
    RecvSpec spec;
  };
  struct M {
    int id;
    std::uint32_t source;
    std::uint64_t tag;
  };

  int match_message(std::uint32_t source, std::uint64_t tag) {
    for (auto it = posted_.begin(); it != posted_.end(); ++it) {
      if (spec_matches(it->spec, source, tag)) {
        const int id = it->id;
        posted_.erase(it);
        return id;
      }
    }
    unexpected_.push_back(M{next_msg_id_, source, tag});
    return -1;
  }
  int post_receive(int id, const RecvSpec& spec) {
    const int found = mprobe(spec);
    if (found < 0) {
      posted_.push_back(R{id, spec});
    }
    return found;
  }
  int probe(const RecvSpec& spec) const {
    for (const M& m : unexpected_) {
      if (spec_matches(spec, m.source, m.tag)) {
        return m.id;
      }
    }
    return -1;
  }
  int mprobe(const RecvSpec& spec) {
    for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
      if (spec_matches(spec, it->source, it->tag)) {
        const int id = it->id;
        unexpected_.erase(it);
        return id;
      }
    }
    return -1;
  }
  bool cancel(int id) {
    auto it = std::find_if(posted_.begin(), posted_.end(), [id](const R& r) { return r.id == id; });
    if (it == posted_.end()) {
      return false;
    }
    posted_.erase(it);
    return true;
  }
  void set_next_msg_id(int id) { next_msg_id_ = id; }
  std::size_t posted() const { return posted_.size(); }
  std::size_t unexpected() const { return unexpected_.size(); }

 private:
  std::deque<R> posted_;
  std::deque<M> unexpected_;
  int next_msg_id_ = 0;
};

class TagMatchRandom : public ::testing::TestWithParam<std::size_t> {};

TEST_P(TagMatchRandom, AgreesWithReferenceModel) {
  constexpr int kOps = 20000;
  constexpr std::uint32_t kSources = 5;
  std::mt19937 rng(static_cast<unsigned>(GetParam() * 7919 + 1));
  TagMatcher m(GetParam());
  ReferenceMatcher ref;
  // Fixed pools, as the transport would have: ids index them.
  std::vector<Recv> recvs(kOps);
  std::vector<Msg> msgs(kOps);
  std::vector<int> posted_ids;
  int next_recv = 0;
  int next_msg = 0;

  auto random_spec = [&] {
    RecvSpec s;
    s.source = rng() % 4 == 0 ? kAnySource : static_cast<std::uint32_t>(rng() % kSources);
    s.tag = rng() % 4;
    switch (rng() % 4) {
      case 0:
        s.mask = 0;  // any tag
        break;
      case 1:
        s.mask = ~std::uint64_t{1};  // bit 0 wildcard
        break;
      default:
        s.mask = kMatchAllBits;
    }
    return s;
  };

  for (int op = 0; op < kOps; ++op) {
    switch (rng() % 6) {
      case 0:
      case 1: {  // a message arrives
        const auto source = static_cast<std::uint32_t>(rng() % kSources);
        const std::uint64_t tag = rng() % 4;
        Msg& msg = msgs[next_msg];
        msg.id = next_msg;
        msg.source = source;
        msg.tag = tag;
        ref.set_next_msg_id(next_msg);
        ++next_msg;
        const int expected = ref.match_message(source, tag);
        PostedRecv* got = m.match_message(source, tag);
        ASSERT_EQ(id_of(got), expected) << "op " << op;
        if (got == nullptr) {
          m.add_unexpected(msg);
        } else {
          std::erase(posted_ids, expected);
        }
        break;
      }
      case 2:
      case 3: {  // a receive is posted
        Recv& r = recvs[next_recv];
        r.id = next_recv++;
        r.spec = random_spec();
        const int expected = ref.post_receive(r.id, r.spec);
        ASSERT_EQ(id_of(m.post_receive(r)), expected) << "op " << op;
        if (expected < 0) {
          posted_ids.push_back(r.id);
        }
        break;
      }
      case 4: {  // probe or mprobe
        const RecvSpec spec = random_spec();
        if (rng() % 2 == 0) {
          ASSERT_EQ(id_of(m.probe(spec)), ref.probe(spec)) << "op " << op;
        } else {
          ASSERT_EQ(id_of(m.mprobe(spec)), ref.mprobe(spec)) << "op " << op;
        }
        break;
      }
      case 5: {  // cancel a random receive, posted or not
        if (next_recv == 0) {
          break;
        }
        const int id = static_cast<int>(rng() % static_cast<unsigned>(next_recv));
        ASSERT_EQ(m.cancel(recvs[id]), ref.cancel(id)) << "op " << op;
        std::erase(posted_ids, id);
        break;
      }
    }
    ASSERT_EQ(m.posted_count(), ref.posted());
    ASSERT_EQ(m.unexpected_count(), ref.unexpected());
  }
  for (int id : posted_ids) {
    EXPECT_TRUE(recvs[id].posted());
  }
}

INSTANTIATE_TEST_SUITE_P(Bins, TagMatchRandom, ::testing::Values(1, 2, 64));

}  // namespace
}  // namespace rdmx::protocol
