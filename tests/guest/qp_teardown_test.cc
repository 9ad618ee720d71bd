// QueuePair::shutdown(), the one teardown sequence (verbs/qp.h): every posted wr_id comes back
// exactly once, completed or flushed; an SRQ-attached QP waits (bounded) for LAST_WQE_REACHED;
// a UD QP still in a multicast group is not destroyed.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>

#include "tests/guest/support/verbs_fixture.h"
#include "tests/guest/support/watchdog.h"
#include "verbs/ah.h"
#include "verbs/async_event.h"
#include "verbs/error.h"

namespace rdmx::test {
namespace {

using namespace std::chrono_literals;
using verbs::TeardownReport;

// Every completion the test sees, before and during teardown, by wr_id.
struct Ledger {
  std::map<std::uint64_t, std::vector<ibv_wc_status>> seen;
  void add(const ibv_wc& wc) { seen[wc.wr_id].push_back(wc.status); }
  void add(const std::vector<ibv_wc>& wcs) {
    for (const ibv_wc& wc : wcs) {
      add(wc);
    }
  }
  int count(std::uint64_t id) const {
    auto it = seen.find(id);
    return it == seen.end() ? 0 : static_cast<int>(it->second.size());
  }
  ibv_wc_status status(std::uint64_t id) const { return seen.at(id).front(); }
};

void print(const char* who, const TeardownReport& r) {
  std::printf(
      "%s teardown: completions %zu (flushed %zu, failed %zu) markers send %s/%s recv %s/%s "
      "last_wqe %s%s (%lld us) drain_timeout %d destroy %d\n",
      who, r.completions, r.flushed, r.failed, r.send_marker_posted ? "posted" : "-",
      r.send_marker_returned ? "back" : "-", r.recv_marker_posted ? "posted" : "-",
      r.recv_marker_returned ? "back" : "-", r.last_wqe_awaited ? "awaited " : "not awaited",
      r.last_wqe_awaited ? (r.last_wqe_reached ? "REACHED" : "NEVER CAME") : "",
      static_cast<long long>(r.last_wqe_wait.count()), r.drain_timed_out ? 1 : 0, r.destroy_error);
}

class QpTeardownTest : public VerbsTest {};

TEST_F(QpTeardownTest, RcEveryPostedWrIdComesBackExactlyOnce) {
  constexpr std::uint64_t kRecvs = 8;   // A's receives: nobody sends to A, all are flushed
  constexpr std::uint64_t kSends = 6;   // A's sends to B
  constexpr std::uint64_t kBRecvs = 3;  // B takes only 3; the 4th send waits on RNR for ever
  CompletionQueue a_send_cq = CompletionQueue::create(dev->ctx, 64);
  CompletionQueue a_recv_cq = CompletionQueue::create(dev->ctx, 64);
  CompletionQueue b_cq = CompletionQueue::create(dev->ctx, 64);
  QueuePair a = QueuePair::create(*pd, QpConfig{.type = IBV_QPT_RC,
                                                .send_cq = &a_send_cq,
                                                .recv_cq = &a_recv_cq,
                                                .caps = {.max_send_wr = 16, .max_recv_wr = 16}});
  QueuePair b = QueuePair::create(*pd, QpConfig{.type = IBV_QPT_RC,
                                                .send_cq = &b_cq,
                                                .recv_cq = &b_cq,
                                                .caps = {.max_send_wr = 4, .max_recv_wr = 8}});
  Buffer abuf(*pd, kKiB64);
  Buffer bbuf(*pd, kKiB64);
  connect_rc_pair(*dev, a, b);  // rnr_retry 7: A's 4th send retries until teardown

  RecvChain arecv = make_recv_chain(abuf, kRecvs, 256, 0x100);
  ASSERT_TRUE(a.post_recv(arecv.head()));
  RecvChain brecv = make_recv_chain(bbuf, kBRecvs, 256, 0x900);
  ASSERT_TRUE(b.post_recv(brecv.head()));
  for (std::uint64_t i = 0; i < kSends; ++i) {
    post_send(a, abuf, kKiB32 + i * 64, 64, 0x200 + i);
  }

  Ledger ledger;
  // Wait until B took its 3 and A saw their 3 acknowledgements; the rest is stuck on RNR.
  ledger.add(poll_n(a_send_cq.get(), kBRecvs));
  ASSERT_EQ(poll_n(b_cq.get(), kBRecvs).size(), kBRecvs);

  Watchdog guard(30s, "RC QP teardown");
  const TeardownReport r = a.shutdown([&](const ibv_wc& wc) { ledger.add(wc); });
  print("A", r);
  EXPECT_EQ(r.destroy_error, 0);
  EXPECT_FALSE(r.drain_timed_out);
  EXPECT_TRUE(r.send_marker_returned);
  EXPECT_TRUE(r.recv_marker_returned);
  EXPECT_EQ(a.get(), nullptr);
  EXPECT_EQ(a.post_send(nullptr).error, ESHUTDOWN) << "no posting after shutdown began";

  std::size_t ok = 0;
  std::size_t flushed = 0;
  for (std::uint64_t i = 0; i < kSends; ++i) {
    ASSERT_EQ(ledger.count(0x200 + i), 1) << "send wr_id " << 0x200 + i;
    (ledger.status(0x200 + i) == IBV_WC_SUCCESS ? ok : flushed) += 1;
    if (ledger.status(0x200 + i) != IBV_WC_SUCCESS) {
      EXPECT_EQ(ledger.status(0x200 + i), IBV_WC_WR_FLUSH_ERR);
    }
  }
  EXPECT_EQ(ok, kBRecvs);
  EXPECT_EQ(flushed, kSends - kBRecvs);
  for (std::uint64_t i = 0; i < kRecvs; ++i) {
    ASSERT_EQ(ledger.count(0x100 + i), 1) << "recv wr_id " << 0x100 + i;
    EXPECT_EQ(ledger.status(0x100 + i), IBV_WC_WR_FLUSH_ERR);
  }
  EXPECT_EQ(ledger.seen.size(), kSends + kRecvs) << "a wr_id nobody posted came back";

  // B: its receives were all consumed, so nothing is left to come back.
  const TeardownReport rb = b.shutdown([&](const ibv_wc& wc) {
    ADD_FAILURE() << "B: unexpected wr_id " << wc.wr_id << " " << wc_status(wc);
  });
  print("B", rb);
  EXPECT_EQ(rb.destroy_error, 0);
}

TEST_F(QpTeardownTest, OverfilledRqChainPostsExactlyWhatItReportsCountedByFlushes) {
  constexpr std::size_t kChain = 1024;  // far beyond any size this QP can get
  CompletionQueue cq = CompletionQueue::create(dev->ctx, 2 * kChain);
  QueuePair qp = QueuePair::create(*pd, QpConfig{.type = IBV_QPT_RC,
                                                 .send_cq = &cq,
                                                 .recv_cq = &cq,
                                                 .caps = {.max_send_wr = 4, .max_recv_wr = 16}});
  qp.to_init(verbs::RcInitAttr{.port_num = dev->port});
  Buffer buf(*pd, kKiB64);
  RecvChain chain = make_recv_chain(buf, kChain, 64, 0);
  const verbs::ChainPostResult r = qp.post_recv(chain.head());
  // The device's RQ holds at least caps().max_recv_wr plus the marker's reserved slot; it may
  // hold more than ibv_create_qp reported (rxe rounds its rings up to a power of two).
  std::printf("RAW %s: RQ reported %u (+1 reserved), actually took %zu; error %s at index %zu\n",
              dev->ctx.name().c_str(), qp.caps().max_recv_wr, r.posted,
              verbs::errno_name(r.error).c_str(), r.bad_index());
  EXPECT_NE(r.error, 0);
  EXPECT_GE(r.posted, qp.caps().max_recv_wr + 1u);
  ASSERT_LT(r.posted, kChain);
  EXPECT_EQ(r.bad_wr, &chain.wrs[r.posted]);

  // Flushed at teardown: exactly the WRs before bad_wr, each once, none after it.
  Ledger ledger;
  const TeardownReport t = qp.shutdown([&](const ibv_wc& wc) { ledger.add(wc); });
  print("overfilled", t);
  EXPECT_FALSE(t.recv_marker_posted) << "the RQ was full, so the marker could not go in";
  EXPECT_FALSE(t.drain_timed_out);
  EXPECT_EQ(t.flushed, r.posted);
  for (std::uint64_t id = 0; id < r.posted; ++id) {
    EXPECT_EQ(ledger.count(id), 1) << "wr_id " << id;
  }
  EXPECT_EQ(ledger.seen.size(), r.posted) << "a WR at or after bad_wr was posted";
  EXPECT_EQ(t.destroy_error, 0);
}

TEST_F(QpTeardownTest, SrqAttachedQpWaitsBoundedForLastWqeReached) {
  verbs::AsyncEventReader events(dev->ctx);
  SrqRig rig(*dev, *pd, 16, 16);
  RecvChain chain = make_recv_chain(rig.rbuf, 4, SrqRig::kSlotBytes, 0x40);
  ASSERT_TRUE(rig.srq.post(chain.head()));
  rig.send(2, 0x600);
  ASSERT_EQ(poll_n(rig.send_cq.get(), 2).size(), 2u);  // acked: both receives completed

  Watchdog guard(30s, "SRQ-attached QP teardown");
  Ledger ledger;
  constexpr auto kLastWqeTimeout = 500ms;
  const TeardownReport r = rig.receiver.shutdown(
      [&](const ibv_wc& wc) { ledger.add(wc); },
      verbs::TeardownOptions{.events = &events, .last_wqe_timeout = kLastWqeTimeout});
  print("SRQ receiver", r);
  std::printf("RAW %s: IBV_EVENT_QP_LAST_WQE_REACHED %s\n", dev->ctx.name().c_str(),
              r.last_wqe_reached ? "was sent" : "was NOT sent within 500 ms");
  RecordProperty("last_wqe_reached", r.last_wqe_reached ? "yes" : "no");
  EXPECT_TRUE(r.last_wqe_awaited);
  if (!r.last_wqe_reached) {
    EXPECT_GE(r.last_wqe_wait, kLastWqeTimeout);
    EXPECT_LT(r.last_wqe_wait, kLastWqeTimeout + 1s) << "the wait must be bounded";
  }
  EXPECT_EQ(r.destroy_error, 0);
  EXPECT_FALSE(r.drain_timed_out);
  EXPECT_FALSE(r.recv_marker_posted) << "an SRQ-attached QP has no RQ of its own";
  // The two consumed receives come back through the callback; the two still in the SRQ stay
  // there (they belong to the SRQ, which is not being destroyed).
  EXPECT_EQ(ledger.count(0x40), 1);
  EXPECT_EQ(ledger.count(0x41), 1);
  EXPECT_EQ(ledger.status(0x40), IBV_WC_SUCCESS);
  EXPECT_EQ(ledger.seen.size(), 2u);
  EXPECT_EQ(rig.srq.attached_qps(), 0);

  EXPECT_EQ(rig.sender.shutdown([](const ibv_wc&) {}).destroy_error, 0);
  EXPECT_EQ(rig.srq.destroy(), 0);
}

TEST_F(QpTeardownTest, UdEveryPostedWrIdComesBackExactlyOnce) {
  QpPair pair(*dev, *pd, IBV_QPT_UD, 64, verbs::QpCaps{.max_send_wr = 16, .max_recv_wr = 16});
  auto& [cq_a, cq_b, a, b] = pair;
  activate_ud(pair, *dev);
  verbs::AddressHandle ah = loopback_ah(*pd, *dev);
  Buffer abuf(*pd, kKiB64);
  Buffer bbuf(*pd, kKiB64);
  RecvChain arecv = make_recv_chain(abuf, 6, 1024, 0x100);
  ASSERT_TRUE(a.post_recv(arecv.head()));
  RecvChain brecv = make_recv_chain(bbuf, 2, 1024, 0x900);
  ASSERT_TRUE(b.post_recv(brecv.head()));
  // 4 sends to B, which has 2 receives: UD drops the others silently; all 4 sends complete.
  for (std::uint64_t i = 0; i < 4; ++i) {
    post_send(a, abuf, kKiB32 + i * 128, 100, 0x200 + i, ah.get(), b.qp_num());
  }
  // B also sends one, and tears down without a marker AH (the quiet-period path).
  post_send(b, bbuf, kKiB32, 100, 0x950, ah.get(), a.qp_num());

  Ledger la;
  Ledger lb;
  Watchdog guard(30s, "UD QP teardown");
  const TeardownReport ra = a.shutdown([&](const ibv_wc& wc) { la.add(wc); },
                                       verbs::TeardownOptions{.ud_marker_ah = ah.get()});
  print("UD A", ra);
  EXPECT_EQ(ra.destroy_error, 0);
  EXPECT_TRUE(ra.send_marker_returned);
  EXPECT_TRUE(ra.recv_marker_returned);
  for (std::uint64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(la.count(0x200 + i), 1) << "send wr_id " << 0x200 + i;
  }
  for (std::uint64_t i = 0; i < 6; ++i) {
    EXPECT_EQ(la.count(0x100 + i), 1) << "recv wr_id " << 0x100 + i;
  }
  EXPECT_EQ(la.seen.size(), 10u);

  const TeardownReport rb = b.shutdown([&](const ibv_wc& wc) { lb.add(wc); });
  print("UD B", rb);
  EXPECT_EQ(rb.destroy_error, 0);
  EXPECT_FALSE(rb.send_marker_posted) << "no AH given: no UD send marker";
  EXPECT_TRUE(rb.recv_marker_returned);
  EXPECT_EQ(lb.count(0x950), 1);
  EXPECT_EQ(lb.count(0x900), 1);
  EXPECT_EQ(lb.count(0x901), 1);
  EXPECT_EQ(lb.seen.size(), 3u);
}

TEST_F(QpTeardownTest, UdQpInAMulticastGroupIsNotDestroyed) {
  CompletionQueue cq = CompletionQueue::create(dev->ctx, 16);
  QueuePair qp = QueuePair::create(*pd, QpConfig{.type = IBV_QPT_UD,
                                                 .send_cq = &cq,
                                                 .recv_cq = &cq,
                                                 .caps = {.max_send_wr = 4, .max_recv_wr = 4}});
  activate_ud(qp, *dev);
  ibv_gid mgid{};
  mgid.raw[0] = 0xff;  // ff0e::db8:1, a global-scope IPv6 multicast group
  mgid.raw[1] = 0x0e;
  mgid.raw[13] = 0x0d;
  mgid.raw[14] = 0xb8;
  mgid.raw[15] = 0x01;
  qp.attach_mcast(mgid, 0);
  EXPECT_EQ(qp.mcast_groups(), 1u);

  EXPECT_EQ(qp.destroy(), EBUSY);
  ASSERT_NE(qp.get(), nullptr);
  const TeardownReport r = qp.shutdown([](const ibv_wc&) {});
  EXPECT_EQ(r.destroy_error, EBUSY) << "teardown must not destroy a QP still in a group";
  ASSERT_NE(qp.get(), nullptr);

  qp.detach_mcast(mgid, 0);
  EXPECT_EQ(qp.mcast_groups(), 0u);
  EXPECT_EQ(qp.destroy(), 0);
}

TEST_F(QpTeardownTest, RecordsWhatRawRxeDoesOnDestroyOfAQpInAMulticastGroup) {
  // Plain libibverbs, recorded, not asserted: our layer refuses either way (test above).
  CompletionQueue cq = CompletionQueue::create(dev->ctx, 16);
  ibv_qp* qp = create_raw_qp(pd->get(), cq.get(), IBV_QPT_UD);
  ASSERT_NE(qp, nullptr);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = dev->port;
  attr.qkey = kTestQkey;
  ASSERT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
            0);
  ibv_gid mgid{};
  mgid.raw[0] = 0xff;
  mgid.raw[1] = 0x0e;
  mgid.raw[15] = 0x02;
  ASSERT_EQ(ibv_attach_mcast(qp, &mgid, 0), 0);
  const int raw = ibv_destroy_qp(qp);
  std::printf("RAW %s: ibv_destroy_qp while attached to a multicast group returned %d (%s)\n",
              dev->ctx.name().c_str(), raw, raw == 0 ? "allowed" : verbs::errno_name(raw).c_str());
  RecordProperty("raw_destroy_qp_in_mcast_group", raw == 0 ? "allowed" : verbs::errno_name(raw));
  if (raw != 0) {
    EXPECT_EQ(ibv_detach_mcast(qp, &mgid, 0), 0);
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
  }
}

TEST_F(QpTeardownTest, NeverConnectedQpTearsDownAtOnce) {
  CompletionQueue cq = CompletionQueue::create(dev->ctx, 16);
  QueuePair qp = QueuePair::create(*pd, QpConfig{.type = IBV_QPT_RC,
                                                 .send_cq = &cq,
                                                 .recv_cq = &cq,
                                                 .caps = {.max_send_wr = 4, .max_recv_wr = 4}});
  const auto t0 = std::chrono::steady_clock::now();
  const TeardownReport r =
      qp.shutdown([](const ibv_wc& wc) { ADD_FAILURE() << "unexpected wr_id " << wc.wr_id; });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  EXPECT_EQ(r.modify_error, 0) << "RESET->ERR is invalid: a RESET QP must skip it";
  EXPECT_EQ(r.destroy_error, 0);
  EXPECT_EQ(r.completions, 0u);
  EXPECT_FALSE(r.send_marker_posted);
  EXPECT_FALSE(r.recv_marker_posted);
}

}  // namespace
}  // namespace rdmx::test
