// Sleeping on the worker's event fd (rdmx_worker_event_fd, rdmx_worker_arm; transport/wakeup.cc):
// once armed, the fd stays quiet until a message comes and is readable when one does, whether
// the receive was posted before (it completes in the next progress) or not (unexpected); arming
// refuses while an event or other work waits for progress, and always with a shared-memory
// segment, whose messages make no completion; work that waits for a time (UD's resends) sets the
// fd's timer instead.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "rdmx/rdmx.h"
#include "tests/guest/support/guest_env.h"
#include "tests/transport/support/procs.h"

namespace rdmx::test {
namespace {

constexpr std::uint64_t kExact = ~std::uint64_t{0};
constexpr std::size_t kLen = 300;

std::uint8_t pattern(int msg, std::size_t at) {
  return static_cast<std::uint8_t>(msg * 41 + at * 7 + 3);
}

// Both ranks progress for a while, then stop, and the sleeper arms and checks that its fd stays
// quiet for 200 ms. After the last message UD's acknowledgements go both ways: a sleeper whose
// message is not acknowledged yet arms with its resend deadline set, and one that owes an ack
// with the ack's, and a deadline wakes it (right: progress has work then). So both progress
// again and the sleeper retries until it is armed with nothing left to wake it, for 20 s at
// most.
void settle_and_arm(Rank& rank, rdmx_worker_t* w, int fd, bool sleeper) {
  const auto t0 = std::chrono::steady_clock::now();
  while (seconds_since(t0) < 20.0) {
    const auto t1 = std::chrono::steady_clock::now();
    while (seconds_since(t1) < 0.3) {
      (void)rdmx_worker_progress(w);
    }
    rank.barrier();
    std::uint8_t armed = 0;
    for (int i = 0; sleeper && i < 100 && armed == 0; ++i) {
      const int rc = rdmx_worker_arm(w);
      RDMX_CHECK(rank, rc == RDMX_OK || rc == RDMX_ERR_BUSY);
      armed = rc == RDMX_OK && !readable(fd, 200) ? 1 : 0;  // nothing came, nothing due
      if (armed == 0) {
        (void)rdmx_worker_progress(w);
      }
    }
    if (rank.allgather(&armed, 1)[0][0] != 0) {  // rank 0 sleeps
      return;
    }
  }
  rank.fail(__FILE__, __LINE__, "the worker did not arm quietly within 20 s");
}

void sleeper_config(rdmx_config_t& c) {
  c.shm = 0;         // shared memory makes no completion: a worker with a segment never arms
  c.ring_peers = 0;  // no ring to take back before the first sleep (tested on its own below)
}

class WakeupTest : public ::testing::TestWithParam<rdmx_transport_t> {};

TEST_P(WakeupTest, AnArmedWorkerIsWokenByEachMessage) {
  RDMX_REQUIRE_DEVICE();
  const rdmx_transport_t transport = GetParam();
  ASSERT_TRUE(run_ranks(
      2,
      [&](Rank& rank) {
        Session s = open_session(rank, device_for(rank.rank(), false), transport, sleeper_config);
        quiesce(rank, s);
        rdmx_worker_t* const w = s.worker;
        if (rank.rank() == 1) {
          for (int msg = 0; msg < 2; ++msg) {
            settle_and_arm(rank, w, -1, /*sleeper=*/false);
            rank.barrier();  // the receiver sleeps
            std::vector<std::uint8_t> buf(kLen);
            for (std::size_t k = 0; k < kLen; ++k) {
              buf[k] = pattern(msg, k);
            }
            rdmx_request_t req;
            RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[0], buf.data(), kLen, 40 + msg, 0, &req,
                                              nullptr, nullptr));
            RDMX_CHECK_OK(rank, wait_request(rank, w, &req, nullptr, "send to the sleeper"));
          }
        } else {
          int fd = -1;
          RDMX_CHECK_OK(rank, rdmx_worker_event_fd(w, &fd));
          RDMX_CHECK(rank, fd >= 0);
          std::vector<std::uint8_t> buf(kLen + 8);
          // Message 0 comes unexpected; message 1 finds its receive posted before the arming.
          for (int msg = 0; msg < 2; ++msg) {
            rdmx_request_t req;
            if (msg == 1) {
              RDMX_CHECK_OK(rank, rdmx_tag_recv(w, buf.data(), buf.size(), s.uids[1], 40 + msg,
                                                kExact, &req, nullptr, nullptr));
            }
            settle_and_arm(rank, w, fd, /*sleeper=*/true);
            rank.barrier();
            RDMX_CHECK(rank, readable(fd, 20000));
            // The message waits in the CQ: arming finds it and refuses.
            RDMX_CHECK_EQ(rank, rdmx_worker_arm(w), RDMX_ERR_BUSY);
            if (msg == 0) {  // taken in as unexpected first, then received
              (void)probe_until(rank, s, s.uids[1], 40 + msg, kExact, std::chrono::seconds(20));
              RDMX_CHECK_OK(rank, rdmx_tag_recv(w, buf.data(), buf.size(), s.uids[1], 40 + msg,
                                                kExact, &req, nullptr, nullptr));
            }
            rdmx_status_t st{};
            RDMX_CHECK_OK(rank, wait_request(rank, w, &req, &st, "woken receive"));
            RDMX_CHECK_EQ(rank, st.length, kLen);
            for (std::size_t k = 0; k < kLen; ++k) {
              RDMX_CHECK_EQ(rank, buf[k], pattern(msg, k));
            }
          }
        }
        quiesce(rank, s);
        close_session(rank, s);
      },
      RunOptions{.timeout = std::chrono::seconds(90)}));
}

INSTANTIATE_TEST_SUITE_P(Transports, WakeupTest,
                         ::testing::Values(RDMX_TRANSPORT_RC, RDMX_TRANSPORT_UD),
                         [](const ::testing::TestParamInfo<rdmx_transport_t>& p) {
                           return std::string(p.param == RDMX_TRANSPORT_RC ? "Rc" : "Ud");
                         });

// A UD sender whose message is not acknowledged yet arms (it used to answer busy until the
// ack came, and a UCP sleeper spun through every exchange) and its fd wakes it at each resend
// deadline, though nothing arrives: the receiver does not progress, so it neither acks nor
// sends. A sleeper loop as UCP's (progress, arm, sleep until readable) then delivers the message
// once the receiver progresses again.
TEST(Wakeup, AUdSenderSleepsUntilItsResendDeadline) {
  RDMX_REQUIRE_DEVICE();
  ASSERT_TRUE(run_ranks(
      2,
      [](Rank& rank) {
        Session s =
            open_session(rank, device_for(rank.rank(), false), RDMX_TRANSPORT_UD, sleeper_config);
        quiesce(rank, s);
        rdmx_worker_t* const w = s.worker;
        constexpr int kTag = 50;
        std::vector<std::uint8_t> buf(kLen);
        if (rank.rank() == 1) {
          int fd = -1;
          RDMX_CHECK_OK(rank, rdmx_worker_event_fd(w, &fd));
          for (std::size_t k = 0; k < kLen; ++k) {
            buf[k] = pattern(7, k);
          }
          rank.barrier();  // the receiver stops progressing
          rdmx_request_t req;
          RDMX_CHECK_OK(rank,
                        rdmx_tag_send(s.eps[0], buf.data(), kLen, kTag, 0, &req, nullptr, nullptr));
          rdmx_stats_t before{};
          RDMX_CHECK_OK(rank, rdmx_worker_stats(w, &before));
          int sleeps = 0;
          double longest = 0;
          const auto t0 = std::chrono::steady_clock::now();
          while (seconds_since(t0) < 1.0) {
            (void)rdmx_worker_progress(w);
            const int rc = rdmx_worker_arm(w);
            RDMX_CHECK(rank, rc == RDMX_OK || rc == RDMX_ERR_BUSY);
            if (rc == RDMX_OK) {
              ++sleeps;
              // The resend timeout doubles up to 1 s: a sleeper not woken by 3 s would hang.
              const auto t1 = std::chrono::steady_clock::now();
              RDMX_CHECK(rank, readable(fd, 3000));
              longest = std::max(longest, seconds_since(t1));
            }
          }
          rdmx_stats_t after{};
          RDMX_CHECK_OK(rank, rdmx_worker_stats(w, &after));
          // It slept, and at the deadlines: the doubling timeout leaves gaps of 0.1 s and more
          // within the second (a deadline set in the past, or in the wrong unit, wakes at once
          // and often), and the wakes resent the message.
          RDMX_CHECK(rank, sleeps > 0 && sleeps < 500);
          RDMX_CHECK(rank, longest >= 0.1);
          RDMX_CHECK(rank, after.ud_retransmits > before.ud_retransmits);
          rank.barrier();  // the receiver progresses again
          RDMX_CHECK_OK(rank, wait_request(rank, w, &req, nullptr, "unacknowledged send"));
        } else {
          rank.barrier();
          rank.barrier();  // while the sender sleeps, no progress here
          rdmx_request_t req;
          rdmx_status_t st{};
          RDMX_CHECK_OK(rank, rdmx_tag_recv(w, buf.data(), buf.size(), s.uids[1], kTag, kExact,
                                            &req, nullptr, nullptr));
          RDMX_CHECK_OK(rank, wait_request(rank, w, &req, &st, "receive"));
          RDMX_CHECK_EQ(rank, st.length, kLen);
          for (std::size_t k = 0; k < kLen; ++k) {
            RDMX_CHECK_EQ(rank, buf[k], pattern(7, k));
          }
        }
        quiesce(rank, s);
        close_session(rank, s);
      },
      RunOptions{.timeout = std::chrono::seconds(60)}));
}

// Rank `from` sends `n` 8-byte messages to rank 0 (tags from `tag`), which checks each; every
// rank then quiesces.
void stream_to_rank0(Rank& rank, Session& s, int from, std::uint64_t tag, int n) {
  std::vector<std::uint64_t> words(static_cast<std::size_t>(n));
  std::vector<rdmx_request_t> reqs(static_cast<std::size_t>(n));
  if (rank.rank() == from || rank.rank() == 0) {
    for (int i = 0; i < n; ++i) {
      const auto k = static_cast<std::size_t>(i);
      if (rank.rank() == from) {
        words[k] = tag * 1000 + k;
        RDMX_CHECK_OK(
            rank, rdmx_tag_send(s.eps[0], &words[k], 8, tag + k, 0, &reqs[k], nullptr, nullptr));
      } else {
        RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, &words[k], 8, s.uids[from], tag + k, kExact,
                                          &reqs[k], nullptr, nullptr));
      }
    }
    for (int i = 0; i < n; ++i) {
      const auto k = static_cast<std::size_t>(i);
      RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &reqs[k], nullptr, "stream"));
      RDMX_CHECK_EQ(rank, words[k], tag * 1000 + k);
    }
  }
  quiesce(rank, s);
}

// An RC session (shared memory off) in which rank 0 gave rank 1 an eager ring and took messages
// from it; `ringed`: the worker's counters then.
Session open_ringed_session(Rank& rank, rdmx_stats_t* ringed) {
  Session s =
      open_session(rank, device_for(rank.rank(), false), RDMX_TRANSPORT_RC, [](rdmx_config_t& c) {
        c.shm = 0;
        c.coalesce = 0;  // each message counts towards the offer
      });
  quiesce(rank, s);
  stream_to_rank0(rank, s, 1, 1000, 64);  // rank 0 offers rank 1 a ring after 16
  stream_to_rank0(rank, s, 1, 2000, 64);  // ... which these are written into
  RDMX_CHECK_OK(rank, rdmx_worker_stats(s.worker, ringed));
  if (rank.rank() == 0) {
    RDMX_CHECK_EQ(rank, ringed->ring_peers, std::uint64_t{1});
    RDMX_CHECK(rank, ringed->ring_recvs > 0);
  }
  return s;
}

// An RC worker that gave a peer an eager ring arms: a ring write makes no completion, so its
// first arming takes the ring back (kRingWithdraw; the peer answers kRingReleased behind its
// last ring message: channel/rc_ring.cc) and sleeps only on a short timer until the answer is
// in; then it sleeps for good, and the peer's next message, which now goes by the SRQs, wakes it.
// No ring is offered again, to that peer or another (rank 2 sends its first messages after the
// sleep). Before, such a worker never armed (settle_and_arm failed after 20 s).
TEST(Wakeup, ARcWorkerTakesItsRingsBackToSleep) {
  RDMX_REQUIRE_DEVICE();
  ASSERT_TRUE(run_ranks(
      3,
      [](Rank& rank) {
        rdmx_stats_t ringed{};
        Session s = open_ringed_session(rank, &ringed);
        rdmx_worker_t* const w = s.worker;
        int fd = -1;
        RDMX_CHECK_OK(rank, rdmx_worker_event_fd(w, &fd));
        settle_and_arm(rank, w, fd, /*sleeper=*/rank.rank() == 0);
        rank.barrier();  // rank 0 sleeps
        std::vector<std::uint8_t> buf(kLen);
        rdmx_request_t req;
        if (rank.rank() == 1) {
          for (std::size_t k = 0; k < kLen; ++k) {
            buf[k] = pattern(3, k);
          }
          RDMX_CHECK_OK(rank,
                        rdmx_tag_send(s.eps[0], buf.data(), 8, 60, 0, &req, nullptr, nullptr));
          RDMX_CHECK_OK(rank, wait_request(rank, w, &req, nullptr, "send to the sleeper"));
        } else if (rank.rank() == 0) {
          RDMX_CHECK(rank, readable(fd, 20000));
          rdmx_status_t st{};
          RDMX_CHECK_OK(rank, rdmx_tag_recv(w, buf.data(), buf.size(), s.uids[1], 60, kExact, &req,
                                            nullptr, nullptr));
          RDMX_CHECK_OK(rank, wait_request(rank, w, &req, &st, "woken receive"));
          RDMX_CHECK_EQ(rank, st.length, std::size_t{8});
          for (std::size_t k = 0; k < 8; ++k) {
            RDMX_CHECK_EQ(rank, buf[k], pattern(3, k));
          }
        }
        stream_to_rank0(rank, s, 2, 3000, 64);  // by the SRQs: no ring offered to rank 2
        stream_to_rank0(rank, s, 1, 4000, 64);  // nor again to rank 1
        rdmx_stats_t after{};
        RDMX_CHECK_OK(rank, rdmx_worker_stats(w, &after));
        if (rank.rank() == 0) {
          RDMX_CHECK_EQ(rank, after.ring_peers, ringed.ring_peers);
          RDMX_CHECK_EQ(rank, after.ring_recvs, ringed.ring_recvs);
        } else {
          RDMX_CHECK_EQ(rank, after.ring_sends, ringed.ring_sends);  // nothing into rank 0's
        }
        close_session(rank, s);
      },
      RunOptions{.timeout = std::chrono::seconds(90)}));
}

// The same while the writer does not progress (it computes, say), so has not answered
// kRingWithdraw: the sleeper sleeps on a short timer (kRingWithdrawPollUs) that looks at the
// ring, rather than spinning until the writer's next progress call, and a message the writer puts
// in the ring meanwhile, which makes no completion, is found at the next look; one written while
// it does not progress makes arming busy. Before, every arming was busy until the writer
// progressed ("slept 0 times").
TEST(Wakeup, ASleeperLooksAtItsRingsUntilTheirWriterAnswers) {
  RDMX_REQUIRE_DEVICE();
  ASSERT_TRUE(run_ranks(
      2,
      [](Rank& rank) {
        rdmx_stats_t ringed{};
        Session s = open_ringed_session(rank, &ringed);
        rdmx_worker_t* const w = s.worker;
        int fd = -1;
        RDMX_CHECK_OK(rank, rdmx_worker_event_fd(w, &fd));
        std::uint64_t word = 0;
        rdmx_request_t req;
        rank.barrier();  // rank 1 stops progressing
        if (rank.rank() == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(500));
          word = 0x5eed0001;
          RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[0], &word, 8, 70, 0, &req, nullptr, nullptr));
          rdmx_stats_t sent{};
          RDMX_CHECK_OK(rank, rdmx_worker_stats(w, &sent));
          RDMX_CHECK_EQ(rank, sent.ring_sends, ringed.ring_sends + 1);  // into the ring
          rank.barrier();                                               // rank 0 has it
          std::uint64_t second = 0x5eed0002;
          rdmx_request_t req2;
          RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[0], &second, 8, 71, 0, &req2, nullptr, nullptr));
          RDMX_CHECK_OK(rank, rdmx_worker_stats(w, &sent));
          RDMX_CHECK_EQ(rank, sent.ring_sends, ringed.ring_sends + 2);
          rank.barrier();  // written
          RDMX_CHECK_OK(rank, wait_request(rank, w, &req, nullptr, "send into the ring"));
          RDMX_CHECK_OK(rank, wait_request(rank, w, &req2, nullptr, "second send into the ring"));
        } else {
          RDMX_CHECK_OK(rank,
                        rdmx_tag_recv(w, &word, 8, s.uids[1], 70, kExact, &req, nullptr, nullptr));
          int sleeps = 0;
          double longest = 0;
          rdmx_status_t st{};
          int rc = RDMX_INPROGRESS;
          const auto t0 = std::chrono::steady_clock::now();
          while (rc == RDMX_INPROGRESS && seconds_since(t0) < 20.0) {
            (void)rdmx_worker_progress(w);
            rc = rdmx_request_test(&req, &st);
            if (rc == RDMX_INPROGRESS && rdmx_worker_arm(w) == RDMX_OK) {
              ++sleeps;
              const auto t1 = std::chrono::steady_clock::now();
              RDMX_CHECK(rank, readable(fd, 3000));  // the timer, at the latest
              longest = std::max(longest, seconds_since(t1));
            }
          }
          RDMX_CHECK_OK(rank, rc);
          RDMX_CHECK_EQ(rank, word, std::uint64_t{0x5eed0001});
          rdmx_stats_t got{};
          RDMX_CHECK_OK(rank, rdmx_worker_stats(w, &got));
          RDMX_CHECK_EQ(rank, got.ring_recvs, ringed.ring_recvs + 1);
          // It slept through the writer's 0.5 s, each time until the timer (1 ms) or longer: a
          // deadline in the past would wake it at once, every time.
          std::fprintf(stderr, "[rank 0] slept %d times, longest %.4f s\n", sleeps, longest);
          RDMX_CHECK(rank, sleeps >= 10 && longest >= 0.0009);
          // A ring message not yet taken makes arming busy as soon as it lands (no progress
          // between): the sleeper does not wait for the timer to find it. Settled first, so that
          // nothing else makes it busy.
          int armed = RDMX_ERR_BUSY;
          const auto t2 = std::chrono::steady_clock::now();
          while (armed != RDMX_OK && seconds_since(t2) < 5.0) {
            (void)rdmx_worker_progress(w);
            armed = rdmx_worker_arm(w);
          }
          RDMX_CHECK_EQ(rank, armed, RDMX_OK);
          rank.barrier();  // rank 0 has it: the writer writes again
          rank.barrier();  // written
          while (armed == RDMX_OK && seconds_since(t2) < 10.0) {
            armed = rdmx_worker_arm(w);
            if (armed == RDMX_OK) {
              RDMX_CHECK(rank, readable(fd, 3000));
            }
          }
          RDMX_CHECK_EQ(rank, armed, RDMX_ERR_BUSY);
          for (int i = 0; i < 5; ++i) {  // and stays busy until progress takes the message
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
            RDMX_CHECK_EQ(rank, rdmx_worker_arm(w), RDMX_ERR_BUSY);
          }
          RDMX_CHECK_OK(rank,
                        rdmx_tag_recv(w, &word, 8, s.uids[1], 71, kExact, &req, nullptr, nullptr));
          RDMX_CHECK_OK(rank, wait_request(rank, w, &req, nullptr, "second ring message"));
          RDMX_CHECK_EQ(rank, word, std::uint64_t{0x5eed0002});
          RDMX_CHECK_OK(rank, rdmx_worker_stats(w, &got));
          RDMX_CHECK_EQ(rank, got.ring_recvs, ringed.ring_recvs + 2);
        }
        // The writer progresses again and answers: the sleeper then sleeps without the timer.
        settle_and_arm(rank, w, fd, /*sleeper=*/rank.rank() == 0);
        quiesce(rank, s);
        close_session(rank, s);
      },
      RunOptions{.timeout = std::chrono::seconds(90)}));
}

// A worker with a shared-memory segment (the default) never arms: a node-local peer's message
// makes no completion, so a sleeper would miss it.
TEST(Wakeup, AWorkerWithSharedMemoryDoesNotArm) {
  RDMX_REQUIRE_DEVICE();
  ASSERT_TRUE(run_ranks(1, [](Rank& rank) {
    rdmx_config_t cfg = test_config(devices()[0], RDMX_TRANSPORT_RC);
    cfg.shm = 1;
    rdmx_worker_t* w = nullptr;
    RDMX_CHECK_OK(rank, rdmx_worker_create(&cfg, &w));
    for (int i = 0; i < 100; ++i) {
      (void)rdmx_worker_progress(w);
    }
    RDMX_CHECK_EQ(rank, rdmx_worker_arm(w), RDMX_ERR_BUSY);
    rdmx_worker_destroy(w);
  }));
}

}  // namespace
}  // namespace rdmx::test
