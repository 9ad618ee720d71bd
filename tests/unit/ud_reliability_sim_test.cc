// SendWindow + Sequencer + AckPolicy together over a simulated lossy, reordering, duplicating
// datagram channel, the way the UD transport will use them: every message to a peer carries a
// piggy-backed cumulative ack, stand-alone acks go out when AckPolicy says so.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "protocol/reliability.h"
#include "protocol/sequencer.h"

namespace rdmx::protocol {
namespace {

struct Packet {
  std::uint64_t arrive_us;
  int to;
  bool has_data;
  Seq seq;
  std::uint32_t msg;  // unwrapped message number, also the sender's slot
  Seq ack;
};

struct ChannelConfig {
  double loss = 0.0;
  double duplicate = 0.0;
  std::uint64_t min_delay_us = 5;
  std::uint64_t max_delay_us = 200;  // wide spread: heavy reordering
};

struct Endpoint {
  Endpoint(const SendWindowConfig& sc, std::size_t reorder_window, Seq first_out, Seq first_in)
      : window(sc, first_out), sequencer(reorder_window, first_in), acks(AckPolicyConfig{8, 50}) {}
  SendWindow window;
  Sequencer sequencer;
  AckPolicy acks;
  std::uint32_t next_msg = 0;
  std::vector<std::uint32_t> delivered;
  std::uint32_t freed_next = 0;  // acks must free messages in order, each once
  bool freed_out_of_order = false;
};

class Sim {
 public:
  Sim(ChannelConfig channel, unsigned seed, Seq first_a, Seq first_b)
      : channel_(channel),
        rng_(seed),
        ep_{Endpoint(config(), 64, first_a, first_b), Endpoint(config(), 64, first_b, first_a)} {}

  static SendWindowConfig config() {
    SendWindowConfig c;
    c.window = 64;
    c.rto_min_us = 500;
    c.rto_max_us = 8'000;
    c.peer_timeout_us = 200'000;
    return c;
  }

  // Runs until both sides delivered `messages` and everything is acked, or until dead/limit.
  // Returns false if a peer was declared dead.
  bool run(std::uint32_t messages, std::uint64_t until_us) {
    while (now_ < until_us) {
      now_ += 10;
      deliver_due();
      for (int e = 0; e < 2; ++e) {
        if (ep_[e].window.peer_dead(now_)) {
          return false;
        }
        progress(e, messages);
      }
      if (done(messages)) {
        return true;
      }
    }
    return false;
  }

  bool done(std::uint32_t messages) const {
    for (const Endpoint& e : ep_) {
      if (e.delivered.size() != messages || e.window.in_flight() != 0 || e.next_msg != messages) {
        return false;
      }
    }
    return true;
  }

  void cut_link() { channel_.loss = 1.0; }
  const Endpoint& ep(int e) const { return ep_[e]; }
  std::uint64_t now() const { return now_; }

 private:
  void transmit(int from, bool has_data, Seq seq, std::uint32_t msg) {
    Endpoint& me = ep_[from];
    const Packet p{0, 1 - from, has_data, seq, msg, me.sequencer.cumulative_ack()};
    me.acks.on_ack_sent();  // every packet carries the ack
    const int copies = coin(channel_.duplicate) ? 2 : 1;
    for (int i = 0; i < copies; ++i) {
      if (coin(channel_.loss)) {
        continue;
      }
      Packet q = p;
      q.arrive_us = now_ + channel_.min_delay_us +
                    rng_() % (channel_.max_delay_us - channel_.min_delay_us + 1);
      wire_.push_back(q);
    }
  }

  void deliver_due() {
    std::vector<Packet> due;
    auto it = std::partition(wire_.begin(), wire_.end(),
                             [&](const Packet& p) { return p.arrive_us > now_; });
    due.assign(it, wire_.end());
    wire_.erase(it, wire_.end());
    std::shuffle(due.begin(), due.end(), rng_);
    for (const Packet& p : due) {
      receive(p);
    }
  }

  void receive(const Packet& p) {
    Endpoint& me = ep_[p.to];
    if (p.has_data) {
      switch (me.sequencer.on_arrival(p.seq, p.msg)) {
        case Arrival::kDeliver:
          me.delivered.push_back(p.msg);
          while (auto c = me.sequencer.pop_ready()) {
            me.delivered.push_back(static_cast<std::uint32_t>(*c));
          }
          me.acks.on_received(now_);
          break;
        case Arrival::kHeld:
          me.acks.on_received(now_);
          break;
        case Arrival::kDuplicate:
        case Arrival::kOutOfWindow:
          me.acks.on_duplicate();
          break;
      }
    }
    me.window.on_ack(p.ack, now_, [&](Seq, std::uint32_t slot) {
      if (slot != me.freed_next) {
        me.freed_out_of_order = true;
      }
      ++me.freed_next;
    });
  }

  void progress(int e, std::uint32_t messages) {
    Endpoint& me = ep_[e];
    me.window.due_for_retransmit(now_, [&](Seq seq, std::uint32_t slot) {
      transmit(e, true, seq, slot);
      return true;
    });
    for (int burst = 0; burst < 8 && me.next_msg < messages && me.window.can_send(); ++burst) {
      const Seq seq = me.window.next_seq();
      EXPECT_TRUE(me.window.on_send(seq, me.next_msg, now_));
      transmit(e, true, seq, me.next_msg);
      ++me.next_msg;
    }
    if (me.acks.ack_due(now_)) {
      transmit(e, false, 0, 0);
    }
  }

  bool coin(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }

  ChannelConfig channel_;
  std::mt19937_64 rng_;
  Endpoint ep_[2];
  std::vector<Packet> wire_;
  std::uint64_t now_ = 0;
};

void expect_exactly_once_in_order(const Endpoint& e, std::uint32_t messages) {
  ASSERT_EQ(e.delivered.size(), messages);
  for (std::uint32_t i = 0; i < messages; ++i) {
    ASSERT_EQ(e.delivered[i], i) << "position " << i;
  }
  EXPECT_EQ(e.sequencer.held(), 0u);
  EXPECT_FALSE(e.freed_out_of_order);
  EXPECT_EQ(e.freed_next, messages) << "every message freed exactly once";
}

struct SimCase {
  double loss;
  double duplicate;
  unsigned seed;
};

class UdReliabilitySim : public ::testing::TestWithParam<SimCase> {};

TEST_P(UdReliabilitySim, DeliversEverythingOnceInOrderAcrossWrap) {
  const SimCase c = GetParam();
  // 70000 messages per direction wrap the 16-bit sequence space; the two directions start at
  // different points, one just before the wrap.
  constexpr std::uint32_t kMessages = 70'000;
  Sim sim(ChannelConfig{c.loss, c.duplicate}, c.seed, 65'500, 123);
  ASSERT_TRUE(sim.run(kMessages, 600'000'000)) << "stalled or declared dead at " << sim.now();
  expect_exactly_once_in_order(sim.ep(0), kMessages);
  expect_exactly_once_in_order(sim.ep(1), kMessages);
  RecordProperty("retransmissions", std::to_string(sim.ep(0).window.retransmissions()));
  RecordProperty("sim_us", std::to_string(sim.now()));
  if (c.loss > 0) {
    EXPECT_GT(sim.ep(0).window.retransmissions(), 0u);
  } else {
    EXPECT_EQ(sim.ep(0).window.retransmissions(), 0u) << "no loss: delayed acks beat the RTO";
  }
}

INSTANTIATE_TEST_SUITE_P(Channels, UdReliabilitySim,
                         ::testing::Values(SimCase{0.0, 0.0, 1}, SimCase{0.01, 0.0, 2},
                                           SimCase{0.10, 0.02, 3}, SimCase{0.30, 0.05, 4}),
                         [](const ::testing::TestParamInfo<SimCase>& p) {
                           return "loss" + std::to_string(static_cast<int>(p.param.loss * 100)) +
                                  "pct_dup" +
                                  std::to_string(static_cast<int>(p.param.duplicate * 100)) + "pct";
                         });

TEST(UdReliabilitySimDead, CutLinkDeclaresPeerDeadAfterTimeoutNotBefore) {
  Sim sim(ChannelConfig{}, 9, 0, 0);
  ASSERT_TRUE(sim.run(100, 1'000'000));
  sim.cut_link();
  const std::uint64_t cut_at = sim.now();
  // New traffic after the cut never gets acked.
  EXPECT_FALSE(sim.run(200, cut_at + 1'000'000));
  const std::uint64_t dead_at = sim.now();
  EXPECT_GE(dead_at - cut_at, Sim::config().peer_timeout_us);
  EXPECT_LT(dead_at - cut_at, Sim::config().peer_timeout_us + 1'000);
}

}  // namespace
}  // namespace rdmx::protocol
