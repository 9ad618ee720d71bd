// Coalescing (transport/send.cc): a burst of sends posted with no progress call between them
// leaves in kBatch packets. Over RC and UD, two ranks: every message arrives once, in send
// order, with its bytes, whether its receive was posted before or after it arrived; sends that
// cannot be packed (large, synchronous, rendezvous) keep their place in the order; the
// counters prove packing happened, and that coalesce = 0 and RDMX_SEND_FLUSH prevent it.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "rdmx/rdmx.h"
#include "tests/guest/support/guest_env.h"
#include "tests/transport/support/procs.h"

namespace rdmx::test {
namespace {

constexpr std::uint64_t kTag = 42;
constexpr int kBurst = 240;

struct Params {
  rdmx_transport_t transport;
  bool coalesce;
};

class Coalesce : public ::testing::TestWithParam<Params> {
 protected:
  void SetUp() override { RDMX_REQUIRE_DEVICE(); }
};

// Message i: its size, and whether it goes as a synchronous send. Small ones are packed; 3000
// (RC) / 900 (UD) bytes need a buffer of their own; 20000 goes by rendezvous.
std::size_t size_of(int i, bool rc) {
  static const std::size_t kRc[] = {8, 0, 64, 1, 200, 3000, 8, 100, 20000, 16};
  static const std::size_t kUd[] = {8, 0, 64, 1, 200, 900, 8, 100, 20000, 16};
  return (rc ? kRc : kUd)[static_cast<std::size_t>(i) % 10];
}

std::vector<std::uint8_t> contents(int i, std::size_t len) {
  std::vector<std::uint8_t> b(len, static_cast<std::uint8_t>(i * 7 + 1));
  std::memcpy(b.data(), &i, std::min(len, sizeof(i)));
  return b;
}

// Posts the burst back to back (no progress call between sends), then waits for all of it.
void send_burst(Rank& rank, rdmx_worker_t* worker, rdmx_ep_t* ep, bool rc,
                const std::function<unsigned(int)>& flags_of) {
  std::vector<std::vector<std::uint8_t>> bufs(kBurst);
  std::vector<rdmx_request_t> reqs(kBurst);
  for (int i = 0; i < kBurst; ++i) {
    auto& b = bufs[static_cast<std::size_t>(i)];
    b = contents(i, size_of(i, rc));
    RDMX_CHECK_OK(rank, rdmx_tag_send(ep, b.data(), b.size(), kTag, flags_of(i),
                                      &reqs[static_cast<std::size_t>(i)], nullptr, nullptr));
  }
  for (auto& r : reqs) {
    RDMX_CHECK_OK(rank, wait_request(rank, worker, &r, nullptr, "send"));
  }
}

// Receives are posted in order with one tag: message i must be the i-th.
void check(Rank& rank, const std::vector<std::uint8_t>& buf, const rdmx_status_t& st, int i,
           bool rc) {
  const std::size_t len = size_of(i, rc);
  RDMX_CHECK_EQ(rank, st.error, RDMX_OK);
  RDMX_CHECK_EQ(rank, st.length, len);
  const auto want = contents(i, len);
  RDMX_CHECK(rank, std::memcmp(buf.data(), want.data(), len) == 0);
}

TEST_P(Coalesce, BurstsArriveOnceInOrderWithTheirBytes) {
  const Params p = GetParam();
  const bool rc = p.transport == RDMX_TRANSPORT_RC;
  EXPECT_TRUE(run_ranks(2, [&](Rank& rank) {
    Session s = open_session(rank, device_for(rank.rank(), false), p.transport,
                             [&](rdmx_config_t& c) { c.coalesce = p.coalesce ? 1 : 0; });
    const int peer = 1 - rank.rank();
    rdmx_ep_t* ep = s.eps[static_cast<std::size_t>(peer)];
    if (rank.rank() == 1) {
      // 1: receives posted after the messages came (unexpected); no sync sends, since their
      // receives come late. 2: receives posted first, sync sends among the rest. 3: as 2,
      // every send with RDMX_SEND_FLUSH.
      send_burst(rank, s.worker, ep, rc, [](int) { return 0u; });
      rank.barrier();
      rank.barrier();
      send_burst(rank, s.worker, ep, rc,
                 [](int i) { return i % 25 == 3 ? unsigned{RDMX_SEND_SYNC} : 0u; });
      rdmx_stats_t st{};
      RDMX_CHECK_OK(rank, rdmx_worker_stats(s.worker, &st));
      if (p.coalesce) {
        // Each burst: the first send goes alone, most small ones after it are packed.
        RDMX_CHECK(rank, st.coalesced_msgs >= kBurst);
        RDMX_CHECK(rank, st.coalesced_batches > 0);
        RDMX_CHECK(rank, st.coalesced_batches * 2 <= st.coalesced_msgs);
      } else {
        RDMX_CHECK_EQ(rank, st.coalesced_msgs, 0u);
        RDMX_CHECK_EQ(rank, st.coalesced_batches, 0u);
      }
      rank.barrier();
      rank.barrier();
      send_burst(rank, s.worker, ep, rc, [](int) { return unsigned{RDMX_SEND_FLUSH}; });
      rdmx_stats_t after{};
      RDMX_CHECK_OK(rank, rdmx_worker_stats(s.worker, &after));
      RDMX_CHECK_EQ(rank, after.coalesced_msgs, st.coalesced_msgs);
    } else {
      std::vector<std::uint8_t> buf(32768);
      // Let the first burst arrive before any receive is posted.
      const auto t0 = std::chrono::steady_clock::now();
      while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(500)) {
        (void)rdmx_worker_progress(s.worker);
      }
      for (int i = 0; i < kBurst; ++i) {
        rdmx_request_t req;
        rdmx_status_t st{};
        RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, buf.data(), buf.size(), s.uids[1], kTag,
                                          ~std::uint64_t{0}, &req, nullptr, nullptr));
        RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, &st, "late receive"));
        check(rank, buf, st, i, rc);
      }
      for (int burst = 2; burst <= 3; ++burst) {
        rank.barrier();
        std::vector<std::vector<std::uint8_t>> bufs(kBurst, std::vector<std::uint8_t>(32768));
        std::vector<rdmx_request_t> reqs(kBurst);
        for (int i = 0; i < kBurst; ++i) {
          RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, bufs[static_cast<std::size_t>(i)].data(),
                                            32768, RDMX_ANY_SOURCE, 0, 0,
                                            &reqs[static_cast<std::size_t>(i)], nullptr, nullptr));
        }
        rank.barrier();
        for (int i = 0; i < kBurst; ++i) {
          rdmx_status_t st{};
          RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &reqs[static_cast<std::size_t>(i)], &st,
                                           "early receive"));
          check(rank, bufs[static_cast<std::size_t>(i)], st, i, rc);
        }
      }
    }
    quiesce(rank, s);
    close_session(rank, s);
  }));
}

std::string name(const ::testing::TestParamInfo<Params>& info) {
  return std::string(info.param.transport == RDMX_TRANSPORT_RC ? "Rc" : "Ud") +
         (info.param.coalesce ? "" : "Off");
}

INSTANTIATE_TEST_SUITE_P(Transport, Coalesce,
                         ::testing::Values(Params{RDMX_TRANSPORT_RC, true},
                                           Params{RDMX_TRANSPORT_UD, true},
                                           Params{RDMX_TRANSPORT_RC, false},
                                           Params{RDMX_TRANSPORT_UD, false}),
                         name);

}  // namespace
}  // namespace rdmx::test
