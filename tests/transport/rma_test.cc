// One-sided RDMA of the C API (rdmx_put, rdmx_get), two ranks on one device: data both ways at
// sizes from 0 bytes to 4 MiB, over RC and over UD (on-demand RC write QPs), what is refused
// (bad arguments, cancel), a bad remote key failing the request and the RC connection (over UD
// only the request: the next put goes on a new write QP), and teardown with puts in flight.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cstring>
#include <vector>

#include "rdmx/rdmx.h"
#include "tests/guest/support/guest_env.h"
#include "tests/transport/support/procs.h"

namespace rdmx::test {
namespace {

constexpr std::size_t kRegion = std::size_t{16} << 20;  // each rank's registered memory
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

// What a rank tells the other about its region.
struct RemoteRegion {
  std::uint64_t addr;
  std::uint32_t rkey;
};

std::uint8_t pattern(int rank, std::size_t i) {
  return static_cast<std::uint8_t>(i * 7 + static_cast<std::size_t>(rank) * 101 + 13);
}

// A rank's region: registered in its worker's PD, filled with its pattern, and the peer's.
struct Region {
  std::vector<std::uint8_t> bytes;
  ibv_mr* mr = nullptr;
  RemoteRegion peer{};

  Region(Rank& rank, rdmx_worker_t* worker) : bytes(kRegion) {
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      bytes[i] = pattern(rank.rank(), i);
    }
    ibv_pd* pd = rdmx_worker_pd(worker);
    RDMX_CHECK(rank, pd != nullptr);
    mr = ibv_reg_mr(pd, bytes.data(), bytes.size(), kAccess);
    RDMX_CHECK(rank, mr != nullptr);
    const RemoteRegion mine{reinterpret_cast<std::uintptr_t>(bytes.data()), mr->rkey};
    const std::vector<Blob> all = rank.allgather(&mine, sizeof(mine));
    std::memcpy(&peer, all[static_cast<std::size_t>(1 - rank.rank())].data(), sizeof(peer));
  }
  ~Region() { (void)ibv_dereg_mr(mr); }
};

// Posts a put or get to the other rank, retrying while the connection is still being set up
// or its queue is full (RDMX_ERR_NO_RESOURCE), and returns the post's code.
int post_rma(Rank& rank, Session& s, bool get, void* buf, std::size_t n, std::uint32_t lkey,
             std::uint64_t raddr, std::uint32_t rkey, rdmx_request_t* req,
             rdmx_callback_t cb = nullptr, void* arg = nullptr) {
  rdmx_ep_t* ep = s.eps[static_cast<std::size_t>(1 - rank.rank())];
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const int rc = get ? rdmx_get(ep, buf, n, lkey, raddr, rkey, req, cb, arg)
                       : rdmx_put(ep, buf, n, lkey, raddr, rkey, req, cb, arg);
    if (rc != RDMX_ERR_NO_RESOURCE || seconds_since(t0) > 30) {
      return rc;
    }
    (void)rdmx_worker_progress(s.worker);
  }
}

void count_callback(rdmx_request_t*, const rdmx_status_t* status, void* arg) {
  auto* counts = static_cast<std::vector<int>*>(arg);
  ++(*counts)[status->error == RDMX_OK ? 0 : status->error == RDMX_ERR_CANCELED ? 1 : 2];
}

class Rma : public ::testing::Test {
 protected:
  void SetUp() override { RDMX_REQUIRE_DEVICE(); }
  static void run(const std::function<void(Rank&, Session&)>& body,
                  rdmx_transport_t t = RDMX_TRANSPORT_RC) {
    EXPECT_TRUE(run_ranks(2, [&](Rank& rank) {
      Session s = open_session(rank, device_for(rank.rank(), false), t);
      body(rank, s);
      close_session(rank, s);
    }));
  }
};

// Each rank puts its pattern into the other's region and gets the other's pattern into its
// own, at every size, concurrently; then checks what the peer put.
void carry_every_byte(Rank& rank, Session& s) {
  {
    Region r(rank, s.worker);
    const std::size_t sizes[] = {0, 1, 8, 4095, 65536, std::size_t{4} << 20};
    const std::size_t half = kRegion / 2;  // puts land in the lower half, gets read the upper
    std::vector<std::uint8_t> got(std::size_t{4} << 20);
    ibv_mr* got_mr = ibv_reg_mr(rdmx_worker_pd(s.worker), got.data(), got.size(), kAccess);
    RDMX_CHECK(rank, got_mr != nullptr);
    std::size_t offset = 0;
    for (std::size_t n : sizes) {
      rdmx_request_t req;
      rdmx_status_t st{};
      // Put our bytes [half + offset, +n) at the peer's [offset, +n).
      RDMX_CHECK_OK(rank, post_rma(rank, s, false, r.bytes.data() + half + offset, n, r.mr->lkey,
                                   r.peer.addr + offset, r.peer.rkey, &req));
      RDMX_CHECK_EQ(rank, rdmx_request_cancel(s.worker, &req), RDMX_ERR_BUSY);
      RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, &st, "put"));
      RDMX_CHECK_EQ(rank, st.length, n);
      RDMX_CHECK_EQ(rank, st.source, s.uids[static_cast<std::size_t>(1 - rank.rank())]);
      // Get the peer's [half + offset, +n), with a callback.
      std::vector<int> counts(3);
      std::memset(got.data(), 0, n);
      RDMX_CHECK_OK(
          rank, post_rma(rank, s, true, got.data(), n, got_mr->lkey, r.peer.addr + half + offset,
                         r.peer.rkey, &req, count_callback, &counts));
      RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, &st, "get"));
      RDMX_CHECK_EQ(rank, counts[0], 1);
      for (std::size_t i = 0; i < n; ++i) {
        if (got[i] != pattern(1 - rank.rank(), half + offset + i)) {
          RDMX_CHECK_EQ(rank, static_cast<int>(got[i]),
                        static_cast<int>(pattern(1 - rank.rank(), half + offset + i)));
        }
      }
      offset += n;
    }
    rank.barrier();  // both ranks' puts are done
    for (std::size_t i = 0; i < offset; ++i) {
      if (r.bytes[i] != pattern(1 - rank.rank(), half + i)) {
        RDMX_CHECK_EQ(rank, static_cast<int>(r.bytes[i]),
                      static_cast<int>(pattern(1 - rank.rank(), half + i)));
      }
    }
    RDMX_CHECK(rank, r.bytes[offset] == pattern(rank.rank(), offset));  // nothing beyond
    (void)ibv_dereg_mr(got_mr);
  }
}

TEST_F(Rma, PutsAndGetsCarryEveryByte) {
  run(carry_every_byte);
}

// Over UD they go on the peer's on-demand RC write QP (made by the first put, which is refused
// with RDMX_ERR_NO_RESOURCE until it is up): the same bytes arrive.
TEST_F(Rma, PutsAndGetsOverUdCarryEveryByte) {
  run(carry_every_byte, RDMX_TRANSPORT_UD);
}

TEST_F(Rma, RefusesWhatItCannotDo) {
  run([](Rank& rank, Session& s) {
    rdmx_request_t req;
    rdmx_ep_t* ep = s.eps[static_cast<std::size_t>(1 - rank.rank())];
    RDMX_CHECK_EQ(rank, rdmx_put(ep, nullptr, 8, 0, 0, 0, &req, nullptr, nullptr),
                  RDMX_ERR_INVALID_PARAM);
    RDMX_CHECK_EQ(rank, rdmx_get(ep, nullptr, 8, 0, 0, 0, &req, nullptr, nullptr),
                  RDMX_ERR_INVALID_PARAM);
    RDMX_CHECK_EQ(rank, rdmx_put(nullptr, &req, 8, 0, 0, 0, &req, nullptr, nullptr),
                  RDMX_ERR_INVALID_PARAM);
    RDMX_CHECK_EQ(rank, rdmx_get(ep, &req, 8, 0, 0, 0, nullptr, nullptr, nullptr),
                  RDMX_ERR_INVALID_PARAM);
    RDMX_CHECK(rank, rdmx_worker_pd(nullptr) == nullptr);
  });
}

// A get with a remote key the peer never gave out: the adapters refuse it, and the request
// fails with RDMX_ERR_IO.
void get_with_a_bad_key(Rank& rank, Session& s, Region& r) {
  rdmx_request_t req;
  rdmx_status_t st{};
  RDMX_CHECK_OK(rank, post_rma(rank, s, true, r.bytes.data(), 64, r.mr->lkey, r.peer.addr,
                               r.peer.rkey ^ 0x5a5a00u, &req));
  RDMX_CHECK_EQ(rank, wait_request(rank, s.worker, &req, &st, "bad-key get"), RDMX_ERR_IO);
}

// Over RC the connection fails with it (RC error semantics): a later put is refused.
TEST_F(Rma, ABadRemoteKeyFailsTheRequestAndTheConnection) {
  run([](Rank& rank, Session& s) {
    Region r(rank, s.worker);
    if (rank.rank() == 0) {
      rdmx_request_t req;
      rdmx_status_t st{};
      get_with_a_bad_key(rank, s, r);
      const auto t0 = std::chrono::steady_clock::now();
      int rc = RDMX_OK;
      while ((rc = rdmx_put(s.eps[1], r.bytes.data(), 8, r.mr->lkey, r.peer.addr, r.peer.rkey, &req,
                            nullptr, nullptr)) == RDMX_OK &&
             seconds_since(t0) < 20) {
        (void)wait_request(rank, s.worker, &req, &st, "put after the failure");
        (void)rdmx_worker_progress(s.worker);
      }
      RDMX_CHECK_EQ(rank, rc, RDMX_ERR_UNREACHABLE);
    }
    rank.barrier();
  });
}

// Over UD the refused get fails its request and its write QP only: the peer stays reachable,
// and the next put, on a new write QP, carries its bytes.
TEST_F(Rma, ABadRemoteKeyOverUdFailsOnlyTheRequest) {
  run(
      [](Rank& rank, Session& s) {
        Region r(rank, s.worker);
        if (rank.rank() == 0) {
          rdmx_request_t req;
          rdmx_status_t st{};
          get_with_a_bad_key(rank, s, r);
          std::memset(r.bytes.data(), 0xa7, 4096);
          RDMX_CHECK_OK(rank, post_rma(rank, s, false, r.bytes.data(), 4096, r.mr->lkey,
                                       r.peer.addr, r.peer.rkey, &req));
          RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, &st, "put after the failure"));
          RDMX_CHECK_OK(rank,
                        rdmx_tag_send(s.eps[1], r.bytes.data(), 0, 77, 0, &req, nullptr, nullptr));
          RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, &st, "done message"));
        } else {
          // Progress until rank 0 is done: its write QPs are made through this worker.
          rdmx_request_t req;
          rdmx_status_t st{};
          RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, r.bytes.data(), 0, RDMX_ANY_SOURCE, 77, ~0ull,
                                            &req, nullptr, nullptr));
          RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, &st, "done message"));
        }
        rank.barrier();
        if (rank.rank() == 1) {
          RDMX_CHECK(rank, r.bytes[0] == 0xa7 && r.bytes[4095] == 0xa7);
          RDMX_CHECK(rank, r.bytes[4096] == pattern(1, 4096));
        }
        rank.barrier();
      },
      RDMX_TRANSPORT_UD);
}

// Destroying the worker with puts in flight: each request's callback runs exactly once (done
// or cancelled), and a cancelled put's flushed completion touches nothing (close_session checks
// that every wr_id was accounted for). Zero-length puts need no local memory, which must not
// stay registered in the worker's PD when the worker goes.
TEST_F(Rma, DestroyWithPutsInFlightCompletesEachOnce) {
  EXPECT_TRUE(run_ranks(2, [&](Rank& rank) {
    Session s = open_session(rank, device_for(rank.rank(), false), RDMX_TRANSPORT_RC);
    std::vector<std::uint8_t> target(4096);
    ibv_mr* mr = ibv_reg_mr(rdmx_worker_pd(s.worker), target.data(), target.size(), kAccess);
    RDMX_CHECK(rank, mr != nullptr);
    const RemoteRegion mine{reinterpret_cast<std::uintptr_t>(target.data()), mr->rkey};
    const std::vector<Blob> all = rank.allgather(&mine, sizeof(mine));
    RemoteRegion peer{};
    std::memcpy(&peer, all[static_cast<std::size_t>(1 - rank.rank())].data(), sizeof(peer));
    constexpr int kPuts = 64;
    std::vector<rdmx_request_t> reqs(kPuts);
    std::vector<int> counts(3);
    if (rank.rank() == 0) {
      for (int i = 0; i < kPuts; ++i) {
        RDMX_CHECK_OK(rank, post_rma(rank, s, false, nullptr, 0, 0, peer.addr, peer.rkey,
                                     &reqs[static_cast<std::size_t>(i)], count_callback, &counts));
      }
    } else {
      rank.barrier();  // rank 0 destroyed its worker
    }
    (void)ibv_dereg_mr(mr);
    close_session(rank, s);
    if (rank.rank() == 0) {
      rank.barrier();
      RDMX_CHECK_EQ(rank, counts[0] + counts[1], kPuts);
      RDMX_CHECK_EQ(rank, counts[2], 0);
      std::fprintf(stderr, "rank 0: %d puts done, %d cancelled at destroy\n", counts[0], counts[1]);
    }
  }));
}

}  // namespace
}  // namespace rdmx::test
