#include "protocol/reliability.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

namespace rdmx::protocol {
namespace {

using Pairs = std::vector<std::pair<Seq, std::uint32_t>>;

SendWindowConfig small_config() {
  SendWindowConfig c;
  c.window = 4;
  c.rto_min_us = 100;
  c.rto_max_us = 1000;
  c.peer_timeout_us = 10'000;
  return c;
}

// Sends n messages with slot = 10 + seq offset, all at `now`.
void send_n(SendWindow& w, int n, std::uint64_t now) {
  for (int i = 0; i < n; ++i) {
    const Seq seq = w.next_seq();
    ASSERT_TRUE(w.on_send(seq, 10u + seq, now));
  }
}

Pairs ack(SendWindow& w, Seq a, std::uint64_t now, AckResult* result = nullptr) {
  Pairs freed;
  const AckResult r =
      w.on_ack(a, now, [&](Seq s, std::uint32_t slot) { freed.emplace_back(s, slot); });
  if (result != nullptr) {
    *result = r;
  }
  return freed;
}

Pairs retransmit(SendWindow& w, std::uint64_t now) {
  Pairs resent;
  w.due_for_retransmit(now, [&](Seq s, std::uint32_t slot) {
    resent.emplace_back(s, slot);
    return true;
  });
  return resent;
}

TEST(SendWindow, RejectsBadConfig) {
  SendWindowConfig c = small_config();
  c.window = 0;
  EXPECT_THROW(SendWindow{c}, std::invalid_argument);
  c.window = kMaxSeqWindow + 1;
  EXPECT_THROW(SendWindow{c}, std::invalid_argument);
  c = small_config();
  c.rto_max_us = c.rto_min_us - 1;
  EXPECT_THROW(SendWindow{c}, std::invalid_argument);
  c = small_config();
  c.rto_min_us = 0;
  EXPECT_THROW(SendWindow{c}, std::invalid_argument);
  EXPECT_NO_THROW(SendWindow{SendWindowConfig{}});
}

TEST(SendWindow, WindowLimitsSends) {
  SendWindow w(small_config());
  EXPECT_EQ(w.deadline_us(), kNoDeadline);
  send_n(w, 4, 0);
  EXPECT_FALSE(w.can_send());
  EXPECT_FALSE(w.on_send(w.next_seq(), 99, 0)) << "window full";
  EXPECT_EQ(w.in_flight(), 4u);
  EXPECT_EQ(w.oldest_unacked(), 0);
  EXPECT_EQ(w.next_seq(), 4);
}

TEST(SendWindow, OnSendRejectsWrongSeq) {
  SendWindow w(small_config(), 50);
  EXPECT_FALSE(w.on_send(51, 1, 0));
  EXPECT_EQ(w.in_flight(), 0u);
  EXPECT_TRUE(w.on_send(50, 1, 0));
}

TEST(SendWindow, WindowNeedNotBePowerOfTwo) {
  SendWindowConfig c = small_config();
  c.window = 3;
  SendWindow w(c);
  send_n(w, 3, 0);
  EXPECT_FALSE(w.can_send());
  EXPECT_EQ(ack(w, 2, 1), (Pairs{{0, 10}, {1, 11}, {2, 12}}));
}

TEST(SendWindow, CumulativeAckFreesOldestFirst) {
  SendWindow w(small_config());
  send_n(w, 4, 0);
  AckResult r{};
  EXPECT_EQ(ack(w, 1, 5, &r), (Pairs{{0, 10}, {1, 11}}));
  EXPECT_EQ(r, AckResult::kAdvanced);
  EXPECT_EQ(w.in_flight(), 2u);
  EXPECT_TRUE(w.can_send());
  EXPECT_EQ(ack(w, 3, 6, &r), (Pairs{{2, 12}, {3, 13}}));
  EXPECT_EQ(w.in_flight(), 0u);
  EXPECT_EQ(w.deadline_us(), kNoDeadline);
}

TEST(SendWindow, DuplicateStaleAndInvalidAcksFreeNothing) {
  SendWindow w(small_config());
  send_n(w, 4, 0);
  ASSERT_EQ(ack(w, 1, 1).size(), 2u);
  AckResult r{};
  EXPECT_TRUE(ack(w, 1, 2, &r).empty());
  EXPECT_EQ(r, AckResult::kDuplicate);
  EXPECT_TRUE(ack(w, 0, 2, &r).empty());
  EXPECT_EQ(r, AckResult::kStale);
  EXPECT_TRUE(ack(w, 4, 2, &r).empty()) << "Seq 4 was never sent";
  EXPECT_EQ(r, AckResult::kInvalid);
  EXPECT_EQ(w.in_flight(), 2u);
  // Repeated duplicates must not trigger any retransmission either.
  for (int i = 0; i < 10; ++i) {
    ack(w, 1, 3);
  }
  EXPECT_TRUE(retransmit(w, 3).empty());
}

TEST(SendWindow, AckBeforeAnySendIsDuplicate) {
  SendWindow w(small_config(), 10);
  AckResult r{};
  EXPECT_TRUE(ack(w, 9, 0, &r).empty());
  EXPECT_EQ(r, AckResult::kDuplicate);
  EXPECT_TRUE(ack(w, 10, 0, &r).empty());
  EXPECT_EQ(r, AckResult::kInvalid);
}

TEST(SendWindow, GoBackNResendsEveryUnackedInOrder) {
  SendWindow w(small_config());
  send_n(w, 4, 0);
  ASSERT_EQ(ack(w, 0, 10).size(), 1u);
  EXPECT_TRUE(retransmit(w, 109).empty()) << "deadline is ack time + RTO";
  EXPECT_EQ(retransmit(w, 110), (Pairs{{1, 11}, {2, 12}, {3, 13}}));
  EXPECT_EQ(w.retransmissions(), 3u);
  EXPECT_EQ(w.in_flight(), 3u) << "a retransmission frees nothing";
}

TEST(SendWindow, BackoffDoublesUpToCapAndResetsOnProgress) {
  SendWindow w(small_config());
  send_n(w, 2, 0);
  std::uint64_t now = 0;
  std::vector<std::uint64_t> rtos;
  for (int i = 0; i < 6; ++i) {
    now = w.deadline_us();
    ASSERT_EQ(retransmit(w, now).size(), 2u);
    rtos.push_back(w.rto_us());
  }
  EXPECT_EQ(rtos, (std::vector<std::uint64_t>{200, 400, 800, 1000, 1000, 1000}));
  EXPECT_EQ(w.deadline_us(), now + 1000);
  ASSERT_EQ(ack(w, 0, now + 1).size(), 1u);
  EXPECT_EQ(w.rto_us(), 100u);
  EXPECT_EQ(w.deadline_us(), now + 1 + 100);
}

TEST(SendWindow, RtoStaysAtItsFloorWhileAcksAreFast) {
  SendWindow w(small_config());
  for (std::uint64_t t = 0; t < 10'000; t += 1000) {
    send_n(w, 1, t);
    ASSERT_EQ(ack(w, static_cast<Seq>(w.next_seq() - 1), t + 10).size(), 1u);
  }
  EXPECT_EQ(w.srtt_us(), 10u);
  EXPECT_EQ(w.rto_us(), 100u) << "SRTT + 4 RTTVAR is below rto_min";
}

TEST(SendWindow, RtoFollowsSlowAcks) {
  SendWindowConfig c = small_config();
  c.rto_max_us = 100'000;
  SendWindow w(c);
  send_n(w, 1, 0);
  ASSERT_EQ(ack(w, 0, 5000).size(), 1u);
  EXPECT_EQ(w.srtt_us(), 5000u);
  EXPECT_EQ(w.rto_us(), 15'000u) << "first sample: SRTT R, RTTVAR R/2, RTO SRTT + 4 RTTVAR";
  send_n(w, 1, 6000);
  EXPECT_EQ(w.deadline_us(), 21'000u);
  // A steady 5 ms round trip: the variance decays and the RTO closes in on the RTT.
  for (std::uint64_t t = 6000; t < 200'000; t += 6000) {
    ASSERT_EQ(ack(w, static_cast<Seq>(w.next_seq() - 1), t + 5000).size(), 1u);
    send_n(w, 1, t + 6000);
  }
  EXPECT_EQ(w.srtt_us(), 5000u);
  EXPECT_LT(w.rto_us(), 5200u);
  EXPECT_GE(w.rto_us(), 5001u);
}

TEST(SendWindow, RtoCappedAtMax) {
  SendWindow w(small_config());
  send_n(w, 1, 0);
  ASSERT_EQ(ack(w, 0, 50'000).size(), 1u);
  EXPECT_EQ(w.rto_us(), 1000u);
}

TEST(SendWindow, KarnNoSampleFromResentMessages) {
  SendWindowConfig c = small_config();
  c.rto_max_us = 100'000;
  SendWindow w(c);
  send_n(w, 2, 0);
  ASSERT_EQ(retransmit(w, 100).size(), 2u);
  // Is this ack for the first copy or the resent one? Unknown: no sample.
  ASSERT_EQ(ack(w, 1, 30'000).size(), 2u);
  EXPECT_EQ(w.srtt_us(), 0u);
  EXPECT_EQ(w.rto_us(), 100u) << "progress ends the backoff";
  // A message first sent after the timeout gives a sample again.
  send_n(w, 1, 40'000);
  ASSERT_EQ(ack(w, 2, 40'300).size(), 1u);
  EXPECT_EQ(w.srtt_us(), 300u);
}

TEST(SendWindow, TimerStartsWhenWindowBecomesNonEmpty) {
  SendWindow w(small_config());
  send_n(w, 1, 1000);
  EXPECT_EQ(w.deadline_us(), 1100u);
  send_n(w, 1, 1050);
  EXPECT_EQ(w.deadline_us(), 1100u) << "the timer covers the oldest message";
  ASSERT_EQ(ack(w, 1, 1060).size(), 2u);
  send_n(w, 1, 5000);
  EXPECT_EQ(w.deadline_us(), 5100u);
}

TEST(SendWindow, RetransmitStopsWhenSendQueueIsFull) {
  SendWindow w(small_config());
  send_n(w, 4, 0);
  Pairs resent;
  const std::size_t n = w.due_for_retransmit(100, [&](Seq s, std::uint32_t slot) {
    if (resent.size() == 2) {
      return false;
    }
    resent.emplace_back(s, slot);
    return true;
  });
  EXPECT_EQ(n, 2u);
  EXPECT_EQ(resent, (Pairs{{0, 10}, {1, 11}}));
  // The next expiry starts again from the oldest.
  EXPECT_EQ(retransmit(w, w.deadline_us()).front(), (std::pair<Seq, std::uint32_t>{0, 10}));
}

TEST(SendWindow, PeerDeadAfterTimeoutWithoutProgress) {
  SendWindow w(small_config());
  EXPECT_FALSE(w.peer_dead(1'000'000)) << "nothing unacked: never dead";
  send_n(w, 2, 1000);
  std::uint64_t now = 1000;
  while (!w.peer_dead(now)) {
    now = w.deadline_us();
    retransmit(w, now);
    ASSERT_LT(now, 1000u + 20'000u);
  }
  EXPECT_GE(now, 1000u + 10'000u);
  EXPECT_FALSE(w.peer_dead(1000 + 9'999));
  EXPECT_TRUE(w.peer_dead(1000 + 10'000));
}

TEST(SendWindow, ProgressPostponesPeerDeath) {
  SendWindow w(small_config());
  send_n(w, 2, 0);
  ASSERT_EQ(ack(w, 0, 9'000).size(), 1u);
  EXPECT_FALSE(w.peer_dead(10'000));
  EXPECT_FALSE(w.peer_dead(18'999));
  EXPECT_TRUE(w.peer_dead(19'000));
  // Duplicate acks are not progress.
  ack(w, 0, 18'000);
  EXPECT_TRUE(w.peer_dead(19'000));
}

TEST(SendWindow, WrapsAround) {
  SendWindow w(small_config(), 65534);
  send_n(w, 4, 0);
  EXPECT_EQ(w.next_seq(), 2);
  EXPECT_EQ(ack(w, 65535, 1), (Pairs{{65534, 10u + 65534}, {65535, 10u + 65535}}));
  AckResult r{};
  EXPECT_TRUE(ack(w, 65534, 1, &r).empty());
  EXPECT_EQ(r, AckResult::kStale);
  EXPECT_EQ(retransmit(w, 101), (Pairs{{0, 10}, {1, 11}}));
  EXPECT_EQ(ack(w, 1, 2), (Pairs{{0, 10}, {1, 11}}));
  EXPECT_EQ(w.in_flight(), 0u);
}

TEST(SendWindow, DrainFreesEverything) {
  SendWindow w(small_config());
  send_n(w, 3, 0);
  Pairs drained;
  w.drain([&](Seq s, std::uint32_t slot) { drained.emplace_back(s, slot); });
  EXPECT_EQ(drained, (Pairs{{0, 10}, {1, 11}, {2, 12}}));
  EXPECT_EQ(w.in_flight(), 0u);
  EXPECT_FALSE(w.peer_dead(1'000'000));
}

AckPolicyConfig policy_config() {
  AckPolicyConfig c;
  c.ack_every = 4;
  c.ack_delay_us = 50;
  return c;
}

TEST(AckPolicy, NothingDueWhenIdle) {
  AckPolicy p(policy_config());
  EXPECT_FALSE(p.ack_due(1'000'000));
  EXPECT_EQ(p.deadline_us(), kNoDeadline);
  EXPECT_THROW(AckPolicy(AckPolicyConfig{0, 10}), std::invalid_argument);
}

TEST(AckPolicy, AckAfterNMessages) {
  AckPolicy p(policy_config());
  for (int i = 0; i < 3; ++i) {
    p.on_received(10);
    EXPECT_FALSE(p.ack_due(10));
  }
  p.on_received(10);
  EXPECT_TRUE(p.ack_due(10));
  EXPECT_EQ(p.deadline_us(), 0u);
  p.on_ack_sent();
  EXPECT_FALSE(p.ack_due(10));
  EXPECT_EQ(p.unacked(), 0u);
}

TEST(AckPolicy, AckAfterDelayFromFirstUnacked) {
  AckPolicy p(policy_config());
  p.on_received(100);
  p.on_received(140);
  EXPECT_EQ(p.deadline_us(), 150u) << "the oldest unacked message sets the deadline";
  EXPECT_FALSE(p.ack_due(149));
  EXPECT_TRUE(p.ack_due(150));
}

TEST(AckPolicy, PiggyBackedAckResetsTheTimer) {
  AckPolicy p(policy_config());
  p.on_received(100);
  p.on_ack_sent();  // went out on a data message
  EXPECT_FALSE(p.ack_due(1000));
  p.on_received(1000);
  EXPECT_EQ(p.deadline_us(), 1050u);
}

TEST(AckPolicy, DuplicateOrRequestMeansAckNow) {
  AckPolicy p(policy_config());
  p.on_duplicate();
  EXPECT_TRUE(p.ack_due(0));
  EXPECT_EQ(p.deadline_us(), 0u);
  p.on_ack_sent();
  EXPECT_FALSE(p.ack_due(0));
  p.on_ack_requested();
  EXPECT_TRUE(p.ack_due(0));
}

}  // namespace
}  // namespace rdmx::protocol
