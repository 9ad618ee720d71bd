// RC eager rings (transport/channel/rc_ring.cc, protocol/ring.h): small messages RDMA-written into
// the receiver's memory. Checked on real rxe devices, two ranks unless said:
// - messages of every path (ring, SRQ small and large class, rendezvous, synchronous) mixed in
//   one stream arrive once, in send order, with their bytes, receives posted before and after
//   arrival; the counters prove the ring carried some and the SRQs the others;
// - a two-slot ring of 64-byte slots (at most 24 bytes of payload) wraps a thousand times in a
//   ping-pong, runs full in streams (senders fall back to the SRQs) and still keeps order;
// - a worker gives at most ring_peers rings; ring_peers = 0 and UD give none; a ring slab that
//   cannot be registered (`ulimit -l`) leaves every message on the SRQs, and nothing else;
// - teardown with rings: every wr_id back, no destroy error (close_session).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "rdmx/rdmx.h"
#include "tests/guest/support/guest_env.h"
#include "tests/transport/support/procs.h"

namespace rdmx::test {
namespace {

constexpr std::uint64_t kTag = 0x5151;

rdmx_stats_t stats_of(Rank& rank, rdmx_worker_t* w) {
  rdmx_stats_t st{};
  RDMX_CHECK_OK(rank, rdmx_worker_stats(w, &st));
  return st;
}

std::vector<std::uint8_t> contents(int i, std::size_t len) {
  std::vector<std::uint8_t> b(len);
  for (std::size_t k = 0; k < len; ++k) {
    b[k] = static_cast<std::uint8_t>(i * 31 + k * 7 + (k >> 8));
  }
  return b;
}

// Sends `n` messages of size_of(i) to the peer in one stream (every `window` a wait for all of
// them; the last of a window flushes what coalescing packed, since the sender may block out of
// band next), then the peer receives them with one tag in order.
template <class SizeOf, class FlagsOf>
void stream(Rank& rank, Session& s, int n, int window, SizeOf size_of, FlagsOf flags_of,
            bool receives_first) {
  const int peer = 1 - rank.rank();
  constexpr unsigned flush = RDMX_SEND_FLUSH;
  if (rank.rank() == 1) {
    std::vector<std::vector<std::uint8_t>> bufs(static_cast<std::size_t>(window));
    std::vector<rdmx_request_t> reqs(static_cast<std::size_t>(window));
    for (int base = 0; base < n; base += window) {
      const int m = std::min(window, n - base);
      for (int k = 0; k < m; ++k) {
        auto& b = bufs[static_cast<std::size_t>(k)];
        b = contents(base + k, size_of(base + k));
        RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[static_cast<std::size_t>(peer)], b.data(), b.size(),
                                          kTag, flags_of(base + k) | (k + 1 == m ? flush : 0u),
                                          &reqs[static_cast<std::size_t>(k)], nullptr, nullptr));
      }
      for (int k = 0; k < m; ++k) {
        RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &reqs[static_cast<std::size_t>(k)],
                                         nullptr, "stream send"));
      }
    }
    return;
  }
  std::vector<std::uint8_t> buf(1 << 16);
  if (!receives_first) {
    // Let messages arrive before their receives (unexpected ones are copied out of the ring).
    const auto t0 = std::chrono::steady_clock::now();
    while (seconds_since(t0) < 0.2) {
      (void)rdmx_worker_progress(s.worker);
    }
  }
  for (int i = 0; i < n; ++i) {
    rdmx_request_t req;
    rdmx_status_t st{};
    RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, buf.data(), buf.size(), s.uids[1], kTag,
                                      ~std::uint64_t{0}, &req, nullptr, nullptr));
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, &st, "stream receive"));
    const std::size_t len = size_of(i);
    RDMX_CHECK_EQ(rank, st.error, RDMX_OK);
    RDMX_CHECK_EQ(rank, st.length, len);
    const auto want = contents(i, len);
    if (std::memcmp(buf.data(), want.data(), len) != 0) {
      rank.fail(__FILE__, __LINE__, "message " + std::to_string(i) + " has wrong bytes");
    }
  }
}

struct Params {
  bool two_devices;
  bool coalesce;
};

class Ring : public ::testing::TestWithParam<Params> {
 protected:
  void SetUp() override { RDMX_REQUIRE_DEVICE(); }
};

// Sizes of every path at the default geometry (512-byte slots: up to 472 bytes of payload):
// ring, just too large for a slot, SRQ small class, large class, rendezvous.
std::size_t mixed_size(int i) {
  static const std::size_t kSizes[] = {8, 0, 472, 473, 100, 1000, 3000, 8, 20000, 1};
  return kSizes[static_cast<std::size_t>(i) % 10];
}

TEST_P(Ring, EveryPathMixedArrivesOnceInOrderWithItsBytes) {
  const Params p = GetParam();
  EXPECT_TRUE(run_ranks(2, [&](Rank& rank) {
    Session s = open_session(rank, device_for(rank.rank(), p.two_devices), RDMX_TRANSPORT_RC,
                             [&](rdmx_config_t& c) { c.coalesce = p.coalesce ? 1 : 0; });
    const auto sync_every_7 = [](int i) { return i % 7 == 3 ? unsigned{RDMX_SEND_SYNC} : 0u; };
    // Ping-pong first (16 in order make the receiver offer its ring), then a stream with
    // receives posted first, then one whose receives come late.
    for (int i = 0; i < 40; ++i) {
      const int from = i % 2;
      rank.barrier();
      if (rank.rank() == from) {
        const auto b = contents(i, 8);
        rdmx_request_t r;
        // Flushed: the rank blocks in the barrier next, without a progress call.
        RDMX_CHECK_OK(rank,
                      rdmx_tag_send(s.eps[static_cast<std::size_t>(1 - from)], b.data(), b.size(),
                                    kTag + 1, RDMX_SEND_FLUSH, &r, nullptr, nullptr));
        RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &r, nullptr, "ping"));
      } else {
        std::uint8_t in[8] = {};
        rdmx_request_t r;
        RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, in, sizeof(in), RDMX_ANY_SOURCE, kTag + 1,
                                          ~std::uint64_t{0}, &r, nullptr, nullptr));
        RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &r, nullptr, "pong"));
        RDMX_CHECK(rank, std::memcmp(in, contents(i, 8).data(), 8) == 0);
      }
    }
    stream(rank, s, 2000, 64, mixed_size, sync_every_7, /*receives_first=*/true);
    rank.barrier();
    stream(
        rank, s, 600, 600, mixed_size, [](int) { return 0u; }, /*receives_first=*/false);
    quiesce(rank, s);
    const rdmx_stats_t st = stats_of(rank, s.worker);
    // Each gave the other a ring (both received 20 pings, more than kRingOfferAfter).
    RDMX_CHECK_EQ(rank, st.ring_peers, 1u);
    // One slab for every ring the worker may give: 16 rings of 32 slots of 512 bytes.
    RDMX_CHECK_EQ(rank, st.ring_mem_bytes, 16u * 32u * 512u);
    // Coalescing packs most small sends of a window into a few batches (one ring write each).
    const std::uint64_t least = p.coalesce ? 20 : 500;
    if (rank.rank() == 1) {
      RDMX_CHECK(rank, st.ring_sends > least);
      RDMX_CHECK(rank, st.rndv_sends >= 260);  // the 20000-byte ones: never in the ring
    } else {
      RDMX_CHECK(rank, st.ring_recvs > least);
      RDMX_CHECK(rank, st.srq_consumed > 1000);  // the ones too large for a slot
    }
    close_session(rank, s);
  }));
}

std::string name(const ::testing::TestParamInfo<Params>& info) {
  return std::string(info.param.two_devices ? "TwoDevices" : "OneDevice") +
         (info.param.coalesce ? "Coalesce" : "");
}

INSTANTIATE_TEST_SUITE_P(Transport, Ring,
                         ::testing::Values(Params{false, false}, Params{true, false},
                                           Params{false, true}),
                         name);

class RingGeometry : public ::testing::Test {
 protected:
  void SetUp() override { RDMX_REQUIRE_DEVICE(); }
};

// Round trips of size_of(i) bytes, rank 0 first: each reply carries the ring_ack of the ping
// before it, so in steady state every message of both ranks goes through a ring.
template <class SizeOf>
void pingpong(Rank& rank, Session& s, int n, SizeOf size_of) {
  const int peer = 1 - rank.rank();
  std::vector<std::uint8_t> in(1 << 16);
  for (int i = 0; i < n; ++i) {
    const bool sender = (i % 2) == rank.rank();
    rdmx_request_t r;
    const std::size_t len = size_of(i);
    if (sender) {
      const auto b = contents(i, len);
      RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[static_cast<std::size_t>(peer)], b.data(), len,
                                        kTag + 2, 0, &r, nullptr, nullptr));
      RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &r, nullptr, "ping"));
    } else {
      rdmx_status_t st{};
      RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, in.data(), in.size(), s.uids[peer], kTag + 2,
                                        ~std::uint64_t{0}, &r, nullptr, nullptr));
      RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &r, &st, "pong"));
      RDMX_CHECK_EQ(rank, st.length, len);
      RDMX_CHECK(rank, std::memcmp(in.data(), contents(i, len).data(), len) == 0);
    }
  }
}

// Two slots of 64 bytes: a message of up to 24 bytes of payload fits. A ping-pong wraps the
// rings a thousand times; then windows of 256 sends keep the ring full, so most messages fall
// back to the SRQs and ring and SRQ messages interleave in every order the receiver can see.
TEST_F(RingGeometry, TinyRingWrapsRunsFullAndKeepsOrder) {
  EXPECT_TRUE(run_ranks(2, [&](Rank& rank) {
    Session s =
        open_session(rank, device_for(rank.rank(), false), RDMX_TRANSPORT_RC, [](rdmx_config_t& c) {
          c.ring_slots = 2;
          c.ring_slot_size = 64;
          c.coalesce = 0;
        });
    const auto size_of = [](int i) -> std::size_t { return i % 5 == 4 ? 25 : (i % 25); };
    const auto small = [](int i) -> std::size_t { return static_cast<std::size_t>(i % 25); };
    pingpong(rank, s, 4000, small);
    rdmx_stats_t st = stats_of(rank, s.worker);
    RDMX_CHECK_EQ(rank, st.ring_peers, 1u);
    RDMX_CHECK(rank, st.ring_sends > 1900);  // of 2000: all but the first few
    RDMX_CHECK(rank, st.ring_recvs > 1900);
    rank.barrier();
    stream(
        rank, s, 3000, 1, size_of, [](int) { return 0u; }, true);
    rank.barrier();
    stream(
        rank, s, 6000, 256, size_of, [](int) { return 0u; }, true);
    rank.barrier();
    stream(
        rank, s, 1000, 1000, size_of, [](int) { return 0u; }, false);
    quiesce(rank, s);
    const rdmx_stats_t end = stats_of(rank, s.worker);
    if (rank.rank() == 0) {
      // The 25-byte ones, and those that found the ring full.
      RDMX_CHECK(rank, end.srq_consumed > st.srq_consumed + 2000);
      std::printf("tiny ring, streams: %llu of 10000 messages through the ring\n",
                  static_cast<unsigned long long>(end.ring_recvs - st.ring_recvs));
    }
    close_session(rank, s);
  }));
}

// Three senders, one receiver that gives at most one ring: the first peer to send it 16 messages
// gets it, the others keep the SRQs; all messages arrive in order either way.
TEST_F(RingGeometry, AWorkerGivesAtMostRingPeersRings) {
  EXPECT_TRUE(run_ranks(4, [&](Rank& rank) {
    Session s =
        open_session(rank, device_for(rank.rank(), false), RDMX_TRANSPORT_RC, [](rdmx_config_t& c) {
          c.ring_peers = 1;
          c.coalesce = 0;  // one message per ring write or SRQ buffer
        });
    constexpr int kMsgs = 300;
    if (rank.rank() != 0) {
      std::vector<rdmx_request_t> reqs(kMsgs);
      std::vector<std::vector<std::uint8_t>> bufs(kMsgs);
      for (int i = 0; i < kMsgs; ++i) {
        bufs[static_cast<std::size_t>(i)] = contents(i + rank.rank(), 16);
        RDMX_CHECK_OK(rank,
                      rdmx_tag_send(s.eps[0], bufs[static_cast<std::size_t>(i)].data(), 16, kTag, 0,
                                    &reqs[static_cast<std::size_t>(i)], nullptr, nullptr));
        RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &reqs[static_cast<std::size_t>(i)],
                                         nullptr, "send"));
      }
    } else {
      std::vector<int> next(4, 0);
      for (int n = 0; n < 3 * kMsgs; ++n) {
        std::uint8_t in[16];
        rdmx_request_t r;
        rdmx_status_t st{};
        RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, in, sizeof(in), RDMX_ANY_SOURCE, kTag,
                                          ~std::uint64_t{0}, &r, nullptr, nullptr));
        RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &r, &st, "receive"));
        int from = 0;
        for (int k = 1; k < 4; ++k) {
          from = s.uids[static_cast<std::size_t>(k)] == st.source ? k : from;
        }
        RDMX_CHECK(rank, from != 0);
        const int i = next[static_cast<std::size_t>(from)]++;
        RDMX_CHECK(rank, std::memcmp(in, contents(i + from, 16).data(), 16) == 0);
      }
      const rdmx_stats_t st = stats_of(rank, s.worker);
      RDMX_CHECK_EQ(rank, st.ring_peers, 1u);
      RDMX_CHECK_EQ(rank, st.ring_mem_bytes, 32u * 512u);  // room for one ring only
      RDMX_CHECK(rank, st.ring_recvs > 100);
      RDMX_CHECK(rank, st.srq_consumed > 2 * 200);
    }
    quiesce(rank, s);
    close_session(rank, s);
  }));
}

// The rings' slab (16 rings of 1024 slots of 4 KiB: 64 MiB) is beyond the receiver's pinning
// limit, its SRQs are not: the offer is never made, every message takes the SRQ path, in order.
TEST_F(RingGeometry, UnregistrableSlabLeavesTheSrqs) {
  EXPECT_TRUE(run_ranks(2, [&](Rank& rank) {
    if (rank.rank() == 0 && !limit_pinning(48u << 20)) {
      rank.fail(__FILE__, __LINE__, "cannot drop CAP_IPC_LOCK / lower RLIMIT_MEMLOCK");
    }
    Session s =
        open_session(rank, device_for(rank.rank(), false), RDMX_TRANSPORT_RC, [](rdmx_config_t& c) {
          c.ring_slots = 1024;
          c.ring_slot_size = 4096;
        });
    stream(
        rank, s, 300, 1, [](int i) -> std::size_t { return 8 + i % 100; }, [](int) { return 0u; },
        true);
    quiesce(rank, s);
    const rdmx_stats_t st = stats_of(rank, s.worker);
    if (rank.rank() == 0) {
      RDMX_CHECK_EQ(rank, st.ring_peers, 0u);
      RDMX_CHECK_EQ(rank, st.ring_mem_bytes, 0u);
      RDMX_CHECK_EQ(rank, st.ring_recvs, 0u);
      RDMX_CHECK(rank, st.srq_consumed >= 300u);
    }
    close_session(rank, s);
  }));
}

// ring_peers = 0, and UD (no connection to write over): no ring, the SRQs carry everything.
TEST_F(RingGeometry, OffAndUdGiveNoRing) {
  for (const rdmx_transport_t t : {RDMX_TRANSPORT_RC, RDMX_TRANSPORT_UD}) {
    EXPECT_TRUE(run_ranks(2, [&](Rank& rank) {
      Session s = open_session(rank, device_for(rank.rank(), false), t, [&](rdmx_config_t& c) {
        if (t == RDMX_TRANSPORT_RC) {
          c.ring_peers = 0;
        }
      });
      stream(
          rank, s, 200, 1, [](int) -> std::size_t { return 8; }, [](int) { return 0u; }, true);
      quiesce(rank, s);
      const rdmx_stats_t st = stats_of(rank, s.worker);
      RDMX_CHECK_EQ(rank, st.ring_peers, 0u);
      RDMX_CHECK_EQ(rank, st.ring_sends, 0u);
      RDMX_CHECK_EQ(rank, st.ring_recvs, 0u);
      RDMX_CHECK_EQ(rank, st.ring_mem_bytes, 0u);
      close_session(rank, s);
    })) << (t == RDMX_TRANSPORT_RC ? "rc, ring_peers 0" : "ud");
  }
}

}  // namespace
}  // namespace rdmx::test
