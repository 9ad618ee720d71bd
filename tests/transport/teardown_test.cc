// rdmx_worker_destroy while traffic is in flight, three times in a row in the same processes:
// the victim has receives posted, unexpected messages queued and sends of its own outstanding;
// its senders keep sending until they notice. Afterwards every wr_id is accounted for (0
// outstanding), every active request got its callback, and no verbs object is left (the
// kernel's own view, `rdma resource show`, via tests/guest/support/leak_check).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "rdmx/rdmx.h"
#include "tests/guest/support/guest_env.h"
#include "tests/guest/support/leak_check.h"
#include "tests/transport/support/procs.h"
#include "transport/debug.h"

namespace rdmx::test {
namespace {

constexpr int kCycles = 3;

std::string transport_name(const ::testing::TestParamInfo<rdmx_transport_t>& param) {
  return param.param == RDMX_TRANSPORT_RC ? "Rc" : "Ud";
}

struct Counter {
  int calls = 0;
  int canceled = 0;
};

void count_callback(rdmx_request_t*, const rdmx_status_t* st, void* user) {
  auto* c = static_cast<Counter*>(user);
  ++c->calls;
  c->canceled += st->error == RDMX_ERR_CANCELED ? 1 : 0;
}

void victim(Rank& rank, rdmx_transport_t t, int cycle) {
  RdmaLeakCheck leaks;
  leaks.baseline();
  Session s = open_session(rank, device_for(0, false), t,
                           [](rdmx_config_t& c) { c.peer_timeout_ms = 3000; });
  constexpr int kPosted = 32;
  std::vector<rdmx_request_t> rreqs(kPosted);
  std::vector<std::uint64_t> bufs(kPosted);
  Counter recv_cb;
  // Receive a few hundred messages with receives posted from a ring, then leave kPosted
  // receives posted (for a tag nobody sends) and let unexpected messages pile up.
  int received = 0;
  while (received < 300) {
    rdmx_request_t r;
    std::uint64_t v = 0;
    RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, &v, sizeof(v), RDMX_ANY_SOURCE, 1, ~0ull, &r,
                                      nullptr, nullptr));
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &r, nullptr, "victim receive"));
    ++received;
  }
  for (int i = 0; i < kPosted; ++i) {
    RDMX_CHECK_OK(
        rank,
        rdmx_tag_recv(s.worker, &bufs[static_cast<std::size_t>(i)], 8, RDMX_ANY_SOURCE, 0xdead,
                      ~0ull, &rreqs[static_cast<std::size_t>(i)], count_callback, &recv_cb));
  }
  // Sends of its own: synchronous ones nobody will match, and standard ones.
  std::vector<rdmx_request_t> sreqs(16);
  Counter send_cb;
  std::uint64_t payload = 42;
  for (std::size_t i = 0; i < sreqs.size(); ++i) {
    RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[1 + i % 2], &payload, sizeof(payload), 0xbeef,
                                      i % 2 == 0 ? unsigned{RDMX_SEND_SYNC} : 0u, &sreqs[i],
                                      count_callback, &send_cb));
  }
  const auto t0 = std::chrono::steady_clock::now();
  while (seconds_since(t0) < 0.2) {  // more messages arrive and become unexpected
    (void)rdmx_worker_progress(s.worker);
  }
  rdmx_stats_t st{};
  RDMX_CHECK_OK(rank, rdmx_worker_stats(s.worker, &st));
  const auto t1 = std::chrono::steady_clock::now();
  for (rdmx_ep_t* ep : s.eps) {
    if (ep != nullptr) {
      rdmx_ep_destroy(ep);
    }
  }
  rdmx_worker_destroy(s.worker);
  const double destroy_s = seconds_since(t1);
  const auto report = rdmx::transport::debug::last_destroy_report();
  std::printf(
      "cycle %d victim (%s): destroy took %.2f s (%u QPs), %llu unexpected before, "
      "%u requests failed (sends: %d canceled), wr_ids outstanding %llu (posted %llu completed "
      "%llu "
      "reclaimed %llu)\n",
      cycle, t == RDMX_TRANSPORT_RC ? "rc" : "ud", destroy_s, report.qps,
      static_cast<unsigned long long>(st.unexpected), report.requests_failed, send_cb.canceled,
      static_cast<unsigned long long>(report.wr_ids.outstanding()),
      static_cast<unsigned long long>(report.wr_ids.recv_posted),
      static_cast<unsigned long long>(report.wr_ids.recv_completed),
      static_cast<unsigned long long>(report.wr_ids.recv_reclaimed));
  RDMX_CHECK_EQ(rank, report.wr_ids.outstanding(), 0u);
  RDMX_CHECK_EQ(rank, report.destroy_errors, 0u);
  for (std::size_t i = 0; i < sreqs.size(); ++i) {
    rdmx_status_t ss{};
    const int rc = rdmx_request_test(&sreqs[i], &ss);
    if (i % 2 == 0) {
      // Synchronous sends nobody matched: failed by rdmx_ep_destroy.
      RDMX_CHECK_EQ(rank, rc, RDMX_ERR_UNREACHABLE);
    } else {
      // Standard sends: complete once buffered, or failed by rdmx_ep_destroy while queued.
      RDMX_CHECK(rank, rc == RDMX_OK || rc == RDMX_ERR_UNREACHABLE);
    }
  }
  RDMX_CHECK_EQ(rank, recv_cb.calls, kPosted);
  RDMX_CHECK_EQ(rank, recv_cb.canceled, kPosted);
  RDMX_CHECK_EQ(rank, send_cb.calls, static_cast<int>(sreqs.size()));  // each exactly once
  RDMX_CHECK(rank, report.requests_failed >= static_cast<std::uint32_t>(kPosted));
  RDMX_CHECK(rank, destroy_s < 10);
  const auto leak = leaks.no_new_objects();
  if (!leak) {
    rank.fail(__FILE__, __LINE__, leak.message());
  }
}

void sender(Rank& rank, rdmx_transport_t t, int cycle) {
  RdmaLeakCheck leaks;
  leaks.baseline();
  Session s = open_session(rank, device_for(0, false), t,
                           [](rdmx_config_t& c) { c.peer_timeout_ms = 3000; }, {0});
  // Send until the victim's destroy is noticed (a send is refused or fails).
  constexpr int kRing = 64;
  std::vector<rdmx_request_t> reqs(kRing);
  std::vector<std::uint64_t> bufs(kRing);
  const auto t0 = std::chrono::steady_clock::now();
  int failed_with = RDMX_OK;
  for (int i = 0; failed_with == RDMX_OK; ++i) {
    const auto slot = static_cast<std::size_t>(i % kRing);
    if (i >= kRing) {
      const int rc = wait_request(rank, s.worker, &reqs[slot], nullptr, "sender send",
                                  std::chrono::seconds(20));
      if (rc != RDMX_OK) {
        failed_with = rc;
        break;
      }
    }
    bufs[slot] = static_cast<std::uint64_t>(i);
    const int rc =
        rdmx_tag_send(s.eps[0], &bufs[slot], sizeof(std::uint64_t), 1,
                      i % 50 == 0 ? unsigned{RDMX_SEND_SYNC} : 0u, &reqs[slot], nullptr, nullptr);
    if (rc != RDMX_OK) {
      failed_with = rc;
    }
    if (seconds_since(t0) > 60) {
      rdmx::transport::debug::dump(s.worker);
      rank.fail(__FILE__, __LINE__, "the victim's destroy was not noticed in 60 s");
    }
  }
  RDMX_CHECK_EQ(rank, failed_with, RDMX_ERR_UNREACHABLE);
  for (rdmx_ep_t* ep : s.eps) {
    if (ep != nullptr) {
      rdmx_ep_destroy(ep);
    }
  }
  rdmx_worker_destroy(s.worker);  // fails what is still queued
  const auto report = rdmx::transport::debug::last_destroy_report();
  RDMX_CHECK_EQ(rank, report.wr_ids.outstanding(), 0u);
  RDMX_CHECK_EQ(rank, report.destroy_errors, 0u);
  const auto leak = leaks.no_new_objects();
  if (!leak) {
    rank.fail(__FILE__, __LINE__, leak.message());
  }
  (void)cycle;
}

class Teardown : public ::testing::TestWithParam<rdmx_transport_t> {
 protected:
  void SetUp() override { RDMX_REQUIRE_DEVICE(); }
};

TEST_P(Teardown, DestroyWithTrafficInFlightAccountsForEverything) {
  const rdmx_transport_t t = GetParam();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(run_ranks(
      3,
      [&](Rank& rank) {
        for (int cycle = 0; cycle < kCycles; ++cycle) {
          if (rank.rank() == 0) {
            victim(rank, t, cycle);
          } else {
            sender(rank, t, cycle);
          }
          rank.barrier();
        }
      },
      RunOptions{.timeout = std::chrono::seconds(300)}));
  std::printf("%d cycles in %.2f s\n", kCycles, seconds_since(t0));
}

// Workers whose setup fails half-way (the pinning limit runs out at some registration: the
// workers made before hold most of it) tear down what they made: the create returns
// RDMX_ERR_NO_MEMORY, nothing crashes, no verbs object is left once the others are destroyed,
// and a worker fits again.
TEST_P(Teardown, SetupThatFailsHalfWayLeavesNothing) {
  const rdmx_transport_t t = GetParam();
  EXPECT_TRUE(run_ranks(1, [&](Rank& rank) {
    // Each worker fits alone (RC at a lowered SRQ depth); a few together do not.
    if (!limit_pinning(5u << 20)) {
      rank.fail(__FILE__, __LINE__, "cannot drop CAP_IPC_LOCK / lower RLIMIT_MEMLOCK");
    }
    RdmaLeakCheck leaks;
    leaks.baseline();
    const rdmx_config_t cfg = test_config(device_for(0, false), t);
    std::vector<rdmx_worker_t*> made;
    int failures = 0;
    while (failures < 3) {
      RDMX_CHECK(rank, made.size() < 8);  // the limit must run out
      rdmx_worker_t* w = nullptr;
      const int rc = rdmx_worker_create(&cfg, &w);
      if (rc == RDMX_OK) {
        RDMX_CHECK(rank, failures == 0);  // none fits after the first refusal
        made.push_back(w);
        continue;
      }
      RDMX_CHECK_EQ(rank, rc, RDMX_ERR_NO_MEMORY);
      RDMX_CHECK(rank, w == nullptr);
      ++failures;
    }
    RDMX_CHECK(rank, !made.empty());
    std::printf("%s: %zu workers fit under 5 MiB, the next failed cleanly 3 times\n",
                t == RDMX_TRANSPORT_RC ? "rc" : "ud", made.size());
    for (rdmx_worker_t* w : made) {
      rdmx_worker_destroy(w);
    }
    const auto leak = leaks.no_new_objects();
    if (!leak) {
      rank.fail(__FILE__, __LINE__, leak.message());
    }
    rdmx_worker_t* again = nullptr;
    RDMX_CHECK_OK(rank, rdmx_worker_create(&cfg, &again));
    rdmx_worker_destroy(again);
  }));
}

INSTANTIATE_TEST_SUITE_P(Transport, Teardown,
                         ::testing::Values(RDMX_TRANSPORT_RC, RDMX_TRANSPORT_UD), transport_name);

}  // namespace
}  // namespace rdmx::test
