// Faults the device reports (transport/faults.cc), each ending in a defined state:
//   - worker-wide (CQ_ERR, SRQ_ERR, DEVICE_FATAL, QP_FATAL on the shared control QP), handed to
//     the worker with debug::inject_async_event since rxe cannot be made to report them on
//     demand: every active request (a sync send, a receive naming the peer, an any-source
//     receive) fails with RDMX_ERR_IO, later sends, receives and endpoints are refused with it,
//     and the worker is destroyed cleanly, leaving no verbs object;
//   - QP_FATAL on one peer's RC QP: only that peer fails (RDMX_ERR_UNREACHABLE); an any-source
//     receive stays posted;
//   - a real link going down (`ip link set down` on the rxe device's netdev, IBV_EVENT_PORT_ERR):
//     back within a second, UD traffic sent meanwhile arrives intact (RC on rxe loses the
//     connection, cleanly); down for longer than peer_timeout_ms, the worker fails with
//     RDMX_ERR_IO and nothing waits for ever; also while the worker sleeps on its event fd.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "rdmx/rdmx.h"
#include "tests/guest/support/guest_env.h"
#include "tests/guest/support/leak_check.h"
#include "tests/transport/support/procs.h"
#include "transport/debug.h"

namespace rdmx::test {
namespace {

using rdmx::transport::debug::EventOn;
using rdmx::transport::debug::inject_async_event;

constexpr std::uint32_t kPeerTimeoutMs = 3000;

void short_timeout(rdmx_config_t& c) {
  c.peer_timeout_ms = kPeerTimeoutMs;
}

struct Fault {
  const char* name;
  ibv_event_type type;
  EventOn on;
  rdmx_transport_t transport;
};

std::string fault_name(const ::testing::TestParamInfo<Fault>& p) {
  return std::string(p.param.name) + (p.param.transport == RDMX_TRANSPORT_RC ? "Rc" : "Ud");
}

// Rank 0 has a sync send to rank 1 (never received), a receive naming rank 1 and an any-source
// receive active when the fault arrives; rank 1 only waits.
class WorkerFault : public ::testing::TestWithParam<Fault> {
 protected:
  void SetUp() override { RDMX_REQUIRE_DEVICE(); }
};

TEST_P(WorkerFault, FailsEveryRequestAndRefusesNewOnes) {
  const Fault f = GetParam();
  EXPECT_TRUE(run_ranks(2, [&](Rank& rank) {
    RdmaLeakCheck leaks;
    leaks.baseline();
    Session s = open_session(rank, device_for(rank.rank(), true), f.transport, short_timeout);
    quiesce(rank, s);
    if (rank.rank() == 1) {
      rank.barrier();  // rank 0's worker has failed and is gone
      close_session(rank, s);
      return;
    }
    std::uint64_t x = 7, in_any = 0, in_peer = 0;
    rdmx_request_t ssend, any, from_peer;
    RDMX_CHECK_OK(
        rank, rdmx_tag_send(s.eps[1], &x, sizeof(x), 3, RDMX_SEND_SYNC, &ssend, nullptr, nullptr));
    RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, &in_any, sizeof(in_any), RDMX_ANY_SOURCE, 1, ~0ull,
                                      &any, nullptr, nullptr));
    RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, &in_peer, sizeof(in_peer), s.uids[1], 2, ~0ull,
                                      &from_peer, nullptr, nullptr));
    for (int i = 0; i < 100; ++i) {
      (void)rdmx_worker_progress(s.worker);
    }
    RDMX_CHECK(rank, inject_async_event(s.worker, f.type, f.on));
    for (rdmx_request_t* r : {&ssend, &any, &from_peer}) {
      rdmx_status_t st{};
      RDMX_CHECK_EQ(rank, wait_request(rank, s.worker, r, &st, f.name, std::chrono::seconds(5)),
                    RDMX_ERR_IO);
    }
    rdmx_request_t r;
    RDMX_CHECK_EQ(rank, rdmx_tag_send(s.eps[1], &x, sizeof(x), 4, 0, &r, nullptr, nullptr),
                  RDMX_ERR_IO);
    RDMX_CHECK_EQ(rank,
                  rdmx_tag_recv(s.worker, &in_any, sizeof(in_any), RDMX_ANY_SOURCE, 5, ~0ull, &r,
                                nullptr, nullptr),
                  RDMX_ERR_IO);
    const void* addr = nullptr;
    std::size_t len = 0;
    RDMX_CHECK_OK(rank, rdmx_worker_address(s.worker, &addr, &len));
    rdmx_ep_t* ep = nullptr;
    RDMX_CHECK_EQ(rank, rdmx_ep_create(s.worker, addr, len, &ep), RDMX_ERR_IO);
    close_session(rank, s);
    const auto leak = leaks.no_new_objects();
    if (!leak) {
      rank.fail(__FILE__, __LINE__, leak.message());
    }
    rank.barrier();
  }));
}

INSTANTIATE_TEST_SUITE_P(
    Events, WorkerFault,
    ::testing::Values(
        Fault{"CqErr", IBV_EVENT_CQ_ERR, EventOn::kRecvCq, RDMX_TRANSPORT_RC},
        Fault{"CqErr", IBV_EVENT_CQ_ERR, EventOn::kRecvCq, RDMX_TRANSPORT_UD},
        Fault{"SrqErr", IBV_EVENT_SRQ_ERR, EventOn::kSmallSrq, RDMX_TRANSPORT_RC},
        Fault{"SrqErr", IBV_EVENT_SRQ_ERR, EventOn::kSmallSrq, RDMX_TRANSPORT_UD},
        Fault{"DeviceFatal", IBV_EVENT_DEVICE_FATAL, EventOn::kDevice, RDMX_TRANSPORT_RC},
        Fault{"DeviceFatal", IBV_EVENT_DEVICE_FATAL, EventOn::kDevice, RDMX_TRANSPORT_UD},
        Fault{"CtrlQpFatal", IBV_EVENT_QP_FATAL, EventOn::kCtrlQp, RDMX_TRANSPORT_RC},
        Fault{"CtrlQpFatal", IBV_EVENT_QP_FATAL, EventOn::kCtrlQp, RDMX_TRANSPORT_UD}),
    fault_name);

// QP_FATAL on an RC QP to one peer: that peer fails, the worker does not.
TEST(PeerFault, RcQpFatalFailsOnlyThatPeer) {
  RDMX_REQUIRE_DEVICE();
  EXPECT_TRUE(run_ranks(2, [&](Rank& rank) {
    Session s = open_session(rank, device_for(rank.rank(), true), RDMX_TRANSPORT_RC, short_timeout);
    quiesce(rank, s);
    if (rank.rank() == 1) {
      rank.barrier();
      close_session(rank, s);
      return;
    }
    std::uint64_t x = 7, in_any = 0;
    rdmx_request_t ssend, any;
    RDMX_CHECK_OK(
        rank, rdmx_tag_send(s.eps[1], &x, sizeof(x), 3, RDMX_SEND_SYNC, &ssend, nullptr, nullptr));
    RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, &in_any, sizeof(in_any), RDMX_ANY_SOURCE, 1, ~0ull,
                                      &any, nullptr, nullptr));
    RDMX_CHECK(rank,
               inject_async_event(s.worker, IBV_EVENT_QP_FATAL, EventOn::kPeerRcQp, s.uids[1]));
    rdmx_status_t st{};
    RDMX_CHECK_EQ(rank, wait_request(rank, s.worker, &ssend, &st, "sync send"),
                  RDMX_ERR_UNREACHABLE);
    for (int i = 0; i < 1000; ++i) {
      (void)rdmx_worker_progress(s.worker);
    }
    RDMX_CHECK_EQ(rank, rdmx_request_test(&any, &st), RDMX_INPROGRESS);  // the worker lives
    RDMX_CHECK_OK(rank, rdmx_request_cancel(s.worker, &any));
    RDMX_CHECK_EQ(rank, wait_request(rank, s.worker, &any, &st, "cancel"), RDMX_ERR_CANCELED);
    rdmx_request_t r;
    RDMX_CHECK_EQ(rank, rdmx_tag_send(s.eps[1], &x, sizeof(x), 4, 0, &r, nullptr, nullptr),
                  RDMX_ERR_UNREACHABLE);
    close_session(rank, s);
    rank.barrier();
  }));
}

// The netdev under an rxe device (its GID table says which).
std::string netdev_of(const std::string& device) {
  std::ifstream in("/sys/class/infiniband/" + device + "/ports/1/gid_attrs/ndevs/0");
  std::string name;
  in >> name;
  return name;
}

// Brings a netdev down or up; true when `ip` did it.
bool set_link(const std::string& netdev, bool up) {
  const std::string cmd = "ip link set dev " + netdev + (up ? " up" : " down");
  return std::system(cmd.c_str()) == 0;
}

// Whether port 1 of `device` says ACTIVE within `limit`.
bool port_active_within(const std::string& device, std::chrono::seconds limit) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    std::ifstream in("/sys/class/infiniband/" + device + "/ports/1/state");
    std::string number, state;  // e.g. "4: ACTIVE"
    in >> number >> state;
    if (state == "ACTIVE") {
      return true;
    }
    if (std::chrono::steady_clock::now() - t0 > limit) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

class PortFault : public ::testing::Test {
 protected:
  void SetUp() override {
    RDMX_REQUIRE_DEVICE();
    netdev_ = netdev_of(device_for(0, true));
    if (netdev_.empty()) {
      GTEST_SKIP() << "no netdev found under " << device_for(0, true) << " (not rxe?)";
    }
  }
  // Whatever happened, the link is up again, and both ports active, for the tests after this.
  void TearDown() override {
    if (netdev_.empty()) {
      return;
    }
    EXPECT_TRUE(set_link(netdev_, true));
    for (const std::string& dev : devices()) {
      EXPECT_TRUE(port_active_within(dev, std::chrono::seconds(10))) << dev;
    }
  }
  void down_for_good(rdmx_transport_t t);
  std::string netdev_;
};

constexpr int kFlapMsgs = 64;
constexpr std::size_t kFlapLarge = 1 << 20;

// Rank 0's link goes down for a second while it sends kFlapMsgs messages and a 1 MiB one to
// rank 1 (the veth pair takes rank 1's carrier down too). Each rank's requests' results are
// checked by `check(rank, results)`, in post order, the large message last; rank 1's received
// contents are checked where its receive succeeded.
void run_flap(
    rdmx_transport_t t, const std::string& netdev,
    const std::function<void(Rank&, const std::vector<int>&, const rdmx_stats_t&)>& check) {
  EXPECT_TRUE(run_ranks(
      2,
      [&](Rank& rank) {
        Session s = open_session(rank, device_for(rank.rank(), true), t, short_timeout);
        quiesce(rank, s);
        std::vector<std::uint64_t> v(kFlapMsgs);
        std::vector<unsigned char> big(kFlapLarge);
        std::vector<rdmx_request_t> reqs(kFlapMsgs + 1);
        if (rank.rank() == 0) {
          RDMX_CHECK(rank, set_link(netdev, false));
          const auto t0 = std::chrono::steady_clock::now();
          for (int i = 0; i < kFlapMsgs; ++i) {
            v[i] = static_cast<std::uint64_t>(i) * 7919 + 3;
            RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[1], &v[i], sizeof(v[i]), 10, 0, &reqs[i],
                                              nullptr, nullptr));
          }
          for (std::size_t i = 0; i < kFlapLarge; ++i) {
            big[i] = static_cast<unsigned char>(i * 31 + 7);
          }
          RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[1], big.data(), kFlapLarge, 11, 0,
                                            &reqs[kFlapMsgs], nullptr, nullptr));
          while (seconds_since(t0) < 1.0) {
            (void)rdmx_worker_progress(s.worker);
          }
          RDMX_CHECK(rank, set_link(netdev, true));
        } else {
          for (int i = 0; i < kFlapMsgs; ++i) {
            RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, &v[i], sizeof(v[i]), s.uids[0], 10, ~0ull,
                                              &reqs[i], nullptr, nullptr));
          }
          RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, big.data(), kFlapLarge, s.uids[0], 11, ~0ull,
                                            &reqs[kFlapMsgs], nullptr, nullptr));
        }
        std::vector<int> results;
        for (auto& r : reqs) {
          results.push_back(wait_request(rank, s.worker, &r, nullptr, "request across a flap",
                                         std::chrono::milliseconds(6 * kPeerTimeoutMs)));
        }
        if (rank.rank() == 1) {
          for (int i = 0; i < kFlapMsgs; ++i) {
            if (results[i] == RDMX_OK) {
              RDMX_CHECK_EQ(rank, v[i], static_cast<std::uint64_t>(i) * 7919 + 3);
            }
          }
          for (std::size_t i = 0; results[kFlapMsgs] == RDMX_OK && i < kFlapLarge; ++i) {
            RDMX_CHECK_EQ(rank, big[i], static_cast<unsigned char>(i * 31 + 7));
          }
        }
        rdmx_stats_t st{};
        RDMX_CHECK_OK(rank, rdmx_worker_stats(s.worker, &st));
        std::printf("rank %d: UD QP resets %llu\n", rank.rank(),
                    static_cast<unsigned long long>(st.ud_qp_resets));
        check(rank, results, st);
        rank.barrier();
        close_session(rank, s);
      },
      RunOptions{.timeout = std::chrono::seconds(120)}));
}

// UD: the UD QPs that the failed sends moved to error are reset (faults.cc) and rdmx's own
// resends ride through the flap: everything arrives intact.
TEST_F(PortFault, UdFlapLosesNothing) {
  run_flap(RDMX_TRANSPORT_UD, netdev_,
           [](Rank& rank, const std::vector<int>& results, const rdmx_stats_t& st) {
             for (const int rc : results) {
               RDMX_CHECK_EQ(rank, rc, RDMX_OK);
             }
             // rxe fails a UD send while the link is down and moves the QP to error.
             RDMX_CHECK(rank, rank.rank() == 1 || st.ud_qp_resets >= 1);
           });
}

// RC on rxe: a send while the netdev is down moves the QP to error at once (rxe cannot transmit:
// IBV_WC_LOC_QP_OP_ERR) instead of retrying as an adapter does, so the connection fails. What
// is defined: every request ends (success or RDMX_ERR_UNREACHABLE, never a hang or a worker
// failure: the port came back within peer_timeout_ms), and the large message, still in flight,
// fails on both sides.
TEST_F(PortFault, RcLinkDownOnRxeFailsTheConnectionCleanly) {
  run_flap(RDMX_TRANSPORT_RC, netdev_,
           [](Rank& rank, const std::vector<int>& results, const rdmx_stats_t&) {
             for (const int rc : results) {
               RDMX_CHECK(rank, rc == RDMX_OK || rc == RDMX_ERR_UNREACHABLE);
             }
             RDMX_CHECK_EQ(rank, results.back(), RDMX_ERR_UNREACHABLE);
           });
}

// The link stays down: after peer_timeout_ms (within a watchdog period) rank 0's worker fails
// its waiting any-source receive with RDMX_ERR_IO.
void PortFault::down_for_good(rdmx_transport_t t) {
  const std::string netdev = netdev_;
  EXPECT_TRUE(run_ranks(
      2,
      [&](Rank& rank) {
        Session s = open_session(rank, device_for(rank.rank(), true), t, short_timeout);
        quiesce(rank, s);
        if (rank.rank() == 1) {
          rank.barrier();
          close_session(rank, s);
          return;
        }
        std::uint64_t in = 0;
        rdmx_request_t any;
        RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, &in, sizeof(in), RDMX_ANY_SOURCE, 1, ~0ull,
                                          &any, nullptr, nullptr));
        RDMX_CHECK(rank, set_link(netdev, false));
        const auto t0 = std::chrono::steady_clock::now();
        rdmx_status_t st{};
        RDMX_CHECK_EQ(rank,
                      wait_request(rank, s.worker, &any, &st, "receive with the port down",
                                   std::chrono::milliseconds(3 * kPeerTimeoutMs)),
                      RDMX_ERR_IO);
        const double secs = seconds_since(t0);
        std::printf("%s: the worker failed %.2f s after its link went down\n",
                    t == RDMX_TRANSPORT_RC ? "rc" : "ud", secs);
        RDMX_CHECK(rank, secs >= kPeerTimeoutMs / 1000.0 * 0.9);
        RDMX_CHECK(rank, set_link(netdev, true));
        close_session(rank, s);
        rank.barrier();
      },
      RunOptions{.timeout = std::chrono::seconds(120)}));
}

// A worker asleep on its event fd (rdmx_worker_arm) when its link goes down: the device's
// IBV_EVENT_PORT_ERR wakes it (the async fd is in the set), and a sleeper loop as UCP's
// (progress, arm, sleep until readable) then wakes at the watchdog's deadline until, the port
// down for peer_timeout_ms, the worker fails its receive with RDMX_ERR_IO. Before, nothing woke
// it: the sleep lasted until something else came. The worker has no peer, so no failed peer
// makes arming busy: the failure usually comes inside an arming (its housekeeping runs the
// watchdog; progress looks at the clock every 256th call only), which must then not say armed
// over the receive it just failed.
TEST_F(PortFault, ASleeperWakesForItsPortAndFailsWhenItStaysDown) {
  const std::string netdev = netdev_;
  EXPECT_TRUE(run_ranks(
      1,
      [&](Rank& rank) {
        Session s =
            open_session(rank, device_for(rank.rank(), true), RDMX_TRANSPORT_UD, [](auto& c) {
              short_timeout(c);
              c.shm = 0;         // a worker with a segment never arms
              c.ring_peers = 0;  // no ring to take back first
            });
        int fd = -1;
        RDMX_CHECK_OK(rank, rdmx_worker_event_fd(s.worker, &fd));
        // Armed, and the fd quiet for 1.5 s: no deadline is near, and a wake after the link goes
        // down is the port's.
        bool armed = false;
        for (int i = 0; i < 10 && !armed; ++i) {
          const auto t1 = std::chrono::steady_clock::now();
          while (seconds_since(t1) < 0.1) {
            (void)rdmx_worker_progress(s.worker);
          }
          armed = rdmx_worker_arm(s.worker) == RDMX_OK && !readable(fd, 1500);
        }
        RDMX_CHECK(rank, armed);
        std::uint64_t in = 0;
        rdmx_request_t any;  // posted after arming: it makes no event
        RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, &in, sizeof(in), RDMX_ANY_SOURCE, 1, ~0ull,
                                          &any, nullptr, nullptr));
        RDMX_CHECK(rank, set_link(netdev, false));
        const auto t0 = std::chrono::steady_clock::now();
        RDMX_CHECK(rank, readable(fd, 2000));  // IBV_EVENT_PORT_ERR
        std::printf("ud: the sleeper woke %.3f s after its link went down\n", seconds_since(t0));
        int sleeps = 0;
        for (;;) {
          RDMX_CHECK(rank, seconds_since(t0) < 3 * kPeerTimeoutMs / 1000.0);
          (void)rdmx_worker_progress(s.worker);
          if (rdmx_request_test(&any, nullptr) != RDMX_INPROGRESS) {
            break;  // the caller looks before it sleeps
          }
          if (rdmx_worker_arm(s.worker) == RDMX_OK) {
            RDMX_CHECK_EQ(rank, rdmx_request_test(&any, nullptr), RDMX_INPROGRESS);
            RDMX_CHECK(rank, readable(fd, 2000));  // the watchdog's deadline (100 ms)
            ++sleeps;
          }
        }
        const double secs = seconds_since(t0);
        std::printf("ud: the sleeping worker failed %.2f s after its link went down, %d sleeps\n",
                    secs, sleeps);
        RDMX_CHECK_EQ(rank, rdmx_request_test(&any, nullptr), RDMX_ERR_IO);
        RDMX_CHECK(rank, secs >= kPeerTimeoutMs / 1000.0 * 0.9);
        RDMX_CHECK(rank, sleeps > 0 && sleeps < 500);  // it slept, and not a spin
        RDMX_CHECK(rank, set_link(netdev, true));
        close_session(rank, s);
      },
      RunOptions{.timeout = std::chrono::seconds(120)}));
}

TEST_F(PortFault, DownForGoodFailsTheWorkerRc) {
  down_for_good(RDMX_TRANSPORT_RC);
}

TEST_F(PortFault, DownForGoodFailsTheWorkerUd) {
  down_for_good(RDMX_TRANSPORT_UD);
}

}  // namespace
}  // namespace rdmx::test
