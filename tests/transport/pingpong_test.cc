// Ping-pong of every message size from 0 to the eager limit, content verified, over RC and UD,
// with both processes on one device (rxe loops back) and across two devices (rxe1 <-> rxe2).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "rdmx/rdmx.h"
#include "tests/guest/support/guest_env.h"
#include "tests/transport/support/procs.h"
#include "transport/debug.h"

namespace rdmx::test {
namespace {

struct Case {
  rdmx_transport_t transport;
  bool two_devices;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << (c.transport == RDMX_TRANSPORT_RC ? "RC" : "UD")
      << (c.two_devices ? ", two devices" : ", one device");
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(info.param.transport == RDMX_TRANSPORT_RC ? "Rc" : "Ud") +
         (info.param.two_devices ? "TwoDevices" : "OneDevice");
}

std::uint8_t pattern(std::size_t size, std::size_t i) {
  return static_cast<std::uint8_t>(size * 131 + i * 7 + (i >> 8));
}

void pingpong_rank(Rank& rank, const Case& c, const std::vector<std::string>& devs) {
  const std::string dev = c.two_devices ? devs[static_cast<std::size_t>(rank.rank())] : devs[0];
  const Pair pair = open_pair(rank, test_config(dev, c.transport));
  rdmx_worker_t* const w = pair.worker;
  rdmx_ep_t* const ep = pair.ep;
  const int peer = 1 - rank.rank();
  rdmx_stats_t st{};
  RDMX_CHECK_OK(rank, rdmx_worker_stats(w, &st));
  RDMX_CHECK_EQ(rank, st.transport, c.transport);

  // The eager limit: the largest size that does not go by rendezvous (a rendezvous send counts
  // in rndv_sends as soon as its RTS is posted, and completes only once the peer receives it).
  // RC: the large buffer unless the rendezvous threshold is lower (by default 8192).
  const rdmx_config_t defaults = test_config(dev, c.transport);
  const std::size_t expect_limit =
      c.transport == RDMX_TRANSPORT_RC
          ? std::min<std::size_t>(
                {defaults.large_buf_size, defaults.eager_limit, defaults.rndv_thresh - 1})
          : 0;
  // Both ranks send one byte with `tag` and wait for the peer's: a two-way barrier. The send
  // flushes: both waits can complete without a progress call (the peer's byte may be here
  // already), and the rank then blocks out of band, so a send coalesced behind the last probe
  // would never leave (the peer then waited 30 s for it, about one run in five).
  auto exchange_byte = [&](std::uint64_t tag, const std::string& what) {
    rdmx_request_t sreq, rreq;
    std::uint8_t out = 1, in = 0;
    RDMX_CHECK_OK(rank, rdmx_tag_recv(w, &in, 1, RDMX_ANY_SOURCE, tag, ~std::uint64_t{0}, &rreq,
                                      nullptr, nullptr));
    RDMX_CHECK_OK(rank, rdmx_tag_send(ep, &out, 1, tag, RDMX_SEND_FLUSH, &sreq, nullptr, nullptr));
    RDMX_CHECK_OK(rank, wait_request(rank, w, &sreq, nullptr, (what + " send").c_str()));
    RDMX_CHECK_OK(rank, wait_request(rank, w, &rreq, nullptr, (what + " receive").c_str()));
  };
  // The connection first: a send queued for it has not chosen its protocol yet (nothing counted).
  exchange_byte(0x1000, "connection");
  std::size_t limit = 0;
  std::vector<std::uint8_t> probe(1 << 16);
  std::vector<rdmx_request_t> probes;
  probes.reserve(64);  // requests must not move while active
  {
    std::size_t lo = 0, hi = probe.size();  // lo: sent eagerly; hi: by rendezvous
    auto rndv_sends = [&] {
      rdmx_stats_t s{};
      RDMX_CHECK_OK(rank, rdmx_worker_stats(w, &s));
      return s.rndv_sends;
    };
    while (lo + 1 < hi) {
      const std::size_t mid = (lo + hi) / 2;
      const std::uint64_t before = rndv_sends();
      probes.emplace_back();
      // The peer drains these "probe" messages (tag 0x7fff) below; they complete after that.
      RDMX_CHECK_OK(
          rank, rdmx_tag_send(ep, probe.data(), mid, 0x7fff, 0, &probes.back(), nullptr, nullptr));
      // A send queued for resources (UD's congestion window) has not chosen yet: progress until
      // it posts its RTS (rendezvous) or completes (eager; a rendezvous send cannot complete
      // before the peer receives it, which it does only after probing).
      bool rndv = false;
      const auto t0 = std::chrono::steady_clock::now();
      for (;;) {
        if (rndv_sends() != before) {
          rndv = true;
          break;
        }
        if (rdmx_request_test(&probes.back(), nullptr) != RDMX_INPROGRESS) {
          break;
        }
        RDMX_CHECK(rank, rdmx_worker_progress(w) >= 0);
        if (seconds_since(t0) > 30) {
          rank.fail(__FILE__, __LINE__, "a probe send neither completed nor went by rendezvous");
        }
      }
      (rndv ? hi : lo) = mid;
    }
    limit = lo;
  }
  // Both sides progress until both are done probing: the peer's queued probes need our acks.
  exchange_byte(0x1001, "probing-done");
  if (expect_limit != 0) {
    RDMX_CHECK_EQ(rank, limit, expect_limit);
  }
  // Both sides probed their own sends: they must agree.
  const auto limits = rank.allgather(&limit, sizeof(limit));
  std::size_t peer_limit = 0;
  std::memcpy(&peer_limit, limits[static_cast<std::size_t>(peer)].data(), sizeof(peer_limit));
  RDMX_CHECK_EQ(rank, peer_limit, limit);
  std::vector<std::uint8_t> sink(1 << 16);
  rank.barrier();
  // Anything still in flight from the peer's probes: a sentinel message closes the stream.
  {
    rdmx_request_t sreq, rreq;
    std::uint8_t z = 0;
    RDMX_CHECK_OK(rank, rdmx_tag_send(ep, &z, 1, 0x7ffe, 0, &sreq, nullptr, nullptr));
    for (;;) {
      RDMX_CHECK_OK(rank, rdmx_tag_recv(w, sink.data(), sink.size(), RDMX_ANY_SOURCE, 0x7ffe,
                                        0x7ffe, &rreq, nullptr, nullptr));
      rdmx_status_t s{};
      RDMX_CHECK_OK(rank, wait_request(rank, w, &rreq, &s, "sentinel receive"));
      if (s.tag == 0x7ffe) {
        break;
      }
    }
    RDMX_CHECK_OK(rank, wait_request(rank, w, &sreq, nullptr, "sentinel send"));
    for (auto& p : probes) {
      RDMX_CHECK_OK(rank, wait_request(rank, w, &p, nullptr, "probe send"));
    }
  }

  // Every size up to 1100 (the inline limit, 512 - 32, and the small class, 1024, are below);
  // above, every size within 3 bytes of a power of two or a multiple of 1024 (class and buffer
  // boundaries) and a stride of 53 in between. UD (992 at MTU 1024): every size.
  std::vector<std::size_t> sizes;
  for (std::size_t s = 0; s <= limit; ++s) {
    bool near = s <= 1100 || s + 3 >= limit;
    for (std::size_t b = 1024; b <= limit + 3 && !near; b += 1024) {
      near = s + 3 >= b && s <= b + 3;
    }
    for (std::size_t p = 2048; p <= 2 * limit && !near; p *= 2) {
      near = s + 3 >= p && s <= p + 3;
    }
    if (near || s % 53 == 0) {
      sizes.push_back(s);
    }
  }
  std::vector<std::uint8_t> out(limit + 64), in(limit + 64);
  const std::uint64_t my_uid = rdmx_worker_uid(w);
  const auto uids = rank.allgather(&my_uid, sizeof(my_uid));
  std::uint64_t peer_uid = 0;
  std::memcpy(&peer_uid, uids[static_cast<std::size_t>(peer)].data(), sizeof(peer_uid));
  const auto t1 = std::chrono::steady_clock::now();
  for (const std::size_t s : sizes) {
    rdmx_request_t sreq, rreq;
    rdmx_status_t st_r{};
    if (rank.rank() == 0) {
      for (std::size_t i = 0; i < s; ++i) {
        out[i] = pattern(s, i);
      }
      std::memset(in.data(), 0xee, s + 8);
      RDMX_CHECK_OK(
          rank, rdmx_tag_recv(w, in.data(), s, RDMX_ANY_SOURCE, s, ~0ull, &rreq, nullptr, nullptr));
      RDMX_CHECK_OK(rank, rdmx_tag_send(ep, out.data(), s, s, 0, &sreq, nullptr, nullptr));
      RDMX_CHECK_OK(rank, wait_request(rank, w, &sreq, nullptr,
                                       ("ping send of " + std::to_string(s)).c_str()));
      RDMX_CHECK_OK(rank, wait_request(rank, w, &rreq, &st_r, "pong receive"));
      RDMX_CHECK_EQ(rank, st_r.length, s);
      RDMX_CHECK_EQ(rank, st_r.tag, s);
      RDMX_CHECK_EQ(rank, st_r.source, peer_uid);
      for (std::size_t i = 0; i < s; ++i) {
        if (in[i] != pattern(s, i)) {
          rank.fail(__FILE__, __LINE__,
                    "size " + std::to_string(s) + ": byte " + std::to_string(i) + " differs");
        }
      }
      RDMX_CHECK_EQ(rank, in[s], 0xee);  // nothing past the message
    } else {
      RDMX_CHECK_OK(rank, rdmx_tag_recv(w, in.data(), in.size(), RDMX_ANY_SOURCE, 0, 0, &rreq,
                                        nullptr, nullptr));
      RDMX_CHECK_OK(rank, wait_request(rank, w, &rreq, &st_r, "ping receive"));
      RDMX_CHECK_EQ(rank, st_r.length, s);
      RDMX_CHECK_EQ(rank, st_r.tag, s);
      RDMX_CHECK_OK(
          rank, rdmx_tag_send(ep, in.data(), st_r.length, st_r.tag, 0, &sreq, nullptr, nullptr));
      RDMX_CHECK_OK(rank, wait_request(rank, w, &sreq, nullptr, "pong send"));
    }
  }
  const double secs = seconds_since(t1);
  if (rank.rank() == 0) {
    RDMX_CHECK_OK(rank, rdmx_worker_stats(w, &st));
    std::printf(
        "%s %s: %zu sizes (0..%zu) in %.2f s, %.1f us per round trip; node rnr naks %llu, "
        "retransmits %llu, unexpected %llu, refills %llu\n",
        c.transport == RDMX_TRANSPORT_RC ? "RC" : "UD",
        c.two_devices ? "two devices" : "one device", sizes.size(), limit, secs,
        secs * 1e6 / static_cast<double>(sizes.size()),
        static_cast<unsigned long long>(st.node_rnr_naks),
        static_cast<unsigned long long>(st.ud_retransmits),
        static_cast<unsigned long long>(st.unexpected),
        static_cast<unsigned long long>(st.srq_refills));
  }
  rank.barrier();
  rdmx_ep_destroy(ep);
  rdmx_worker_destroy(w);
  const auto report = rdmx::transport::debug::last_destroy_report();
  RDMX_CHECK(rank, report.valid);
  RDMX_CHECK_EQ(rank, report.wr_ids.outstanding(), 0u);
}

class PingPong : public ::testing::TestWithParam<Case> {};

TEST_P(PingPong, EverySizeUpToTheEagerLimit) {
  RDMX_REQUIRE_DEVICE();
  const Case c = GetParam();
  const std::vector<std::string> devs = devices();
  if (c.two_devices && devs.size() < 2) {
    GTEST_SKIP() << "needs two devices (ci/softroce/run --devices 2)";
  }
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(run_ranks(2, [&](Rank& rank) { pingpong_rank(rank, c, devs); }));
  std::printf("total %.2f s\n", seconds_since(t0));
}

INSTANTIATE_TEST_SUITE_P(Transport, PingPong,
                         ::testing::Values(Case{RDMX_TRANSPORT_RC, false},
                                           Case{RDMX_TRANSPORT_RC, true},
                                           Case{RDMX_TRANSPORT_UD, false},
                                           Case{RDMX_TRANSPORT_UD, true}),
                         case_name);

}  // namespace
}  // namespace rdmx::test
