// Peers that go away: a destroyed peer worker (kDisconnect), a killed peer process (no goodbye:
// RC retry exhaustion or UD peer timeout), a connection request nobody answers, a killed peer
// that the survivor only receives from or probes (liveness probes, transport/liveness.cc); and
// an RC receiver whose receive queues run dry (RNR retries exceeded, or retried for ever).
// Requests fail with RDMX_ERR_UNREACHABLE within the timeout, later sends are refused, nothing
// hangs; a live peer that is quiet (not progressing) for longer than the timeout is not failed.
#include <gtest/gtest.h>

#include <chrono>
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

// 5 s, not less: under a loaded TCG guest a peer process can stall for ~2 s, and the same timeout
// bounds connecting.
constexpr std::uint32_t kPeerTimeoutMs = 5000;

std::string transport_name(const ::testing::TestParamInfo<rdmx_transport_t>& param) {
  return param.param == RDMX_TRANSPORT_RC ? "Rc" : "Ud";
}

void short_timeout(rdmx_config_t& c) {
  c.peer_timeout_ms = kPeerTimeoutMs;
}

// Sends standard messages until one is refused or completes with an error; returns that error
// and how long it took. A standard send completes once buffered, so the failure shows on a later
// send (or on `pending`, a sync send waiting for a match-ack that will never come).
int send_until_failure(Rank& rank, Session& s, int peer, rdmx_request_t* pending, double* seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  rdmx_ep_t* ep = s.eps[static_cast<std::size_t>(peer)];
  std::vector<rdmx_request_t> reqs(64);
  std::uint64_t payload = 0;
  int i = 0;
  for (;;) {
    if (seconds_since(t0) > 30) {
      rdmx::transport::debug::dump(s.worker);
      rank.fail(__FILE__, __LINE__, "the dead peer was not noticed in 30 s");
    }
    (void)rdmx_worker_progress(s.worker);
    rdmx_status_t st{};
    if (pending != nullptr && rdmx_request_test(pending, &st) != RDMX_INPROGRESS) {
      *seconds = seconds_since(t0);
      return st.error;
    }
    rdmx_request_t& r = reqs[static_cast<std::size_t>(i % 64)];
    if (i >= 64) {
      const int rc = rdmx_request_test(&r, &st);
      if (rc == RDMX_INPROGRESS) {
        continue;  // queued behind the dead connection: keep progressing
      }
      if (rc != RDMX_OK) {
        *seconds = seconds_since(t0);
        return rc;
      }
    }
    const int rc = rdmx_tag_send(ep, &payload, sizeof(payload), 5, 0, &r, nullptr, nullptr);
    if (rc != RDMX_OK) {
      *seconds = seconds_since(t0);
      return rc;
    }
    ++i;
  }
}

class PeerFailure : public ::testing::TestWithParam<rdmx_transport_t> {
 protected:
  void SetUp() override { RDMX_REQUIRE_DEVICE(); }
};

TEST_P(PeerFailure, DestroyedPeerWorkerFailsPendingAndLaterSends) {
  const rdmx_transport_t t = GetParam();
  EXPECT_TRUE(run_ranks(2, [&](Rank& rank) {
    Session s = open_session(rank, device_for(rank.rank(), true), t, short_timeout);
    if (rank.rank() == 1) {
      quiesce(rank, s);
      rank.barrier();  // rank 0 has posted a sync send nobody will receive
      close_session(rank, s);
      rank.barrier();
      return;
    }
    quiesce(rank, s);
    std::uint8_t x = 1;
    rdmx_request_t ssend;
    RDMX_CHECK_OK(rank,
                  rdmx_tag_send(s.eps[1], &x, 1, 77, RDMX_SEND_SYNC, &ssend, nullptr, nullptr));
    // Let it reach the peer before the peer goes.
    const auto t0 = std::chrono::steady_clock::now();
    while (seconds_since(t0) < 0.3) {
      (void)rdmx_worker_progress(s.worker);
    }
    rank.barrier();
    rank.barrier();  // the peer worker is destroyed
    rdmx_status_t st{};
    const int rc = wait_request(rank, s.worker, &ssend, &st, "sync send to a destroyed peer",
                                std::chrono::milliseconds(3 * kPeerTimeoutMs));
    RDMX_CHECK_EQ(rank, rc, RDMX_ERR_UNREACHABLE);
    std::printf("%s: sync send failed %.2f s after the peer was destroyed\n",
                t == RDMX_TRANSPORT_RC ? "rc" : "ud", seconds_since(t0) - 0.3);
    // Later sends are refused at once and accept nothing.
    rdmx_request_t r;
    RDMX_CHECK_EQ(rank, rdmx_tag_send(s.eps[1], &x, 1, 78, 0, &r, nullptr, nullptr),
                  RDMX_ERR_UNREACHABLE);
    close_session(rank, s);
  }));
}

TEST_P(PeerFailure, KilledPeerIsDetectedByTraffic) {
  const rdmx_transport_t t = GetParam();
  EXPECT_TRUE(run_ranks(2, [&](Rank& rank) {
    Session s = open_session(rank, device_for(rank.rank(), true), t, short_timeout);
    quiesce(rank, s);
    if (rank.rank() == 1) {
      rank.barrier();
      _exit(0);  // dies without a word: the kernel reclaims its QPs
    }
    std::uint8_t x = 1;
    rdmx_request_t ssend;
    RDMX_CHECK_OK(rank,
                  rdmx_tag_send(s.eps[1], &x, 1, 77, RDMX_SEND_SYNC, &ssend, nullptr, nullptr));
    rank.barrier();
    double secs = 0;
    const int rc = send_until_failure(rank, s, 1, &ssend, &secs);
    RDMX_CHECK_EQ(rank, rc, RDMX_ERR_UNREACHABLE);
    std::printf("%s: killed peer noticed after %.2f s\n", t == RDMX_TRANSPORT_RC ? "rc" : "ud",
                secs);
    RDMX_CHECK(rank, secs < 3.0 * kPeerTimeoutMs / 1000.0);
    // The sync send fails too.
    rdmx_status_t st{};
    RDMX_CHECK_EQ(rank,
                  wait_request(rank, s.worker, &ssend, &st, "sync send", std::chrono::seconds(5)),
                  RDMX_ERR_UNREACHABLE);
    close_session(rank, s);
  }));
}

TEST_P(PeerFailure, ConnectionRequestNobodyAnswers) {
  const rdmx_transport_t t = GetParam();
  EXPECT_TRUE(run_ranks(2, [&](Rank& rank) {
    rdmx_config_t cfg = test_config(device_for(rank.rank(), true), t);
    short_timeout(cfg);
    rdmx_worker_t* w = nullptr;
    RDMX_CHECK_OK(rank, rdmx_worker_create(&cfg, &w));
    const void* a = nullptr;
    std::size_t len = 0;
    RDMX_CHECK_OK(rank, rdmx_worker_address(w, &a, &len));
    const auto blobs = rank.allgather(a, len);
    if (rank.rank() == 1) {
      _exit(0);  // gone before anyone connects
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // rank 1 is gone by now
    rdmx_ep_t* ep = nullptr;
    RDMX_CHECK_OK(rank, rdmx_ep_create(w, blobs[1].data(), blobs[1].size(), &ep));
    std::uint8_t x = 1;
    rdmx_request_t r;
    const auto t0 = std::chrono::steady_clock::now();
    RDMX_CHECK_OK(rank, rdmx_tag_send(ep, &x, 1, 1, 0, &r, nullptr, nullptr));  // queued
    rdmx_status_t st{};
    RDMX_CHECK_EQ(rank,
                  wait_request(rank, w, &r, &st, "send behind a dead connect",
                               std::chrono::milliseconds(3 * kPeerTimeoutMs)),
                  RDMX_ERR_UNREACHABLE);
    const double secs = seconds_since(t0);
    std::printf("%s: unanswered connect failed after %.2f s\n",
                t == RDMX_TRANSPORT_RC ? "rc" : "ud", secs);
    RDMX_CHECK(rank, secs >= kPeerTimeoutMs / 1000.0 * 0.9);
    rdmx_ep_destroy(ep);
    rdmx_worker_destroy(w);
    RDMX_CHECK_EQ(rank, rdmx::transport::debug::last_destroy_report().wr_ids.outstanding(), 0u);
  }));
}

// Detection of a quiet dead peer: RC probe after T/4, failed T later; UD pings from T/4,
// failed 2T later (transport/README.md, "Peer failure"). The bound adds slack for a loaded guest.
double quiet_detection_bound_s(rdmx_transport_t t) {
  const double t_s = kPeerTimeoutMs / 1000.0;
  return (t == RDMX_TRANSPORT_RC ? 1.25 * t_s : 2.25 * t_s) + 5.0;
}

const char* tname(rdmx_transport_t t) {
  return t == RDMX_TRANSPORT_RC ? "rc" : "ud";
}

// A rank about to die or sleep progresses for a second first, so that what its peer sent last
// is acknowledged: unacknowledged UD sends fail a peer that does not progress for T (send.cc),
// which would find it before the liveness probes these tests are about.
void acknowledge_everything(Session& s) {
  const auto t0 = std::chrono::steady_clock::now();
  while (seconds_since(t0) < 1.0) {
    (void)rdmx_worker_progress(s.worker);
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void record_failure(std::uint64_t uid, void* arg) {
  static_cast<std::vector<std::uint64_t>*>(arg)->push_back(uid);
}

TEST_P(PeerFailure, KilledPeerFailsWaitingReceives) {
  const rdmx_transport_t t = GetParam();
  EXPECT_TRUE(run_ranks(2, [&](Rank& rank) {
    Session s = open_session(rank, device_for(rank.rank(), true), t, short_timeout);
    std::uint32_t early = 42;
    if (rank.rank() == 1) {
      // Sent before dying: still received after the death is known.
      rdmx_request_t r;
      RDMX_CHECK_OK(rank,
                    rdmx_tag_send(s.eps[0], &early, sizeof(early), 9, 0, &r, nullptr, nullptr));
      quiesce(rank, s);
      rank.barrier();
      acknowledge_everything(s);
      _exit(0);  // dies without a word, having sent nothing rank 0 waits for
    }
    std::vector<std::uint64_t> failed;
    RDMX_CHECK_OK(rank, rdmx_worker_set_peer_failure_callback(s.worker, record_failure, &failed));
    quiesce(rank, s);
    rank.barrier();
    // Receive-only: nothing is sent to the dead peer, so only the liveness probes can find it.
    std::uint32_t in = 0;
    std::uint32_t any = 0;
    rdmx_request_t from1;
    rdmx_request_t from_any;
    const auto t0 = std::chrono::steady_clock::now();
    RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, &in, sizeof(in), s.uids[1], 5, ~0ull, &from1,
                                      nullptr, nullptr));
    RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, &any, sizeof(any), RDMX_ANY_SOURCE, 6, ~0ull,
                                      &from_any, nullptr, nullptr));
    rdmx_status_t st{};
    const int rc = wait_request(
        rank, s.worker, &from1, &st, "receive from a killed peer",
        std::chrono::milliseconds(static_cast<int>(quiet_detection_bound_s(t) * 1000)));
    const double secs = seconds_since(t0);
    std::printf("%s: receive from a killed peer failed after %.2f s (bound %.2f s)\n", tname(t),
                secs, quiet_detection_bound_s(t));
    RDMX_CHECK_EQ(rank, rc, RDMX_ERR_UNREACHABLE);
    RDMX_CHECK_EQ(rank, st.source, s.uids[1]);
    // Not before the probe had its chance: a quiet peer is probed after T/4, failed T later.
    RDMX_CHECK(rank, secs >= kPeerTimeoutMs / 1000.0);
    // Reported once, with its uid.
    RDMX_CHECK_EQ(rank, failed.size(), std::size_t{1});
    RDMX_CHECK_EQ(rank, failed[0], s.uids[1]);
    // The any-source receive is the caller's to fail (only it knows who could satisfy it).
    RDMX_CHECK_EQ(rank, rdmx_request_test(&from_any, nullptr), RDMX_INPROGRESS);
    RDMX_CHECK_OK(rank, rdmx_request_cancel(s.worker, &from_any));
    RDMX_CHECK_EQ(rank,
                  wait_request(rank, s.worker, &from_any, &st, "cancel", std::chrono::seconds(5)),
                  RDMX_ERR_CANCELED);
    // What it sent before dying still matches; nothing more can come from it.
    std::uint32_t got = 0;
    rdmx_request_t r;
    RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, &got, sizeof(got), s.uids[1], 9, ~0ull, &r, nullptr,
                                      nullptr));
    RDMX_CHECK_EQ(rank, wait_request(rank, s.worker, &r, &st, "early message"), RDMX_OK);
    RDMX_CHECK_EQ(rank, got, early);
    RDMX_CHECK_EQ(
        rank, rdmx_tag_recv(s.worker, &got, sizeof(got), s.uids[1], 5, ~0ull, &r, nullptr, nullptr),
        RDMX_ERR_UNREACHABLE);
    RDMX_CHECK_EQ(rank, rdmx_tag_probe(s.worker, s.uids[1], 5, ~0ull, &st, nullptr),
                  RDMX_ERR_UNREACHABLE);
    RDMX_CHECK_EQ(rank, failed.size(), std::size_t{1});
    close_session(rank, s);
  }));
}

// The same receive, waited for by a sleeper as UCP's (progress, rdmx_worker_arm, sleep until
// the event fd is readable): nothing of a dead peer makes a completion, so arming must set the
// fd's timer for the liveness probes (wakeup.cc, next_deadline_us). Before, the sleeper armed
// with no deadline and slept for ever. Each sleep may last the whole detection bound: the fd has
// to wake it.
void sleeper_config(rdmx_config_t& c) {
  short_timeout(c);
  c.shm = 0;         // a worker with a shared-memory segment never arms
  c.ring_peers = 0;  // no ring to take back (its dead writer never answers: 1-ms wakes till then)
}

TEST_P(PeerFailure, KilledPeerFailsTheReceiveOfASleepingWorker) {
  const rdmx_transport_t t = GetParam();
  EXPECT_TRUE(run_ranks(2, [&](Rank& rank) {
    Session s = open_session(rank, device_for(rank.rank(), true), t, sleeper_config);
    quiesce(rank, s);
    rank.barrier();
    if (rank.rank() == 1) {
      acknowledge_everything(s);
      _exit(0);  // dies without a word
    }
    int fd = -1;
    RDMX_CHECK_OK(rank, rdmx_worker_event_fd(s.worker, &fd));
    std::uint32_t in = 0;
    rdmx_request_t r;
    RDMX_CHECK_OK(
        rank, rdmx_tag_recv(s.worker, &in, sizeof(in), s.uids[1], 5, ~0ull, &r, nullptr, nullptr));
    const double bound_s = quiet_detection_bound_s(t);
    const auto t0 = std::chrono::steady_clock::now();
    int sleeps = 0;
    rdmx_status_t st{};
    int rc = RDMX_INPROGRESS;
    while ((rc = rdmx_request_test(&r, &st)) == RDMX_INPROGRESS) {
      if (seconds_since(t0) > bound_s) {
        rdmx::transport::debug::dump(s.worker);
        rank.fail(__FILE__, __LINE__, "the sleeper's receive from a killed peer did not fail");
      }
      if (rdmx_worker_arm(s.worker) == RDMX_OK) {
        if (!readable(fd, static_cast<int>(bound_s * 1000))) {
          rank.fail(__FILE__, __LINE__,
                    "armed while its receive waited on a killed peer, the sleeper was never woken");
        }
        ++sleeps;
      }
      (void)rdmx_worker_progress(s.worker);
    }
    const double secs = seconds_since(t0);
    std::printf("%s: a sleeper's receive from a killed peer failed after %.2f s, %d sleeps\n",
                tname(t), secs, sleeps);
    RDMX_CHECK_EQ(rank, rc, RDMX_ERR_UNREACHABLE);
    RDMX_CHECK_EQ(rank, st.source, s.uids[1]);
    RDMX_CHECK(rank, sleeps >= 2);  // it slept before the probe, and after
    close_session(rank, s);
  }));
}

TEST_P(PeerFailure, ProbeLoopOnKilledPeerEnds) {
  const rdmx_transport_t t = GetParam();
  EXPECT_TRUE(run_ranks(2, [&](Rank& rank) {
    Session s = open_session(rank, device_for(rank.rank(), true), t, short_timeout);
    quiesce(rank, s);
    rank.barrier();
    if (rank.rank() == 1) {
      acknowledge_everything(s);
      _exit(0);
    }
    // MPI_Probe on the dead rank: no request is active, only the probe loop waits.
    const auto t0 = std::chrono::steady_clock::now();
    rdmx_status_t st{};
    int rc = 0;
    while ((rc = rdmx_tag_probe(s.worker, s.uids[1], 5, ~0ull, &st, nullptr)) == 0) {
      if (rdmx_worker_progress(s.worker) == 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      if (seconds_since(t0) > quiet_detection_bound_s(t)) {
        rdmx::transport::debug::dump(s.worker);
        rank.fail(__FILE__, __LINE__, "a probe loop on a killed peer did not end");
      }
    }
    const double secs = seconds_since(t0);
    std::printf("%s: probe loop on a killed peer ended after %.2f s\n", tname(t), secs);
    RDMX_CHECK_EQ(rank, rc, RDMX_ERR_UNREACHABLE);
    close_session(rank, s);
  }));
}

// A live peer that does not call progress for longer than the timeout while we wait for it must
// not be failed. RC: its adapter answers the probe writes (2 x T asleep). UD: its progress has to
// answer the pings, which may stay unanswered for 2 x T (1.5 x T asleep).
TEST_P(PeerFailure, QuietLivePeerIsNotFailed) {
  const rdmx_transport_t t = GetParam();
  const auto asleep = std::chrono::milliseconds(t == RDMX_TRANSPORT_RC ? 2 * kPeerTimeoutMs
                                                                       : 3 * kPeerTimeoutMs / 2);
  EXPECT_TRUE(run_ranks(2, [&](Rank& rank) {
    Session s = open_session(rank, device_for(rank.rank(), true), t, short_timeout);
    quiesce(rank, s);
    std::uint32_t word = 7;
    if (rank.rank() == 1) {
      rank.barrier();
      acknowledge_everything(s);
      std::this_thread::sleep_for(asleep);  // no progress at all
      rdmx_request_t r;
      RDMX_CHECK_OK(rank,
                    rdmx_tag_send(s.eps[0], &word, sizeof(word), 11, 0, &r, nullptr, nullptr));
      quiesce(rank, s);
      close_session(rank, s);
      return;
    }
    std::vector<std::uint64_t> failed;
    RDMX_CHECK_OK(rank, rdmx_worker_set_peer_failure_callback(s.worker, record_failure, &failed));
    rank.barrier();
    std::uint32_t in = 0;
    rdmx_request_t r;
    rdmx_status_t st{};
    const auto t0 = std::chrono::steady_clock::now();
    RDMX_CHECK_OK(
        rank, rdmx_tag_recv(s.worker, &in, sizeof(in), s.uids[1], 11, ~0ull, &r, nullptr, nullptr));
    const int rc = wait_request(rank, s.worker, &r, &st, "receive from a quiet peer",
                                asleep + std::chrono::seconds(30));
    std::printf("%s: receive from a peer asleep for %.1f s completed after %.2f s: %s\n", tname(t),
                static_cast<double>(asleep.count()) / 1000.0, seconds_since(t0), rdmx_strerror(rc));
    RDMX_CHECK_EQ(rank, rc, RDMX_OK);
    RDMX_CHECK_EQ(rank, in, word);
    RDMX_CHECK(rank, failed.empty());
    quiesce(rank, s);
    close_session(rank, s);
  }));
}

// RC receive queues that run dry (RNR): rdmx's credits never let that happen, so a receiver here
// stops reposting its SRQ buffers while it keeps granting credits (debug::hold_srq_refills).
// Every message goes through the SRQs (no eager ring) and the SRQs are small.
void dry_receiver(rdmx_config_t& c) {
  short_timeout(c);
  c.ring_peers = 0;
  c.coalesce = 0;  // one message per receive buffer
  c.srq_depth = 64;
}

// Progresses until the small-message SRQ is empty, then for `then` more (the sender meets RNR
// NAKs, or fails); fails the rank after 30 s.
void progress_until_dry(Rank& rank, rdmx_worker_t* w, std::chrono::milliseconds then) {
  const auto t0 = std::chrono::steady_clock::now();
  while (rdmx::transport::debug::srq_posted(w, 0) != 0) {
    RDMX_CHECK(rank, seconds_since(t0) < 30);
    (void)rdmx_worker_progress(w);
  }
  const auto dry = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - dry < then) {
    (void)rdmx_worker_progress(w);
  }
}

// rc_rnr_retry 0: the first RNR NAK fails the sender's send (IBV_WC_RNR_RETRY_EXC_ERR). The
// connection fails, the sender's requests with RDMX_ERR_UNREACHABLE, its counter
// rnr_retry_exceeded says why, and later sends are refused.
TEST(RcRnr, RetryExceededFailsTheConnection) {
  RDMX_REQUIRE_DEVICE();
  EXPECT_TRUE(run_ranks(2, [&](Rank& rank) {
    Session s =
        open_session(rank, device_for(rank.rank(), true), RDMX_TRANSPORT_RC, [](rdmx_config_t& c) {
          dry_receiver(c);
          c.rc_rnr_retry = 0;
        });
    quiesce(rank, s);
    if (rank.rank() == 1) {
      rdmx::transport::debug::hold_srq_refills(s.worker, true);
      rank.barrier();
      // Take what arrives (credits flow back) until the SRQs are dry and the sender has failed.
      progress_until_dry(rank, s.worker, std::chrono::seconds(3));
      rank.barrier();
      close_session(rank, s);
      return;
    }
    rank.barrier();
    double secs = 0;
    const int rc = send_until_failure(rank, s, 1, nullptr, &secs);
    rdmx_stats_t st{};
    RDMX_CHECK_OK(rank, rdmx_worker_stats(s.worker, &st));
    std::printf(
        "rc: sends to a receiver with dry SRQs failed after %.2f s: %s; "
        "rnr_retry_exceeded %llu\n",
        secs, rdmx_strerror(rc), static_cast<unsigned long long>(st.rnr_retry_exceeded));
    RDMX_CHECK_EQ(rank, rc, RDMX_ERR_UNREACHABLE);
    RDMX_CHECK(rank, st.rnr_retry_exceeded >= 1);
    std::uint8_t x = 1;
    rdmx_request_t r;
    RDMX_CHECK_EQ(rank, rdmx_tag_send(s.eps[1], &x, 1, 78, 0, &r, nullptr, nullptr),
                  RDMX_ERR_UNREACHABLE);
    rank.barrier();
    close_session(rank, s);
  }));
}

// The default, rc_rnr_retry 7 (for ever): the same dry SRQs only hold the sender back, and every
// message arrives, in order and intact, once the receiver reposts its buffers.
TEST(RcRnr, RetryForeverLosesNothing) {
  RDMX_REQUIRE_DEVICE();
  constexpr int kMsgs = 400;  // several times the SRQ depth
  EXPECT_TRUE(run_ranks(2, [&](Rank& rank) {
    Session s = open_session(rank, device_for(rank.rank(), true), RDMX_TRANSPORT_RC, dry_receiver);
    quiesce(rank, s);
    if (rank.rank() == 1) {
      rdmx::transport::debug::hold_srq_refills(s.worker, true);
      rank.barrier();
      progress_until_dry(rank, s.worker, std::chrono::seconds(1));  // the sender meets RNR NAKs
      rdmx::transport::debug::hold_srq_refills(s.worker, false);
      for (std::uint64_t i = 0; i < kMsgs; ++i) {
        std::uint64_t v = 0;
        rdmx_request_t r;
        rdmx_status_t st{};
        RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, &v, sizeof(v), s.uids[0], 9, ~0ull, &r, nullptr,
                                          nullptr));
        RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &r, &st, "receive after the drain"));
        RDMX_CHECK_EQ(rank, v, i * 7919 + 1);
      }
      rank.barrier();
      close_session(rank, s);
      return;
    }
    rank.barrier();
    std::vector<rdmx_request_t> reqs(kMsgs);
    std::vector<std::uint64_t> vals(kMsgs);
    for (std::uint64_t i = 0; i < kMsgs; ++i) {
      vals[i] = i * 7919 + 1;
      RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[1], &vals[i], sizeof(vals[i]), 9, 0, &reqs[i],
                                        nullptr, nullptr));
      (void)rdmx_worker_progress(s.worker);
    }
    for (auto& r : reqs) {
      RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &r, nullptr, "send to a dry receiver"));
    }
    rdmx_stats_t st{};
    RDMX_CHECK_OK(rank, rdmx_worker_stats(s.worker, &st));
    std::printf("rc: %d messages through SRQs held dry; RNR NAKs at the sender's port %llu\n",
                kMsgs, static_cast<unsigned long long>(st.node_rnr_naks));
    RDMX_CHECK_EQ(rank, st.rnr_retry_exceeded, 0u);
    RDMX_CHECK(rank, st.node_rnr_naks >= 1);  // the SRQs did run dry (rxe counts RNR NAKs)
    rank.barrier();
    close_session(rank, s);
  }));
}

INSTANTIATE_TEST_SUITE_P(Transport, PeerFailure,
                         ::testing::Values(RDMX_TRANSPORT_RC, RDMX_TRANSPORT_UD), transport_name);

}  // namespace
}  // namespace rdmx::test
