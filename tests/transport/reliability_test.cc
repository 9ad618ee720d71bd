// UD reliability under injected loss (RDMX_UD_DROP_RATE): every message delivered exactly once,
// in per-sender order, in both directions, with sync sends whose match-acks can be lost too.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "rdmx/rdmx.h"
#include "tests/guest/support/guest_env.h"
#include "tests/transport/support/procs.h"
#include "transport/debug.h"

namespace rdmx::test {
namespace {

struct Header {
  int sender;
  int seq;
};

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : fallback;
}

// Both ranks send `n` messages to each other (every 16th synchronous) and receive the other's
// `n` with any-source receives, checking order and content; returns the worker stats.
void exchange(Rank& rank, Session& s, int n, std::size_t max_size) {
  const int peer = 1 - rank.rank();
  rdmx_ep_t* ep = s.eps[static_cast<std::size_t>(peer)];
  std::vector<std::vector<std::uint8_t>> out(static_cast<std::size_t>(n));
  std::vector<rdmx_request_t> sreq(static_cast<std::size_t>(n));
  std::vector<std::uint8_t> in(max_size + 16);
  int sent = 0, received = 0, completed = 0;
  rdmx_request_t rreq;
  bool recv_posted = false;
  const auto t0 = std::chrono::steady_clock::now();
  // Keep at most 64 sends outstanding so both directions interleave.
  while (received < n || completed < n) {
    while (sent < n && sent - completed < 64) {
      const auto i = static_cast<std::size_t>(sent);
      const std::size_t len = sizeof(Header) + (i * 37) % (max_size - sizeof(Header) + 1);
      out[i].resize(len);
      const Header h{rank.rank(), sent};
      std::memcpy(out[i].data(), &h, sizeof(h));
      for (std::size_t b = sizeof(h); b < len; ++b) {
        out[i][b] = static_cast<std::uint8_t>(b + i);
      }
      RDMX_CHECK_OK(rank, rdmx_tag_send(ep, out[i].data(), len, 0x100, sent % 16 == 0 ? 1u : 0u,
                                        &sreq[i], nullptr, nullptr));
      ++sent;
    }
    if (!recv_posted && received < n) {
      RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, in.data(), in.size(), RDMX_ANY_SOURCE, 0x100,
                                        ~0ull, &rreq, nullptr, nullptr));
      recv_posted = true;
    }
    RDMX_CHECK(rank, rdmx_worker_progress(s.worker) >= 0);
    rdmx_status_t st{};
    if (recv_posted && rdmx_request_test(&rreq, &st) != RDMX_INPROGRESS) {
      RDMX_CHECK_OK(rank, st.error);
      Header h{};
      std::memcpy(&h, in.data(), sizeof(h));
      RDMX_CHECK_EQ(rank, h.sender, peer);
      RDMX_CHECK_EQ(rank, h.seq, received);  // exactly once, in order
      const auto i = static_cast<std::size_t>(received);
      RDMX_CHECK_EQ(rank, st.length, sizeof(Header) + (i * 37) % (max_size - sizeof(Header) + 1));
      for (std::size_t b = sizeof(h); b < st.length; ++b) {
        if (in[b] != static_cast<std::uint8_t>(b + i)) {
          rank.fail(__FILE__, __LINE__, "message " + std::to_string(received) + " corrupted");
        }
      }
      ++received;
      recv_posted = false;
    }
    while (completed < sent &&
           rdmx_request_test(&sreq[static_cast<std::size_t>(completed)], &st) != RDMX_INPROGRESS) {
      RDMX_CHECK_OK(rank, st.error);
      ++completed;
    }
    if (seconds_since(t0) > 100) {
      rdmx::transport::debug::dump(s.worker);
      rank.fail(__FILE__, __LINE__,
                "stuck: sent " + std::to_string(sent) + " completed " + std::to_string(completed) +
                    " received " + std::to_string(received));
    }
  }
}

TEST(UdReliability, FivePercentLossExactlyOnceInOrder) {
  RDMX_REQUIRE_DEVICE();
  const int n = env_int("RDMX_TEST_LOSS_MSGS", 3000);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(run_ranks(
      2,
      [&](Rank& rank) {
        Session s = open_session(rank, device_for(rank.rank(), true), RDMX_TRANSPORT_UD,
                                 [](rdmx_config_t& c) {
                                   c.ud_drop_rate = 0.05;
                                   c.ud_rto_us = 1000;
                                 });
        const auto t1 = std::chrono::steady_clock::now();
        exchange(rank, s, n, 990);
        const double secs = seconds_since(t1);
        rdmx_stats_t st{};
        RDMX_CHECK_OK(rank, rdmx_worker_stats(s.worker, &st));
        std::printf(
            "rank %d: %d messages each way in %.2f s; dropped %llu, retransmitted %llu, "
            "duplicates %llu\n",
            rank.rank(), n, secs, static_cast<unsigned long long>(st.ud_dropped_test),
            static_cast<unsigned long long>(st.ud_retransmits),
            static_cast<unsigned long long>(st.ud_duplicates));
        RDMX_CHECK(rank, st.ud_dropped_test > 0);
        RDMX_CHECK(rank, st.ud_retransmits > 0);
        quiesce(rank, s);
        close_session(rank, s);
      },
      RunOptions{.timeout = std::chrono::seconds(240)}));
  std::printf("total %.2f s\n", seconds_since(t0));
}

TEST(UdReliability, NoLossNoRetransmissionNeeded) {
  RDMX_REQUIRE_DEVICE();
  EXPECT_TRUE(run_ranks(2, [&](Rank& rank) {
    Session s = open_session(rank, device_for(rank.rank(), false), RDMX_TRANSPORT_UD);
    exchange(rank, s, 1000, 900);
    rdmx_stats_t st{};
    RDMX_CHECK_OK(rank, rdmx_worker_stats(s.worker, &st));
    RDMX_CHECK_EQ(rank, st.ud_dropped_test, 0u);
    quiesce(rank, s);
    close_session(rank, s);
  }));
}

// A rank that computes (no progress) for longer than the RTO right after sending: the peer's
// answer, which acks that send, lands in its receive CQ meanwhile. Back in progress it must see
// that ack before its expired timer resends the message. Each trial first runs fast round trips
// so that the RTO is back near its floor (a pause's late ack is an RTT sample that raises it),
// then one round with the pause. The peer waits the whole pause for the next message; its own
// resends are expected and not checked.
TEST(UdReliability, AnAckWaitingInTheReceiveQueueComesBeforeTheTimersResend) {
  RDMX_REQUIRE_DEVICE();
  constexpr int kTrials = 5;
  constexpr int kFastRounds = 60;
  constexpr auto kCompute = std::chrono::milliseconds(20);  // 20x the RTO's floor below
  EXPECT_TRUE(run_ranks(2, [&](Rank& rank) {
    Session s =
        open_session(rank, device_for(rank.rank(), false), RDMX_TRANSPORT_UD, [](rdmx_config_t& c) {
          c.ud_rto_us = 1000;
          c.shm = 0;  // the ranks share the guest: through UD all the same
        });
    rdmx_ep_t* ep = s.eps[static_cast<std::size_t>(1 - rank.rank())];
    auto wait = [&](rdmx_request_t& r, const char* what) {
      rdmx_status_t st{};
      RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &r, &st, what));
      RDMX_CHECK_OK(rank, st.error);
    };
    auto recv_one = [&](int expect) {
      int got = -1;
      rdmx_request_t r;
      RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, &got, sizeof(got), RDMX_ANY_SOURCE, 0x200, ~0ull,
                                        &r, nullptr, nullptr));
      wait(r, "receive");
      RDMX_CHECK_EQ(rank, got, expect);
    };
    auto resends = [&] {
      rdmx_stats_t st{};
      RDMX_CHECK_OK(rank, rdmx_worker_stats(s.worker, &st));
      return st.ud_retransmits;
    };
    // Rank 1 pauses after its send of every (kFastRounds + 1)-th round; its resends are counted
    // from that send to its next receive, by when the pause's ack has been seen.
    std::uint64_t paused_resends = 0;
    std::uint64_t since = 0;
    bool counting = false;
    const int rounds = kTrials * (kFastRounds + 1) + 1;
    for (int i = 0; i < rounds; ++i) {
      rdmx_request_t r;
      if (rank.rank() == 0) {
        RDMX_CHECK_OK(rank, rdmx_tag_send(ep, &i, sizeof(i), 0x200, 0, &r, nullptr, nullptr));
        wait(r, "send");
        recv_one(i);
        continue;
      }
      recv_one(i);
      if (counting) {
        paused_resends += resends() - since;
        counting = false;
      }
      const bool pause = i % (kFastRounds + 1) == kFastRounds;
      if (pause) {
        since = resends();
        counting = true;
      }
      RDMX_CHECK_OK(rank, rdmx_tag_send(ep, &i, sizeof(i), 0x200, 0, &r, nullptr, nullptr));
      if (pause) {
        std::this_thread::sleep_for(kCompute);  // computing: no progress
      }
      wait(r, "send");
    }
    if (rank.rank() == 1) {
      std::printf("rank 1: %d pauses, %llu resends across them\n", kTrials,
                  static_cast<unsigned long long>(paused_resends));
      RDMX_CHECK_EQ(rank, paused_resends, 0u);
    } else {
      std::printf("rank 0: %llu resends while it waited through the pauses\n",
                  static_cast<unsigned long long>(resends()));
    }
    quiesce(rank, s);
    close_session(rank, s);
  }));
}

}  // namespace
}  // namespace rdmx::test
