// rdmx_tag_send_zcopy, two ranks on one device: a head copied by rdmx and a payload the adapter
// reads from the caller's registration arrive as one message, in order with the sends around
// them, and the request completes once the send's completion has come back.
// - Rank 0 sends kMessages messages, every other one zero-copy (heads of 0, 8 and 64 bytes,
//   payloads from 0 bytes to the largest eager message) and the rest by rdmx_tag_send; rank 1
//   receives each with a receive for any tag and checks its tag (the order), length and bytes.
// - A payload lkey that is not a registration fails the request with RDMX_ERR_IO (the adapter
//   read the caller's memory: a copy would have carried it), and the connection with it.
// - What is refused: bad arguments, a message above the eager size (RDMX_ERR_NO_RESOURCE, once
//   one of exactly the eager size has left on the same connection), and any over UD
//   (RDMX_ERR_UNSUPPORTED).
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "rdmx/rdmx.h"
#include "tests/guest/support/guest_env.h"
#include "tests/transport/support/procs.h"

namespace rdmx::test {
namespace {

constexpr std::size_t kMessages = 240;
constexpr std::size_t kHeads[] = {0, 8, RDMX_ZCOPY_MAX_HEAD};

std::uint8_t pattern(std::size_t message, std::size_t i) {
  return static_cast<std::uint8_t>(message * 29 + i * 7 + 5);
}

// Message m's length: the zero-copy ones (even m) cycle through the sizes up to the largest
// eager message `eager` (head included); the others are 8 to 1000 bytes.
std::size_t head_of(std::size_t m) {
  return m % 2 == 0 ? kHeads[(m / 2) % 3] : 0;
}
std::size_t size_of(std::size_t m, std::size_t eager) {
  if (m % 2 != 0) {
    return 8 + (m * 37) % 993;
  }
  const std::size_t sizes[] = {0, 1, 7, 100, 1000, 4000, eager - head_of(m)};
  return head_of(m) + sizes[(m / 2) % 7];
}

class ZcopySend : public ::testing::Test {
 protected:
  void SetUp() override { RDMX_REQUIRE_DEVICE(); }
};

void count_callback(rdmx_request_t*, const rdmx_status_t* status, void* arg) {
  auto* counts = static_cast<std::vector<int>*>(arg);
  ++(*counts)[status->error == RDMX_OK ? 0 : 1];
}

// Sends message m, `n` bytes of `bytes` (its head from the front, its payload, registered, after
// it), to rank 1, retrying while rdmx refuses it for now.
int send_zcopy(Session& s, const std::vector<std::uint8_t>& bytes, std::size_t n, std::size_t head,
               std::uint32_t lkey, std::size_t m, rdmx_request_t* req, std::vector<int>* counts) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const int rc = rdmx_tag_send_zcopy(s.eps[1], bytes.data(), head, bytes.data() + head, n - head,
                                       lkey, m, req, count_callback, counts);
    if (rc != RDMX_ERR_NO_RESOURCE || seconds_since(t0) > 30) {
      return rc;
    }
    (void)rdmx_worker_progress(s.worker);
  }
}

TEST_F(ZcopySend, HeadAndPayloadArriveAsOneMessageInOrder) {
  EXPECT_TRUE(run_ranks(2, [&](Rank& rank) {
    Session s = open_session(rank, device_for(rank.rank(), false), RDMX_TRANSPORT_RC);
    const std::size_t eager = test_config("", RDMX_TRANSPORT_RC).large_buf_size;
    if (rank.rank() == 0) {
      // One registered buffer per zero-copy message: each stays untouched until its request
      // completes.
      std::vector<std::vector<std::uint8_t>> bufs(kMessages);
      std::vector<ibv_mr*> mrs(kMessages, nullptr);
      std::vector<rdmx_request_t> reqs(kMessages);
      std::vector<int> counts(2);
      std::size_t zcopies = 0;
      rdmx_stats_t before{};
      RDMX_CHECK_OK(rank, rdmx_worker_stats(s.worker, &before));
      for (std::size_t m = 0; m < kMessages; ++m) {
        const std::size_t n = size_of(m, eager);
        std::vector<std::uint8_t>& b = bufs[m];
        b.resize(n + 1);  // never empty: registered
        for (std::size_t i = 0; i < b.size(); ++i) {
          b[i] = pattern(m, i);
        }
        if (m % 2 != 0) {
          rdmx_request_t req;
          RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[1], b.data(), n, m, 0, &req, nullptr, nullptr));
          RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, nullptr, "standard send"));
          continue;
        }
        mrs[m] = ibv_reg_mr(rdmx_worker_pd(s.worker), b.data(), b.size(), IBV_ACCESS_LOCAL_WRITE);
        RDMX_CHECK(rank, mrs[m] != nullptr);
        RDMX_CHECK_OK(rank, send_zcopy(s, b, n, head_of(m), mrs[m]->lkey, m, &reqs[m], &counts));
        ++zcopies;
      }
      for (std::size_t m = 0; m < kMessages; m += 2) {
        rdmx_status_t st{};
        RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &reqs[m], &st, "zero-copy send"));
        RDMX_CHECK_EQ(rank, st.length, size_of(m, eager));
        RDMX_CHECK_EQ(rank, st.tag, std::uint64_t{m});
        RDMX_CHECK_EQ(rank, st.source, s.uids[1]);
        (void)ibv_dereg_mr(mrs[m]);
      }
      RDMX_CHECK_EQ(rank, counts[0], static_cast<int>(zcopies));  // each called back once
      RDMX_CHECK_EQ(rank, counts[1], 0);
      rdmx_stats_t after{};
      RDMX_CHECK_OK(rank, rdmx_worker_stats(s.worker, &after));
      RDMX_CHECK_EQ(rank, after.zcopy_sends - before.zcopy_sends, std::uint64_t{zcopies});
    } else {
      std::vector<std::uint8_t> got(eager + 1);
      for (std::size_t m = 0; m < kMessages; ++m) {
        rdmx_request_t req;
        rdmx_status_t st{};
        RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, got.data(), got.size(), RDMX_ANY_SOURCE, 0, 0,
                                          &req, nullptr, nullptr));
        RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, &st, "receive"));
        RDMX_CHECK_EQ(rank, st.tag, std::uint64_t{m});  // in order
        RDMX_CHECK_EQ(rank, st.length, size_of(m, eager));
        for (std::size_t i = 0; i < st.length; ++i) {
          if (got[i] != pattern(m, i)) {
            RDMX_CHECK_EQ(rank, static_cast<int>(got[i]), static_cast<int>(pattern(m, i)));
          }
        }
      }
    }
    quiesce(rank, s);
    close_session(rank, s);
  }));
}

TEST_F(ZcopySend, APayloadOutsideARegistrationFailsTheRequest) {
  EXPECT_TRUE(run_ranks(2, [&](Rank& rank) {
    Session s = open_session(rank, device_for(rank.rank(), false), RDMX_TRANSPORT_RC);
    if (rank.rank() == 0) {
      std::vector<std::uint8_t> b(256, 7);
      ibv_mr* mr = ibv_reg_mr(rdmx_worker_pd(s.worker), b.data(), b.size(), IBV_ACCESS_LOCAL_WRITE);
      RDMX_CHECK(rank, mr != nullptr);
      rdmx_request_t req;
      rdmx_status_t st{};
      std::vector<int> counts(2);
      RDMX_CHECK_OK(rank, send_zcopy(s, b, b.size(), 8, mr->lkey ^ 0x5a5a00u, 1, &req, &counts));
      RDMX_CHECK_EQ(rank, wait_request(rank, s.worker, &req, &st, "bad-lkey send"), RDMX_ERR_IO);
      RDMX_CHECK_EQ(rank, counts[1], 1);
      (void)ibv_dereg_mr(mr);
    }
    rank.barrier();
    close_session(rank, s);
  }));
}

TEST_F(ZcopySend, RefusesWhatItCannotDo) {
  EXPECT_TRUE(run_ranks(2, [&](Rank& rank) {
    for (rdmx_transport_t t : {RDMX_TRANSPORT_RC, RDMX_TRANSPORT_UD}) {
      Session s = open_session(rank, device_for(rank.rank(), false), t);
      rdmx_ep_t* ep = s.eps[static_cast<std::size_t>(1 - rank.rank())];
      const std::size_t eager = test_config("", t).large_buf_size;
      std::vector<std::uint8_t> b(eager + 1, 3);
      ibv_mr* mr = ibv_reg_mr(rdmx_worker_pd(s.worker), b.data(), b.size(), IBV_ACCESS_LOCAL_WRITE);
      RDMX_CHECK(rank, mr != nullptr);
      rdmx_request_t req;
      const std::uint8_t* p = b.data();
      const std::uint32_t k = mr->lkey;
      RDMX_CHECK_EQ(rank, rdmx_tag_send_zcopy(nullptr, p, 8, p, 8, k, 0, &req, nullptr, nullptr),
                    RDMX_ERR_INVALID_PARAM);
      RDMX_CHECK_EQ(rank, rdmx_tag_send_zcopy(ep, p, 8, p, 8, k, 0, nullptr, nullptr, nullptr),
                    RDMX_ERR_INVALID_PARAM);
      RDMX_CHECK_EQ(
          rank,
          rdmx_tag_send_zcopy(ep, p, RDMX_ZCOPY_MAX_HEAD + 1, p, 8, k, 0, &req, nullptr, nullptr),
          RDMX_ERR_INVALID_PARAM);
      RDMX_CHECK_EQ(rank, rdmx_tag_send_zcopy(ep, nullptr, 8, p, 8, k, 0, &req, nullptr, nullptr),
                    RDMX_ERR_INVALID_PARAM);
      RDMX_CHECK_EQ(rank, rdmx_tag_send_zcopy(ep, p, 8, nullptr, 8, k, 0, &req, nullptr, nullptr),
                    RDMX_ERR_INVALID_PARAM);
      if (t == RDMX_TRANSPORT_UD) {
        RDMX_CHECK_EQ(rank, rdmx_tag_send_zcopy(ep, p, 8, p, 8, k, 0, &req, nullptr, nullptr),
                      RDMX_ERR_UNSUPPORTED);
      } else {
        // Exactly the eager size leaves (retried while the connection is set up) ...
        if (rank.rank() == 0) {
          const auto t0 = std::chrono::steady_clock::now();
          int rc = RDMX_ERR_NO_RESOURCE;
          while (rc == RDMX_ERR_NO_RESOURCE && seconds_since(t0) < 30) {
            rc = rdmx_tag_send_zcopy(ep, p, 8, p + 8, eager - 8, k, 1, &req, nullptr, nullptr);
            (void)rdmx_worker_progress(s.worker);
          }
          RDMX_CHECK_OK(rank, rc);
          RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, nullptr, "eager-size send"));
        } else {
          std::vector<std::uint8_t> got(eager);
          rdmx_status_t st{};
          RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, got.data(), got.size(), RDMX_ANY_SOURCE, 1,
                                            ~std::uint64_t{0}, &req, nullptr, nullptr));
          RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, &st, "eager-size receive"));
          RDMX_CHECK_EQ(rank, st.length, eager);
        }
        rank.barrier();
        // ... one byte more is refused however often it is tried (the caller sends it with
        // rdmx_tag_send, by rendezvous).
        for (int i = 0; i < 50; ++i) {
          RDMX_CHECK_EQ(
              rank, rdmx_tag_send_zcopy(ep, p, 8, p + 8, eager - 7, k, 0, &req, nullptr, nullptr),
              RDMX_ERR_NO_RESOURCE);
          (void)rdmx_worker_progress(s.worker);
        }
      }
      (void)ibv_dereg_mr(mr);
      rank.barrier();
      close_session(rank, s);
    }
  }));
}

}  // namespace
}  // namespace rdmx::test
