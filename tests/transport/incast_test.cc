// Incast: 8 senders into one receiver whose SRQs are tiny (16 buffers), 20,000 messages per
// sender (about a minute per transport under emulation; RDMX_TEST_INCAST_MSGS sets the count).
// Every message arrives exactly once and in per-sender order; no sender fails with
// RNR_RETRY_EXC_ERR. Over RC the receiver's credits keep every sender within the SRQ,
// so the device sees no RNR NAK at all (counted from the rxe hw_counters); over UD the SRQ does
// run dry and packets are dropped and resent. The receiver's watermark is set high
// (RDMX_TEST_INCAST_WATERMARK, default depth - batch) so that its SRQ limit event fires under
// both transports: limit events and refills are counted and must be non-zero.
// Each transport runs twice: with coalescing off (one receive buffer per message: the SRQ stress
// the test is for) and on (the default: senders pack their bursts, so the receiver consumes
// fewer buffers than messages, and UD loses and resends whole batches). The first gives no
// eager ring (RDMX_RING_PEERS=0: every message through the SRQ), the second runs the defaults,
// where each RC sender writes into a ring of the receiver as well (until it is full).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "rdmx/rdmx.h"
#include "tests/guest/support/guest_env.h"
#include "tests/transport/support/procs.h"
#include "transport/debug.h"

namespace rdmx::test {
namespace {

constexpr int kSenders = 8;
constexpr std::uint64_t kTag = 0x1ca57;

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : fallback;
}

std::uint64_t hw_counter(const std::string& dev, const char* name) {
  std::ifstream in("/sys/class/infiniband/" + dev + "/ports/1/hw_counters/" + name);
  std::uint64_t v = 0;
  in >> v;
  return v;
}

struct Msg {
  int sender;
  int seq;
  std::uint8_t pad[56];
};

void sender(Rank& rank, Session& s, int n) {
  rdmx_ep_t* ep = s.eps[0];
  constexpr int kRing = 256;
  std::vector<rdmx_request_t> reqs(kRing);
  std::vector<Msg> bufs(kRing);
  for (int i = 0; i < n; ++i) {
    const auto slot = static_cast<std::size_t>(i % kRing);
    if (i >= kRing) {
      RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &reqs[slot], nullptr, "incast send",
                                       std::chrono::seconds(120)));
    }
    bufs[slot].sender = rank.rank();
    bufs[slot].seq = i;
    std::memset(bufs[slot].pad, i & 0xff, sizeof(bufs[slot].pad));
    // Mostly 16 bytes; every 8th is 64 bytes with a pad, so both checks and copies vary.
    const std::size_t len = i % 8 == 0 ? sizeof(Msg) : 2 * sizeof(int) + 8;
    RDMX_CHECK_OK(rank,
                  rdmx_tag_send(ep, &bufs[slot], len, kTag, 0, &reqs[slot], nullptr, nullptr));
  }
  for (int i = std::max(0, n - kRing); i < n; ++i) {
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &reqs[static_cast<std::size_t>(i % kRing)],
                                     nullptr, "last sends", std::chrono::seconds(120)));
  }
}

void receiver(Rank& rank, Session& s, int n, rdmx_transport_t t, bool coalesce) {
  const int total = n * kSenders;
  constexpr int kPosted = 64;
  std::vector<rdmx_request_t> reqs(kPosted);
  std::vector<Msg> bufs(kPosted);
  std::vector<int> next(kSenders + 1, 0);
  int posted = 0;
  for (; posted < kPosted && posted < total; ++posted) {
    RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, &bufs[static_cast<std::size_t>(posted)],
                                      sizeof(Msg), RDMX_ANY_SOURCE, kTag, ~0ull,
                                      &reqs[static_cast<std::size_t>(posted)], nullptr, nullptr));
  }
  for (int got = 0; got < total; ++got) {
    const auto slot = static_cast<std::size_t>(got % kPosted);
    rdmx_status_t st{};
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &reqs[slot], &st, "incast receive",
                                     std::chrono::seconds(120)));
    const Msg& m = bufs[slot];
    RDMX_CHECK(rank, m.sender >= 1 && m.sender <= kSenders);
    RDMX_CHECK_EQ(rank, st.source, s.uids[static_cast<std::size_t>(m.sender)]);
    if (m.seq != next[static_cast<std::size_t>(m.sender)]) {
      rank.fail(__FILE__, __LINE__,
                "sender " + std::to_string(m.sender) + ": got seq " + std::to_string(m.seq) +
                    ", expected " + std::to_string(next[static_cast<std::size_t>(m.sender)]));
    }
    ++next[static_cast<std::size_t>(m.sender)];
    if (posted < total) {
      RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, &bufs[slot], sizeof(Msg), RDMX_ANY_SOURCE, kTag,
                                        ~0ull, &reqs[slot], nullptr, nullptr));
      ++posted;
    }
  }
  for (int r = 1; r <= kSenders; ++r) {
    RDMX_CHECK_EQ(rank, next[static_cast<std::size_t>(r)], n);
  }
  rdmx_stats_t st{};
  RDMX_CHECK_OK(rank, rdmx_worker_stats(s.worker, &st));
  std::printf(
      "receiver (%s): %d messages; srq posted %llu consumed %llu refills %llu limit events "
      "%llu unexpected %llu retransmits %llu node rnr naks %llu\n",
      t == RDMX_TRANSPORT_RC ? "rc" : "ud", total, static_cast<unsigned long long>(st.srq_posted),
      static_cast<unsigned long long>(st.srq_consumed),
      static_cast<unsigned long long>(st.srq_refills),
      static_cast<unsigned long long>(st.srq_limit_events),
      static_cast<unsigned long long>(st.unexpected),
      static_cast<unsigned long long>(st.ud_retransmits),
      static_cast<unsigned long long>(st.node_rnr_naks));
  std::printf("receiver (%s): %llu messages through %llu eager rings\n",
              t == RDMX_TRANSPORT_RC ? "rc" : "ud", static_cast<unsigned long long>(st.ring_recvs),
              static_cast<unsigned long long>(st.ring_peers));
  std::fflush(stdout);  // a failing rank exits without flushing
  RDMX_CHECK(rank, st.srq_refills > 0);
  RDMX_CHECK(rank, st.srq_limit_events > 0);
  // Every message took a receive buffer of its own, or (coalescing) fewer did the work.
  if (coalesce) {
    RDMX_CHECK(rank, st.srq_consumed < static_cast<std::uint64_t>(total));
  } else {
    RDMX_CHECK(rank, st.srq_consumed >= static_cast<std::uint64_t>(total));
  }
}

struct Params {
  rdmx_transport_t transport;
  bool coalesce;
};

std::string name(const ::testing::TestParamInfo<Params>& info) {
  return std::string(info.param.transport == RDMX_TRANSPORT_RC ? "Rc" : "Ud") +
         (info.param.coalesce ? "Coalesced" : "");
}

class Incast : public ::testing::TestWithParam<Params> {};

TEST_P(Incast, EightSendersIntoATinySrq) {
  RDMX_REQUIRE_DEVICE();
  const rdmx_transport_t t = GetParam().transport;
  const bool coalesce = GetParam().coalesce;
  const int n = env_int("RDMX_TEST_INCAST_MSGS", 20000);
  const std::string dev = device_for(0, false);
  const std::uint64_t rnr_exc0 = hw_counter(dev, "retry_rnr_exceeded_err");
  const std::uint64_t rnr0 = hw_counter(dev, "rcvd_rnr_err");
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(run_ranks(
      kSenders + 1,
      [&](Rank& rank) {
        // Star: the receiver connects to every sender, each sender to the receiver.
        std::vector<int> peers;
        if (rank.rank() == 0) {
          for (int r = 1; r <= kSenders; ++r) {
            peers.push_back(r);
          }
        } else {
          peers.push_back(0);
        }
        Session s = open_session(
            rank, dev, t,
            [&](rdmx_config_t& c) {
              c.coalesce = coalesce ? 1 : 0;
              if (!coalesce) {
                c.ring_peers = 0;
              }
              if (rank.rank() == 0) {
                const int depth = env_int("RDMX_TEST_INCAST_SRQ", 16);
                c.srq_depth = static_cast<std::uint32_t>(depth);
                // Refill batch = depth / 4 (config.cc): the highest watermark allowed.
                c.srq_low_watermark = static_cast<std::uint32_t>(
                    env_int("RDMX_TEST_INCAST_WATERMARK", depth - depth / 4));
              }
            },
            peers);
        const auto t1 = std::chrono::steady_clock::now();
        if (rank.rank() == 0) {
          receiver(rank, s, n, t, coalesce);
          std::printf("incast %s: %d x %d messages in %.2f s\n",
                      t == RDMX_TRANSPORT_RC ? "rc" : "ud", kSenders, n, seconds_since(t1));
        } else {
          sender(rank, s, n);
        }
        // A sender that finished early waits here until the receiver has drained the others
        // (minutes under TCG with a loaded host): bound it by the test's own timeout.
        quiesce(rank, s, std::chrono::seconds(400));
        close_session(rank, s);
      },
      RunOptions{.timeout = std::chrono::seconds(600)}));
  const std::uint64_t rnr_exc = hw_counter(dev, "retry_rnr_exceeded_err") - rnr_exc0;
  const std::uint64_t rnr = hw_counter(dev, "rcvd_rnr_err") - rnr0;
  std::printf("incast total %.2f s; device RNR NAKs received %llu, RNR retries exceeded %llu\n",
              seconds_since(t0), static_cast<unsigned long long>(rnr),
              static_cast<unsigned long long>(rnr_exc));
  EXPECT_EQ(rnr_exc, 0u);
  if (t == RDMX_TRANSPORT_RC) {
    EXPECT_EQ(rnr, 0u) << "RC credits should keep every sender within the receiver's SRQ";
  }
}

INSTANTIATE_TEST_SUITE_P(Transport, Incast,
                         ::testing::Values(Params{RDMX_TRANSPORT_RC, false},
                                           Params{RDMX_TRANSPORT_UD, false},
                                           Params{RDMX_TRANSPORT_RC, true},
                                           Params{RDMX_TRANSPORT_UD, true}),
                         name);

}  // namespace
}  // namespace rdmx::test
