// Completion queues and channels as ibv_create_cq(3) and ibv_get_cq_event(3) require: destroy
// refused while a QP uses the CQ, unpolled completions no obstacle, every channel event
// acknowledged before ibv_destroy_cq (which otherwise waits for ever).
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "tests/guest/support/verbs_fixture.h"
#include "tests/guest/support/watchdog.h"
#include "verbs/error.h"

namespace rdmx::test {
namespace {

using namespace std::chrono_literals;
using verbs::CompletionChannel;

class CqTest : public VerbsTest {};

TEST_F(CqTest, DestroyIsRefusedWithEbusyWhileAQpUsesIt) {
  CompletionQueue send_cq = CompletionQueue::create(dev->ctx, 16);
  CompletionQueue recv_cq = CompletionQueue::create(dev->ctx, 16);
  QueuePair qp = QueuePair::create(*pd, QpConfig{.type = IBV_QPT_RC,
                                                 .send_cq = &send_cq,
                                                 .recv_cq = &recv_cq,
                                                 .caps = {.max_send_wr = 4, .max_recv_wr = 4}});
  EXPECT_EQ(send_cq.users(), 1);
  EXPECT_EQ(recv_cq.users(), 1);
  EXPECT_EQ(send_cq.destroy(), EBUSY);
  EXPECT_EQ(recv_cq.destroy(), EBUSY);
  ASSERT_NE(send_cq.get(), nullptr) << "a refused destroy must leave the CQ owned";
  EXPECT_EQ(ibv_poll_cq(send_cq.get(), 0, nullptr), 0) << "and usable";

  ASSERT_EQ(qp.destroy(), 0);
  EXPECT_EQ(send_cq.users(), 0);
  EXPECT_EQ(send_cq.destroy(), 0);
  EXPECT_EQ(recv_cq.destroy(), 0);
}

TEST_F(CqTest, RecordsWhatRawRxeDoesOnDestroyWithAQpUsingTheCq) {
  // Plain libibverbs, recorded, not asserted: our layer refuses either way (test above).
  ibv_cq* cq = ibv_create_cq(dev->ctx.get(), 16, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_qp* qp = create_raw_qp(pd->get(), cq, IBV_QPT_RC);
  ASSERT_NE(qp, nullptr);
  const int raw = ibv_destroy_cq(cq);
  std::printf("RAW %s: ibv_destroy_cq with a QP using it returned %d (%s)\n",
              dev->ctx.name().c_str(), raw, raw == 0 ? "allowed" : verbs::errno_name(raw).c_str());
  RecordProperty("raw_destroy_cq_with_qp", raw == 0 ? "allowed" : verbs::errno_name(raw));
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  if (raw != 0) {
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
  }
}

TEST_F(CqTest, SizeAboveTheDeviceMaxIsRefusedNamingTheLimit) {
  const int max_cqe = dev->ctx.query_device().orig_attr.max_cqe;
  try {
    CompletionQueue::create(dev->ctx, max_cqe + 1);
    FAIL() << "created a CQ above max_cqe";
  } catch (const verbs::Error& e) {
    EXPECT_EQ(e.errnum(), EINVAL);
    EXPECT_NE(std::string(e.what()).find("max_cqe " + std::to_string(max_cqe)), std::string::npos)
        << e.what();
  }
  CompletionQueue cq = CompletionQueue::create(dev->ctx, 100);
  EXPECT_GE(cq.cqe(), 100) << "granted size may exceed the request, never fall short";
}

TEST_F(CqTest, UnpolledCompletionsDoNotPreventDestroy) {
  QpPair pair(*dev, *pd, IBV_QPT_RC, 16, verbs::QpCaps{.max_send_wr = 8, .max_recv_wr = 8});
  auto& [a_cq, b_cq, a, b] = pair;
  Buffer abuf(*pd, 4096);
  Buffer bbuf(*pd, 4096);
  connect_rc_pair(*dev, a, b);
  RecvChain chain = make_recv_chain(bbuf, 4, 256, 0);
  ASSERT_TRUE(b.post_recv(chain.head()));
  for (std::uint64_t i = 0; i < 4; ++i) {
    post_send(a, abuf, i * 64, 64, i);
  }
  // Acknowledged sends mean B's receive completions are already in b_cq, unpolled.
  ASSERT_EQ(poll_n(a_cq.get(), 4).size(), 4u);

  ASSERT_EQ(a.destroy(), 0);
  ASSERT_EQ(b.destroy(), 0);
  Watchdog guard(10s, "ibv_destroy_cq with unpolled completions");
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(b_cq.destroy(), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
}

TEST_F(CqTest, ChannelEventsAreAcknowledgedBeforeDestroy) {
  CompletionChannel channel = CompletionChannel::create(dev->ctx);
  QpPair pair(*dev, *pd, IBV_QPT_RC, 16, verbs::QpCaps{.max_send_wr = 8, .max_recv_wr = 8},
              &channel);
  auto& [a_cq, b_cq, a, b] = pair;
  EXPECT_EQ(channel.cq_count(), 1);
  Buffer abuf(*pd, 4096);
  Buffer bbuf(*pd, 4096);
  connect_rc_pair(*dev, a, b);
  RecvChain chain = make_recv_chain(bbuf, 4, 256, 0);
  ASSERT_TRUE(b.post_recv(chain.head()));

  EXPECT_EQ(channel.wait_event(50ms), nullptr) << "no completion yet, so no event";
  b_cq.request_notify();
  post_send(a, abuf, 0, 64, 1);
  ibv_cq* ev_cq = channel.wait_event(5s);
  ASSERT_EQ(ev_cq, b_cq.get()) << "no completion event within 5 s";
  EXPECT_EQ(b_cq.unacked_events(), 1u);
  EXPECT_EQ(channel.unacked_events(), 1u);

  // A second event, then both acked in one batch.
  ASSERT_EQ(poll_n(b_cq.get(), 1).size(), 1u);
  b_cq.request_notify();
  post_send(a, abuf, 64, 64, 2);
  ASSERT_EQ(channel.wait_event(5s), b_cq.get());
  EXPECT_EQ(b_cq.unacked_events(), 2u);
  EXPECT_EQ(b_cq.ack_events(), 2u);
  EXPECT_EQ(channel.unacked_events(), 0u);

  // A third, left un-acked (and its completion unpolled): destroy() acks it first.
  b_cq.request_notify();
  post_send(a, abuf, 128, 64, 3);
  ASSERT_EQ(channel.wait_event(5s), b_cq.get());
  EXPECT_EQ(b_cq.unacked_events(), 1u);
  EXPECT_EQ(channel.destroy(), EBUSY) << "a CQ still uses the channel";

  ASSERT_EQ(a.destroy(), 0);
  ASSERT_EQ(b.destroy(), 0);
  {
    // ibv_destroy_cq waits for every event read to be acknowledged: a hang here is the bug.
    Watchdog guard(10s, "ibv_destroy_cq after ibv_get_cq_event");
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(b_cq.destroy(), 0);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  }
  EXPECT_EQ(channel.unacked_events(), 0u);
  EXPECT_EQ(channel.cq_count(), 0);
  EXPECT_EQ(channel.destroy(), 0);
}

}  // namespace
}  // namespace rdmx::test
