// MPI semantics over RC and UD, two ranks on one device: receives posted before and after the
// arrival, wildcards, probe, mprobe + mrecv, cancel, synchronous send, truncation, callbacks,
// non-overtaking across size classes.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <ostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "rdmx/rdmx.h"
#include "tests/guest/support/guest_env.h"
#include "tests/transport/support/procs.h"

namespace rdmx::test {
namespace {

constexpr std::chrono::milliseconds kProbeTimeout = std::chrono::seconds(10);  // probe_until bound

constexpr std::uint64_t kAll = ~std::uint64_t{0};

class Semantics : public ::testing::TestWithParam<rdmx_transport_t> {
 protected:
  void SetUp() override { RDMX_REQUIRE_DEVICE(); }
  // Runs body(rank, session, peer) in two ranks with a session each.
  void run(const std::function<void(Rank&, Session&, int)>& body,
           const std::function<void(rdmx_config_t&)>& tweak = {}) {
    const rdmx_transport_t t = GetParam();
    EXPECT_TRUE(run_ranks(2, [&](Rank& rank) {
      Session s = open_session(rank, device_for(rank.rank(), false), t, tweak);
      body(rank, s, 1 - rank.rank());
      quiesce(rank, s);
      close_session(rank, s);
    }));
  }
};

std::string transport_name(const ::testing::TestParamInfo<rdmx_transport_t>& info) {
  return info.param == RDMX_TRANSPORT_RC ? "Rc" : "Ud";
}

// Sends `n` bytes of `fill` with `tag` and waits for the local completion. The done send must
// report its tag and length and refuse a cancel, whichever way it went (done inside the post,
// coalesced, queued, rendezvous).
void send_bytes(Rank& rank, Session& s, int peer, std::uint64_t tag, std::size_t n,
                std::uint8_t fill, unsigned flags = 0) {
  std::vector<std::uint8_t> buf(n, fill);
  rdmx_request_t req;
  rdmx_status_t st{};
  RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[static_cast<std::size_t>(peer)], buf.data(), n, tag,
                                    flags, &req, nullptr, nullptr));
  RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, &st, "send"));
  RDMX_CHECK_EQ(rank, st.tag, tag);
  RDMX_CHECK_EQ(rank, st.length, n);
  RDMX_CHECK_EQ(rank, rdmx_request_cancel(s.worker, &req), RDMX_ERR_BUSY);
}

void progress_for(Session& s, std::chrono::milliseconds d) {
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < d) {
    (void)rdmx_worker_progress(s.worker);
  }
}

TEST_P(Semantics, ReceivePostedBeforeAndAfterArrival) {
  run([](Rank& rank, Session& s, int peer) {
    if (rank.rank() == 1) {
      rank.barrier();  // rank 0 has posted its first receive
      send_bytes(rank, s, peer, 1, 100, 0xa1);
      send_bytes(rank, s, peer, 2, 100, 0xa2, RDMX_SEND_FLUSH);  // received late
      return;
    }
    std::vector<std::uint8_t> buf(100);
    rdmx_request_t req;
    rdmx_status_t st{};
    RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, buf.data(), buf.size(), s.uids[1], 1, kAll, &req,
                                      nullptr, nullptr));
    RDMX_CHECK_EQ(rank, rdmx_request_test(&req, nullptr), RDMX_INPROGRESS);
    rank.barrier();
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, &st, "pre-posted receive"));
    RDMX_CHECK_EQ(rank, st.tag, 1u);
    RDMX_CHECK_EQ(rank, buf[99], 0xa1);
    // The second message arrives unexpected: wait until it is there, then receive it.
    (void)probe_until(rank, s, s.uids[1], 2, kAll, kProbeTimeout);
    rdmx_stats_t stats{};
    RDMX_CHECK_OK(rank, rdmx_worker_stats(s.worker, &stats));
    RDMX_CHECK(rank, stats.unexpected >= 1);
    RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, buf.data(), buf.size(), s.uids[1], 2, kAll, &req,
                                      nullptr, nullptr));
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, &st, "late receive"));
    RDMX_CHECK_EQ(rank, st.source, s.uids[1]);
    RDMX_CHECK_EQ(rank, st.length, 100u);
    RDMX_CHECK_EQ(rank, buf[0], 0xa2);
  });
}

TEST_P(Semantics, WildcardsMatchTheOldestMessageInSendOrder) {
  run([](Rank& rank, Session& s, int peer) {
    // Tags: high 32 bits = "context", low 32 bits = "MPI tag".
    const std::uint64_t ctx = std::uint64_t{7} << 32;
    if (rank.rank() == 1) {
      for (std::uint64_t i = 0; i < 6; ++i) {
        send_bytes(rank, s, peer, ctx | (100 + i), 8, static_cast<std::uint8_t>(i));
      }
      send_bytes(rank, s, peer, (std::uint64_t{8} << 32) | 5, 8, 0x55);  // another context
      rank.barrier();
      return;
    }
    rank.barrier();  // everything has been sent: all of it is (or becomes) unexpected
    (void)probe_until(rank, s, RDMX_ANY_SOURCE, std::uint64_t{8} << 32, 0xffffffff00000000ull,
                      kProbeTimeout);
    std::uint8_t v = 0xff;
    rdmx_request_t req;
    rdmx_status_t st{};
    // MPI_ANY_TAG within context 7, any source: the oldest, tag 100.
    RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, &v, 1, RDMX_ANY_SOURCE, ctx, 0xffffffff00000000ull,
                                      &req, nullptr, nullptr));
    RDMX_CHECK_EQ(rank, wait_request(rank, s.worker, &req, &st, "any-tag receive"),
                  RDMX_ERR_TRUNCATED);
    RDMX_CHECK_EQ(rank, st.tag, ctx | 100);
    RDMX_CHECK_EQ(rank, st.length, 8u);
    RDMX_CHECK_EQ(rank, v, 0);
    // A specific tag skips older ones: 103.
    std::uint64_t big = 0;
    RDMX_CHECK_OK(
        rank, rdmx_tag_recv(s.worker, &big, 8, s.uids[1], ctx | 103, kAll, &req, nullptr, nullptr));
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, &st, "tag 103"));
    RDMX_CHECK_EQ(rank, st.tag, ctx | 103);
    // Any source, any tag in the context: 101, 102, 104, 105 in order.
    for (const std::uint64_t want : {101, 102, 104, 105}) {
      RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, &big, 8, RDMX_ANY_SOURCE, ctx,
                                        0xffffffff00000000ull, &req, nullptr, nullptr));
      RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, &st, "wildcard"));
      RDMX_CHECK_EQ(rank, st.tag, ctx | want);
      RDMX_CHECK_EQ(rank, st.source, s.uids[1]);
    }
    // A fully wildcarded receive (mask 0) takes the other context's message.
    RDMX_CHECK_OK(rank,
                  rdmx_tag_recv(s.worker, &big, 8, RDMX_ANY_SOURCE, 0, 0, &req, nullptr, nullptr));
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, &st, "mask 0"));
    RDMX_CHECK_EQ(rank, st.tag, (std::uint64_t{8} << 32) | 5);
    // Nothing of either context is left.
    for (const std::uint64_t c : {std::uint64_t{7}, std::uint64_t{8}}) {
      RDMX_CHECK_EQ(
          rank,
          rdmx_tag_probe(s.worker, RDMX_ANY_SOURCE, c << 32, 0xffffffff00000000ull, &st, nullptr),
          0);
    }
  });
}

TEST_P(Semantics, ProbeMprobeAndMrecv) {
  run([](Rank& rank, Session& s, int peer) {
    if (rank.rank() == 1) {
      send_bytes(rank, s, peer, 42, 300, 0x42);
      send_bytes(rank, s, peer, 42, 301, 0x43);
      return;
    }
    rdmx_status_t st = probe_until(rank, s, s.uids[1], 42, kAll, kProbeTimeout);
    RDMX_CHECK_EQ(rank, st.length, 300u);
    RDMX_CHECK_EQ(rank, st.tag, 42u);
    RDMX_CHECK_EQ(rank, st.source, s.uids[1]);
    // A plain probe leaves it: probing again sees the same message.
    st = probe_until(rank, s, RDMX_ANY_SOURCE, 0, 0, kProbeTimeout);
    RDMX_CHECK_EQ(rank, st.length, 300u);
    // mprobe removes it from matching: the next probe sees the second message.
    rdmx_message_t* m = nullptr;
    st = probe_until(rank, s, RDMX_ANY_SOURCE, 42, kAll, kProbeTimeout, &m);
    RDMX_CHECK(rank, m != nullptr);
    RDMX_CHECK_EQ(rank, st.length, 300u);
    st = probe_until(rank, s, RDMX_ANY_SOURCE, 42, kAll, kProbeTimeout);
    RDMX_CHECK_EQ(rank, st.length, 301u);
    // A receive posted now takes the second message, not the mprobed one.
    std::vector<std::uint8_t> a(400), b(400);
    rdmx_request_t ra, rb;
    RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, b.data(), b.size(), RDMX_ANY_SOURCE, 42, kAll, &rb,
                                      nullptr, nullptr));
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &rb, &st, "receive after mprobe"));
    RDMX_CHECK_EQ(rank, st.length, 301u);
    RDMX_CHECK_EQ(rank, b[300], 0x43);
    RDMX_CHECK_OK(rank, rdmx_tag_msg_recv(s.worker, m, a.data(), a.size(), &ra, nullptr, nullptr));
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &ra, &st, "mrecv"));
    RDMX_CHECK_EQ(rank, st.length, 300u);
    RDMX_CHECK_EQ(rank, st.source, s.uids[1]);
    RDMX_CHECK_EQ(rank, a[0], 0x42);
    RDMX_CHECK_EQ(rank, a[299], 0x42);
    RDMX_CHECK_EQ(rank, a[300], 0);
  });
}

struct CallbackLog {
  int calls = 0;
  int last_error = 1;
  bool inside_post = false;
  bool called_inside_post = false;
};

void log_callback(rdmx_request_t*, const rdmx_status_t* st, void* user) {
  auto* log = static_cast<CallbackLog*>(user);
  ++log->calls;
  log->last_error = st->error;
  log->called_inside_post |= log->inside_post;
}

TEST_P(Semantics, CancelOfAPostedReceive) {
  run([](Rank& rank, Session& s, int peer) {
    std::uint8_t buf[16];
    rdmx_request_t req;
    CallbackLog log;
    log.inside_post = true;
    RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, buf, sizeof(buf), RDMX_ANY_SOURCE, 999, kAll, &req,
                                      log_callback, &log));
    log.inside_post = false;
    RDMX_CHECK_OK(rank, rdmx_request_cancel(s.worker, &req));
    RDMX_CHECK_EQ(rank, log.calls, 0);  // callbacks run from progress, never inside a call
    rdmx_status_t st{};
    RDMX_CHECK_EQ(rank, wait_request(rank, s.worker, &req, &st, "cancelled receive"),
                  RDMX_ERR_CANCELED);
    RDMX_CHECK_EQ(rank, st.error, RDMX_ERR_CANCELED);
    RDMX_CHECK_EQ(rank, log.calls, 1);
    RDMX_CHECK_EQ(rank, log.last_error, RDMX_ERR_CANCELED);
    RDMX_CHECK(rank, !log.called_inside_post);
    // Cancelling a completed request, or a send, is BUSY; a cancelled receive matches nothing.
    RDMX_CHECK_EQ(rank, rdmx_request_cancel(s.worker, &req), RDMX_ERR_BUSY);
    rank.barrier();  // both ranks cancelled before either sends tag 999
    rdmx_request_t sreq;
    std::uint8_t x = 1;
    RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[static_cast<std::size_t>(peer)], &x, 1, 999, 0, &sreq,
                                      nullptr, nullptr));
    RDMX_CHECK_EQ(rank, rdmx_request_cancel(s.worker, &sreq), RDMX_ERR_BUSY);
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &sreq, nullptr, "send"));
    // The peer's tag-999 message is received by a new receive, not the cancelled one.
    RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, buf, sizeof(buf), RDMX_ANY_SOURCE, 999, kAll, &req,
                                      nullptr, nullptr));
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, &st, "receive after cancel"));
    RDMX_CHECK_EQ(rank, log.calls, 1);
  });
}

// rdmx_tag_recv_fail_any_source fails exactly the posted wildcard-source receives whose tag
// agrees in the mask's bits (a host's group, here the top 16 bits): with RDMX_ERR_UNREACHABLE,
// nothing received, the callback from progress. A receive of another group, or naming its source,
// stays posted and still takes its message.
TEST_P(Semantics, FailAnySourcePicksOnlyTheGroupsWildcardReceives) {
  run([](Rank& rank, Session& s, int peer) {
    constexpr std::uint64_t kGroupMask = 0xffff000000000000;
    constexpr std::uint64_t kGroup1 = std::uint64_t{1} << 48;
    constexpr std::uint64_t kGroup2 = std::uint64_t{2} << 48;
    std::uint8_t a[8] = {}, b[8] = {}, c[8] = {}, d[8] = {};
    rdmx_request_t ra, rb, rc, rd;
    CallbackLog log;
    // a: group 1, tag 5; b: group 1, any tag; c: group 2, tag 5 (all from any source);
    // d: group 1, tag 7, from the peer by name.
    RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, a, sizeof(a), RDMX_ANY_SOURCE, kGroup1 | 5, kAll,
                                      &ra, log_callback, &log));
    RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, b, sizeof(b), RDMX_ANY_SOURCE, kGroup1, kGroupMask,
                                      &rb, nullptr, nullptr));
    RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, c, sizeof(c), RDMX_ANY_SOURCE, kGroup2 | 5, kAll,
                                      &rc, nullptr, nullptr));
    RDMX_CHECK_OK(rank,
                  rdmx_tag_recv(s.worker, d, sizeof(d), s.uids[static_cast<std::size_t>(peer)],
                                kGroup1 | 7, kAll, &rd, nullptr, nullptr));
    RDMX_CHECK_EQ(rank, rdmx_tag_recv_fail_any_source(nullptr, kGroup1, kGroupMask),
                  RDMX_ERR_INVALID_PARAM);
    RDMX_CHECK_EQ(rank, rdmx_tag_recv_fail_any_source(s.worker, kGroup1, kGroupMask), 2);
    RDMX_CHECK_EQ(rank, log.calls, 0);  // callbacks run from progress, never inside a call
    RDMX_CHECK_EQ(rank, rdmx_tag_recv_fail_any_source(s.worker, kGroup1, kGroupMask), 0);
    rdmx_status_t st{};
    RDMX_CHECK_EQ(rank, wait_request(rank, s.worker, &ra, &st, "failed receive a"),
                  RDMX_ERR_UNREACHABLE);
    RDMX_CHECK_EQ(rank, st.length, 0u);
    RDMX_CHECK_EQ(rank, log.calls, 1);
    RDMX_CHECK_EQ(rank, log.last_error, RDMX_ERR_UNREACHABLE);
    RDMX_CHECK_EQ(rank, wait_request(rank, s.worker, &rb, &st, "failed receive b"),
                  RDMX_ERR_UNREACHABLE);
    RDMX_CHECK_EQ(rank, rdmx_request_test(&rc, nullptr), RDMX_INPROGRESS);
    RDMX_CHECK_EQ(rank, rdmx_request_test(&rd, nullptr), RDMX_INPROGRESS);
    rank.barrier();  // both ranks failed theirs before either sends
    send_bytes(rank, s, peer, kGroup2 | 5, sizeof(c), 0xc2);
    send_bytes(rank, s, peer, kGroup1 | 7, sizeof(d), 0xd1);
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &rc, &st, "group 2 wildcard receive"));
    RDMX_CHECK_EQ(rank, st.tag, kGroup2 | 5);
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &rd, &st, "named-source receive"));
    RDMX_CHECK_EQ(rank, st.tag, kGroup1 | 7);
    for (std::size_t i = 0; i < sizeof(c); ++i) {
      RDMX_CHECK_EQ(rank, c[i], 0xc2);
      RDMX_CHECK_EQ(rank, d[i], 0xd1);
      RDMX_CHECK_EQ(rank, a[i], 0);  // nothing landed in the failed ones
      RDMX_CHECK_EQ(rank, b[i], 0);
    }
  });
}

// A bounded wait returns RDMX_ERR_TIMED_OUT once its time is up, not before and not long after
// (it naps when idle, up to a millisecond at a time), and leaves the request posted: the message
// sent afterwards completes that same request.
TEST_P(Semantics, WaitTimesOutAndLeavesTheRequestPosted) {
  run([](Rank& rank, Session& s, int peer) {
    constexpr int kTimeoutMs = 1500;
    std::uint8_t buf[16] = {};
    rdmx_request_t req;
    RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, buf, sizeof(buf), RDMX_ANY_SOURCE, 998, kAll, &req,
                                      nullptr, nullptr));
    const auto t0 = std::chrono::steady_clock::now();
    RDMX_CHECK_EQ(rank, rdmx_request_wait(s.worker, &req, nullptr, kTimeoutMs), RDMX_ERR_TIMED_OUT);
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    RDMX_CHECK(rank, ms >= kTimeoutMs);
    RDMX_CHECK(rank, ms < kTimeoutMs + 1000);
    RDMX_CHECK_EQ(rank, rdmx_request_test(&req, nullptr), RDMX_INPROGRESS);
    rank.barrier();  // both ranks timed out before either sends tag 998
    rdmx_request_t sreq;
    std::uint8_t x = 0x5a;
    RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[static_cast<std::size_t>(peer)], &x, 1, 998,
                                      RDMX_SEND_FLUSH, &sreq, nullptr, nullptr));
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &sreq, nullptr, "send"));
    rdmx_status_t st{};
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, &st, "receive after the timeout"));
    RDMX_CHECK_EQ(rank, st.length, std::size_t{1});
    RDMX_CHECK_EQ(rank, buf[0], std::uint8_t{0x5a});
  });
}

// rdmx_worker_idle, for a wait loop outside rdmx (an MPI library's): idle turns yield once they
// have found nothing for yield_after_us, and sleep once they have for nap_after_us, never before,
// and not while the turns report events (idle_backoff_unit_test: the loop gap). Counted by
// rdmx_stats_t.idle_yields and idle_naps.
TEST_P(Semantics, WorkerIdleYieldsAndNapsOnlyAfterTheirThresholds) {
  run([](Rank& rank, Session& s, int) {
    const auto counts = [&] {
      rdmx_stats_t st{};
      RDMX_CHECK_OK(rank, rdmx_worker_stats(s.worker, &st));
      return std::pair{st.idle_yields, st.idle_naps};
    };
    // 10 ms of turns (20 for the naps: a turn late past the loop gap, preempted, starts the
    // count again), each reporting `events` if given, else what progress found.
    const auto loop = [&](std::uint32_t yield_after_us, std::uint32_t nap_after_us, int events,
                          double seconds = 0.01) {
      const auto t0 = std::chrono::steady_clock::now();
      while (seconds_since(t0) < seconds) {
        const int found = rdmx_worker_progress(s.worker);
        RDMX_CHECK(rank, found >= 0);
        rdmx_worker_idle(s.worker, events > 0 ? events : found, yield_after_us, nap_after_us);
      }
    };
    const auto [yields, naps] = counts();
    loop(1'000'000, RDMX_IDLE_NEVER, 0);  // a threshold never reached
    RDMX_CHECK_EQ(rank, counts().first, yields);
    loop(100, 1000, 1);  // busy turns
    RDMX_CHECK(rank, counts() == std::pair(yields, naps));
    loop(100, 1'000'000, 0);  // yields, and no nap before its threshold
    RDMX_CHECK(rank, counts().first > yields);
    RDMX_CHECK_EQ(rank, counts().second, naps);
    loop(100, 1000, 0, 0.02);
    RDMX_CHECK(rank, counts().second > naps);
    const std::uint64_t napped = counts().second;
    loop(100, RDMX_IDLE_NEVER, 0);  // never, however long idle
    RDMX_CHECK_EQ(rank, counts().second, napped);
    // A call 20 ms after the last (a test between compute steps: past kIdleLoopGapUs) starts
    // the count again: it neither yields nor naps, though idle for 50 ms.
    const auto before_gap = counts();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    rdmx_worker_idle(s.worker, 0, 100, 1000);
    RDMX_CHECK(rank, counts() == before_gap);
  });
}

// rdmx_worker_poll: extra polls only for a call that comes right after an idle one (a wait loop's
// turn), never with a gap of 0 or after a pause longer than the gap; and it hands back the
// events it finds. Counted by rdmx_stats_t.spin_polls (the first call of all: the unit test).
TEST_P(Semantics, WorkerPollSpinsOnlyRightAfterAnIdleCall) {
  run([](Rank& rank, Session& s, int peer) {
    const auto spins = [&] {
      rdmx_stats_t st{};
      RDMX_CHECK_OK(rank, rdmx_worker_stats(s.worker, &st));
      return st.spin_polls;
    };
    constexpr std::uint32_t kGapUs = 1'000'000;  // a turn of this loop is far shorter
    // After an idle call, an idle call with a gap of 0 polls once, and the idle call right after
    // it with kGapUs polls 8 times. Tried again while traffic left from the set-up (a UD ack)
    // makes a call find something, which ends its polling early.
    bool spun = false;
    for (int attempt = 0; attempt < 1000 && !spun; ++attempt) {
      if (rdmx_worker_poll(s.worker, 1, 0) != 0) {
        continue;
      }
      std::uint64_t before = spins();
      if (rdmx_worker_poll(s.worker, 8, 0) != 0) {
        continue;
      }
      RDMX_CHECK_EQ(rank, spins(), before);
      before = spins();
      if (rdmx_worker_poll(s.worker, 8, kGapUs) != 0) {
        continue;
      }
      RDMX_CHECK_EQ(rank, spins(), before + 7);
      spun = true;
    }
    RDMX_CHECK(rank, spun);
    // After an idle call, a pause longer than the gap: one poll, whatever it finds.
    const std::uint64_t before = spins();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    (void)rdmx_worker_poll(s.worker, 8, 10'000);
    RDMX_CHECK_EQ(rank, spins(), before);
    rank.barrier();
    // A message found in a spinning call is returned and its receive completes.
    std::uint8_t in = 0;
    std::uint8_t out = static_cast<std::uint8_t>(0x30 + rank.rank());
    rdmx_request_t rreq, sreq;
    RDMX_CHECK_OK(
        rank, rdmx_tag_recv(s.worker, &in, 1, RDMX_ANY_SOURCE, 77, kAll, &rreq, nullptr, nullptr));
    RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[static_cast<std::size_t>(peer)], &out, 1, 77,
                                      RDMX_SEND_FLUSH, &sreq, nullptr, nullptr));
    const auto t0 = std::chrono::steady_clock::now();
    int found = 0;
    while (rdmx_request_test(&rreq, nullptr) == RDMX_INPROGRESS && seconds_since(t0) < 10) {
      const int events = rdmx_worker_poll(s.worker, 1000, kGapUs);
      RDMX_CHECK(rank, events >= 0);
      found += events;
    }
    RDMX_CHECK(rank, found > 0);
    RDMX_CHECK_EQ(rank, in, static_cast<std::uint8_t>(0x30 + peer));
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &sreq, nullptr, "send"));
  });
}

TEST_P(Semantics, SyncSendCompletesOnlyOnceMatched) {
  run([](Rank& rank, Session& s, int peer) {
    if (rank.rank() == 1) {
      std::uint8_t buf[64] = {};
      rdmx_request_t ssend, plain;
      RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[static_cast<std::size_t>(peer)], buf, 64, 5,
                                        RDMX_SEND_SYNC, &ssend, nullptr, nullptr));
      RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[static_cast<std::size_t>(peer)], buf, 64, 6, 0,
                                        &plain, nullptr, nullptr));
      // The standard send completes without a receive; the synchronous one must not.
      RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &plain, nullptr, "standard send"));
      progress_for(s, std::chrono::milliseconds(300));
      RDMX_CHECK_EQ(rank, rdmx_request_test(&ssend, nullptr), RDMX_INPROGRESS);
      rank.barrier();  // now rank 0 posts the receive
      RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &ssend, nullptr, "synchronous send"));
      // A sync send whose receive was posted first.
      rank.barrier();
      RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[static_cast<std::size_t>(peer)], buf, 0, 7,
                                        RDMX_SEND_SYNC, &ssend, nullptr, nullptr));
      RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &ssend, nullptr, "sync send 2"));
      return;
    }
    std::uint8_t buf[64];
    rdmx_request_t req, req2;
    rank.barrier();
    RDMX_CHECK_OK(rank,
                  rdmx_tag_recv(s.worker, buf, 64, s.uids[1], 5, kAll, &req, nullptr, nullptr));
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, nullptr, "sync receive"));
    RDMX_CHECK_OK(rank,
                  rdmx_tag_recv(s.worker, buf, 64, s.uids[1], 6, kAll, &req, nullptr, nullptr));
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, nullptr, "plain receive"));
    RDMX_CHECK_OK(rank,
                  rdmx_tag_recv(s.worker, buf, 64, s.uids[1], 7, kAll, &req2, nullptr, nullptr));
    rank.barrier();
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req2, nullptr, "receive of sync send 2"));
  });
}

TEST_P(Semantics, TruncationReportsTheRealLengthAndWritesNothingPastTheBuffer) {
  run([](Rank& rank, Session& s, int peer) {
    const std::size_t n = 700;
    if (rank.rank() == 1) {
      std::vector<std::uint8_t> out(n);
      for (std::size_t i = 0; i < n; ++i) {
        out[i] = static_cast<std::uint8_t>(i);
      }
      for (const std::uint64_t tag : {1, 2}) {
        rdmx_request_t req;
        RDMX_CHECK_OK(
            rank, rdmx_tag_send(s.eps[static_cast<std::size_t>(peer)], out.data(), n, tag,
                                tag == 2 ? unsigned{RDMX_SEND_SYNC} : 0u, &req, nullptr, nullptr));
        RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, nullptr, "send"));
      }
      return;
    }
    for (const std::uint64_t tag : {1, 2}) {          // matched on arrival, then matched unexpected
      std::vector<std::uint8_t> buf(100 + 64, 0xcd);  // 100 usable, 64 canary bytes
      rdmx_request_t req;
      rdmx_status_t st{};
      if (tag == 2) {
        (void)probe_until(rank, s, RDMX_ANY_SOURCE, 2, kAll, kProbeTimeout);
      }
      RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, buf.data(), 100, RDMX_ANY_SOURCE, tag, kAll, &req,
                                        nullptr, nullptr));
      RDMX_CHECK_EQ(rank, wait_request(rank, s.worker, &req, &st, "short receive"),
                    RDMX_ERR_TRUNCATED);
      RDMX_CHECK_EQ(rank, st.error, RDMX_ERR_TRUNCATED);
      RDMX_CHECK_EQ(rank, st.length, n);  // the real length
      RDMX_CHECK_EQ(rank, st.tag, tag);
      for (std::size_t i = 0; i < 100; ++i) {
        RDMX_CHECK_EQ(rank, buf[i], static_cast<std::uint8_t>(i));
      }
      for (std::size_t i = 100; i < buf.size(); ++i) {
        RDMX_CHECK_EQ(rank, buf[i], 0xcd);
      }
    }
  });
}

TEST_P(Semantics, NonOvertakingAcrossSizeClasses) {
  // Alternating small and large messages (two QPs on RC, two UD QPs), one tag, all posted at
  // once and received by wildcard receives: they must arrive in send order.
  const bool rc = GetParam() == RDMX_TRANSPORT_RC;
  run([rc](Rank& rank, Session& s, int peer) {
    const int n = 400;
    const std::vector<std::size_t> sizes =
        rc ? std::vector<std::size_t>{8, 3000, 1, 8000, 600, 2000}
           : std::vector<std::size_t>{8, 900, 1, 990, 600, 300};
    if (rank.rank() == 1) {
      // A send may read its buffer until it completes: one buffer per send.
      std::vector<std::vector<std::uint8_t>> bufs(n);
      std::vector<rdmx_request_t> reqs(n);
      for (int i = 0; i < n; ++i) {
        const std::size_t len = sizes[static_cast<std::size_t>(i) % sizes.size()];
        auto& b = bufs[static_cast<std::size_t>(i)];
        b.assign(len, static_cast<std::uint8_t>(i));
        std::memcpy(b.data(), &i, std::min(len, sizeof(i)));
        RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[static_cast<std::size_t>(peer)], b.data(), len, 77,
                                          0, &reqs[static_cast<std::size_t>(i)], nullptr, nullptr));
      }
      for (auto& r : reqs) {
        RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &r, nullptr, "send"));
      }
      return;
    }
    std::vector<std::uint8_t> buf(8192);
    for (int i = 0; i < n; ++i) {
      rdmx_request_t req;
      rdmx_status_t st{};
      RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, buf.data(), buf.size(), RDMX_ANY_SOURCE, 0, 0,
                                        &req, nullptr, nullptr));
      RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, &st, "receive"));
      const std::size_t len = sizes[static_cast<std::size_t>(i) % sizes.size()];
      RDMX_CHECK_EQ(rank, st.length, len);
      if (len >= sizeof(int)) {
        int got = -1;
        std::memcpy(&got, buf.data(), sizeof(got));
        RDMX_CHECK_EQ(rank, got, i);
        RDMX_CHECK_EQ(rank, buf[len - 1], static_cast<std::uint8_t>(len > 4 ? i : buf[len - 1]));
      } else {
        RDMX_CHECK_EQ(rank, buf[0], static_cast<std::uint8_t>(i));
      }
    }
  });
}

TEST_P(Semantics, InvalidArgumentsAreRefusedAndAcceptNothing) {
  run([](Rank& rank, Session& s, int peer) {
    rdmx_ep_t* ep = s.eps[static_cast<std::size_t>(peer)];
    rdmx_request_t req{};
    std::uint8_t b[8] = {};
    RDMX_CHECK_EQ(rank, rdmx_tag_send(nullptr, b, 1, 0, 0, &req, nullptr, nullptr),
                  RDMX_ERR_INVALID_PARAM);
    RDMX_CHECK_EQ(rank, rdmx_tag_send(ep, b, 1, 0, 0, nullptr, nullptr, nullptr),
                  RDMX_ERR_INVALID_PARAM);
    RDMX_CHECK_EQ(rank, rdmx_tag_send(ep, nullptr, 1, 0, 0, &req, nullptr, nullptr),
                  RDMX_ERR_INVALID_PARAM);
    RDMX_CHECK_EQ(rank, rdmx_tag_send(ep, b, 1, 0, 0x80, &req, nullptr, nullptr),
                  RDMX_ERR_INVALID_PARAM);
    RDMX_CHECK_EQ(rank, rdmx_tag_recv(nullptr, b, 1, 0, 0, 0, &req, nullptr, nullptr),
                  RDMX_ERR_INVALID_PARAM);
    RDMX_CHECK_EQ(rank, rdmx_tag_recv(s.worker, nullptr, 1, 0, 0, 0, &req, nullptr, nullptr),
                  RDMX_ERR_INVALID_PARAM);
    RDMX_CHECK_EQ(rank, rdmx_tag_recv(s.worker, b, 1, 0, 0, 0, nullptr, nullptr, nullptr),
                  RDMX_ERR_INVALID_PARAM);
    rdmx_request_t zero{};
    RDMX_CHECK_EQ(rank, rdmx_request_test(&zero, nullptr), RDMX_ERR_INVALID_PARAM);
    RDMX_CHECK_EQ(rank, rdmx_request_test(nullptr, nullptr), RDMX_ERR_INVALID_PARAM);
    RDMX_CHECK_EQ(rank, rdmx_request_wait(s.worker, &zero, nullptr, 0), RDMX_ERR_INVALID_PARAM);
    RDMX_CHECK_EQ(rank, rdmx_request_cancel(s.worker, &zero), RDMX_ERR_INVALID_PARAM);
    RDMX_CHECK_EQ(rank, rdmx_tag_msg_recv(s.worker, nullptr, b, 1, &req, nullptr, nullptr),
                  RDMX_ERR_INVALID_PARAM);
    RDMX_CHECK_EQ(rank, rdmx_worker_progress(nullptr), RDMX_ERR_INVALID_PARAM);
    RDMX_CHECK_EQ(rank, rdmx_worker_stats(s.worker, nullptr), RDMX_ERR_INVALID_PARAM);
    const void* a = nullptr;
    std::size_t len = 0;
    RDMX_CHECK_EQ(rank, rdmx_worker_address(s.worker, nullptr, &len), RDMX_ERR_INVALID_PARAM);
    RDMX_CHECK_OK(rank, rdmx_worker_address(s.worker, &a, &len));
    // Malformed and foreign address blobs.
    std::vector<std::uint8_t> blob(static_cast<const std::uint8_t*>(a),
                                   static_cast<const std::uint8_t*>(a) + len);
    rdmx_ep_t* bad = nullptr;
    RDMX_CHECK_EQ(rank, rdmx_ep_create(s.worker, blob.data(), len - 1, &bad), RDMX_ERR_BAD_ADDRESS);
    blob[4] ^= 0xff;  // version
    RDMX_CHECK_EQ(rank, rdmx_ep_create(s.worker, blob.data(), len, &bad), RDMX_ERR_BAD_ADDRESS);
    RDMX_CHECK_EQ(rank, rdmx_ep_create(s.worker, nullptr, len, &bad), RDMX_ERR_INVALID_PARAM);
    RDMX_CHECK(rank, bad == nullptr);
    // An invalid configuration names the problem.
    rdmx_config_t cfg;
    rdmx_config_init(&cfg);
    cfg.large_buf_size = 10;
    rdmx_worker_t* w = nullptr;
    RDMX_CHECK_EQ(rank, rdmx_worker_create(&cfg, &w), RDMX_ERR_INVALID_PARAM);
    RDMX_CHECK(rank, w == nullptr);
    rdmx_config_init(&cfg);
    cfg.device = "no-such-device";
    RDMX_CHECK_EQ(rank, rdmx_worker_create(&cfg, &w), RDMX_ERR_NO_DEVICE);
    RDMX_CHECK_EQ(rank, rdmx_worker_create(&cfg, nullptr), RDMX_ERR_INVALID_PARAM);
    // The refused calls accepted nothing: the session still works.
    send_bytes(rank, s, peer, 3, 8, 3);
    RDMX_CHECK_OK(rank,
                  rdmx_tag_recv(s.worker, b, 8, RDMX_ANY_SOURCE, 3, kAll, &req, nullptr, nullptr));
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, nullptr, "receive"));
  });
}

TEST_P(Semantics, SendToSelf) {
  run([](Rank& rank, Session& s, int) {
    const void* a = nullptr;
    std::size_t len = 0;
    RDMX_CHECK_OK(rank, rdmx_worker_address(s.worker, &a, &len));
    rdmx_ep_t* self = nullptr;
    RDMX_CHECK_OK(rank, rdmx_ep_create(s.worker, a, len, &self));
    char out[32] = "to myself", in[32] = {};
    rdmx_request_t sreq, rreq;
    rdmx_status_t st{};
    RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, in, sizeof(in), rdmx_worker_uid(s.worker), 9, kAll,
                                      &rreq, nullptr, nullptr));
    RDMX_CHECK_OK(
        rank, rdmx_tag_send(self, out, sizeof(out), 9, RDMX_SEND_SYNC, &sreq, nullptr, nullptr));
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &rreq, &st, "self receive"));
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &sreq, nullptr, "self sync send"));
    RDMX_CHECK_EQ(rank, st.source, rdmx_worker_uid(s.worker));
    RDMX_CHECK(rank, std::strcmp(in, "to myself") == 0);
    rdmx_ep_destroy(self);
  });
}

INSTANTIATE_TEST_SUITE_P(Transport, Semantics,
                         ::testing::Values(RDMX_TRANSPORT_RC, RDMX_TRANSPORT_UD), transport_name);

}  // namespace
}  // namespace rdmx::test
