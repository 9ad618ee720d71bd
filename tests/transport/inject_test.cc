// rdmx_tag_inject, two ranks on one device, over RC and UD: a send leaves at once with no
// request, or is refused with RDMX_ERR_NO_RESOURCE and nothing done, and then goes by
// rdmx_tag_send. Rank 0 sends, rank 1 receives every message with a receive for its tag (its
// index) and checks its length and bytes, so a message injected twice, lost or out of order
// fails the test:
// - refused while the connection is being made, and behind a send that waits for it;
// - a ping-pong: injected (nearly) every time, also by the replying rank; every other ping with
//   its first 8 bytes as a separate header (rdmx_tag_inject_header), which must arrive as one
//   message, header first;
// - a burst: the second send before a progress call is refused (it belongs in a batch) unless
//   RDMX_SEND_FLUSH; behind a packed send even RDMX_SEND_FLUSH is refused;
// - a rendezvous size is refused however often it is tried;
// - bad arguments, and a peer whose worker is gone (RDMX_ERR_UNREACHABLE).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "rdmx/rdmx.h"
#include "tests/guest/support/guest_env.h"
#include "tests/transport/support/procs.h"

namespace rdmx::test {
namespace {

constexpr std::size_t kPings = 200;
constexpr std::size_t kBig = 100000;            // rendezvous on every transport
constexpr std::uint64_t kPongTag = 1ull << 40;  // rank 1 to rank 0, | the ping's index
constexpr std::uint32_t kPeerTimeoutMs = 5000;

// Index of every phase's first message.
constexpr std::size_t kEarly = 0;               // 0, 1: before the connection is up
constexpr std::size_t kPing = 2;                // kPing .. kPing + kPings - 1
constexpr std::size_t kBurst = kPing + kPings;  // 4 sends, no progress in between
constexpr std::size_t kBigIndex = kBurst + 4;   // of rendezvous size
constexpr std::size_t kTotal = kBigIndex + 1;

// Message i: its index fixes its length (8..1000 bytes; 16 in the burst, which every transport
// packs; kBig) and its bytes.
std::size_t size_of(std::size_t i) {
  if (i == kBigIndex) {
    return kBig;
  }
  return i >= kBurst && i < kBigIndex ? 16 : 8 + (i * 37) % 993;
}
std::vector<std::uint8_t> message(std::size_t i) {
  std::vector<std::uint8_t> bytes(size_of(i));
  for (std::size_t k = 0; k < bytes.size(); ++k) {
    bytes[k] = static_cast<std::uint8_t>(i * 13 + k * 5 + 3);
  }
  return bytes;
}

// Sends message i: injected when rdmx takes it now (with `header`, its first 8 bytes as a header
// of their own), else by a request (kept alive in `later` until waited for). Returns the
// inject's result.
int send(Rank& rank, rdmx_ep_t* ep, const std::vector<std::uint8_t>& bytes, std::uint64_t tag,
         unsigned flags, std::vector<rdmx_request_t>* later, bool header = false) {
  std::uint64_t word = 0;
  header = header && bytes.size() >= sizeof(word);
  if (header) {
    std::memcpy(&word, bytes.data(), sizeof(word));
  }
  const std::size_t rest = bytes.size() - (header ? sizeof(word) : 0);
  const int rc =
      !header ? rdmx_tag_inject(ep, bytes.data(), bytes.size(), tag, flags)
              : rdmx_tag_inject_header(ep, word, rest != 0 ? bytes.data() + sizeof(word) : nullptr,
                                       rest, tag, flags);
  if (rc == RDMX_ERR_NO_RESOURCE) {
    later->emplace_back();
    RDMX_CHECK_OK(rank, rdmx_tag_send(ep, bytes.data(), bytes.size(), tag, flags, &later->back(),
                                      nullptr, nullptr));
  } else {
    RDMX_CHECK_OK(rank, rc);
  }
  return rc;
}

void wait_all(Rank& rank, rdmx_worker_t* w, std::vector<rdmx_request_t>* reqs) {
  for (auto& r : *reqs) {
    RDMX_CHECK_OK(rank, wait_request(rank, w, &r, nullptr, "send"));
  }
  reqs->clear();
}

void progress_for(rdmx_worker_t* w, double seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  while (seconds_since(t0) < seconds) {
    (void)rdmx_worker_progress(w);
  }
}

// Messages kEarly and kEarly + 1 on a pair of workers of their own, whose endpoints have not
// progressed yet: the connection cannot be up, and the second send waits behind the first.
void early(Rank& rank, rdmx_transport_t transport) {
  rdmx_config_t cfg = test_config(device_for(rank.rank(), false), transport);
  Pair p = open_pair(rank, cfg);
  if (rank.rank() == 0) {
    std::vector<rdmx_request_t> later;
    later.reserve(2);
    const std::vector<std::uint8_t> m0 = message(kEarly);
    const std::vector<std::uint8_t> m1 = message(kEarly + 1);
    RDMX_CHECK_EQ(rank, send(rank, p.ep, m0, kEarly, 0, &later), RDMX_ERR_NO_RESOURCE);
    RDMX_CHECK_EQ(rank, send(rank, p.ep, m1, kEarly + 1, RDMX_SEND_FLUSH, &later),
                  RDMX_ERR_NO_RESOURCE);
    wait_all(rank, p.worker, &later);
  } else {
    std::vector<std::uint8_t> buf(kBig);
    for (std::size_t i = kEarly; i < kPing; ++i) {
      rdmx_request_t r;
      rdmx_status_t st{};
      RDMX_CHECK_OK(rank, rdmx_tag_recv(p.worker, buf.data(), buf.size(), RDMX_ANY_SOURCE, i, ~0ull,
                                        &r, nullptr, nullptr));
      RDMX_CHECK_OK(rank, wait_request(rank, p.worker, &r, &st, "early message"));
      const std::vector<std::uint8_t> want = message(i);
      RDMX_CHECK_EQ(rank, st.length, want.size());
      RDMX_CHECK(rank, std::memcmp(buf.data(), want.data(), want.size()) == 0);
    }
  }
  rank.barrier();  // rank 1 has both: nothing is left to resend
  rdmx_ep_destroy(p.ep);
  rdmx_worker_destroy(p.worker);
  rank.barrier();
}

void sender(Rank& rank, Session& s) {
  rdmx_ep_t* ep = s.eps[1];
  std::vector<std::vector<std::uint8_t>> msgs;
  for (std::size_t i = 0; i < kTotal; ++i) {
    msgs.push_back(message(i));
  }
  std::vector<rdmx_request_t> later;
  later.reserve(kTotal);
  std::size_t injected = 0;
  std::uint64_t pong = 0;
  for (std::size_t i = kPing; i < kPing + kPings; ++i) {
    rdmx_request_t r;
    RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, &pong, sizeof(pong), s.uids[1], kPongTag | i, ~0ull,
                                      &r, nullptr, nullptr));
    injected += send(rank, ep, msgs[i], i, 0, &later, i % 2 == 0) == RDMX_OK ? 1 : 0;
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &r, nullptr, "pong"));
    RDMX_CHECK_EQ(rank, pong, i);
    wait_all(rank, s.worker, &later);
  }
  std::printf("ping-pong: %zu of %zu pings injected\n", injected, kPings);
  // A credit or queue may run short now and then; a ping-pong must not need requests.
  RDMX_CHECK(rank, injected >= kPings - kPings / 20);

  // A burst: the first send after a progress call leaves, the next one belongs in a batch.
  (void)rdmx_worker_progress(s.worker);
  RDMX_CHECK_OK(rank, rdmx_tag_inject(ep, msgs[kBurst].data(), msgs[kBurst].size(), kBurst, 0));
  RDMX_CHECK_EQ(
      rank, rdmx_tag_inject(ep, msgs[kBurst + 1].data(), msgs[kBurst + 1].size(), kBurst + 1, 0),
      RDMX_ERR_NO_RESOURCE);
  RDMX_CHECK_OK(rank, rdmx_tag_inject(ep, msgs[kBurst + 1].data(), msgs[kBurst + 1].size(),
                                      kBurst + 1, RDMX_SEND_FLUSH));
  later.emplace_back();  // packed into the peer's batch ...
  RDMX_CHECK_OK(rank, rdmx_tag_send(ep, msgs[kBurst + 2].data(), msgs[kBurst + 2].size(),
                                    kBurst + 2, 0, &later.back(), nullptr, nullptr));
  // ... so nothing may overtake it, not even a flushing send.
  RDMX_CHECK_EQ(rank, send(rank, ep, msgs[kBurst + 3], kBurst + 3, RDMX_SEND_FLUSH, &later),
                RDMX_ERR_NO_RESOURCE);
  wait_all(rank, s.worker, &later);

  // Never injected, however often it is tried.
  for (int k = 0; k < 3; ++k) {
    progress_for(s.worker, 0.01);
    RDMX_CHECK_EQ(rank, rdmx_tag_inject(ep, msgs[kBigIndex].data(), kBig, kBigIndex, 0),
                  RDMX_ERR_NO_RESOURCE);
    RDMX_CHECK_EQ(rank,
                  rdmx_tag_inject_header(ep, 0, msgs[kBigIndex].data() + 8, kBig - 8, kBigIndex, 0),
                  RDMX_ERR_NO_RESOURCE);
  }
  RDMX_CHECK_EQ(rank, send(rank, ep, msgs[kBigIndex], kBigIndex, 0, &later), RDMX_ERR_NO_RESOURCE);
  wait_all(rank, s.worker, &later);

  std::uint8_t x = 0;
  RDMX_CHECK_EQ(rank, rdmx_tag_inject(nullptr, &x, 1, 1, 0), RDMX_ERR_INVALID_PARAM);
  RDMX_CHECK_EQ(rank, rdmx_tag_inject(ep, nullptr, 1, 1, 0), RDMX_ERR_INVALID_PARAM);
  RDMX_CHECK_EQ(rank, rdmx_tag_inject(ep, &x, 1, 1, RDMX_SEND_SYNC), RDMX_ERR_INVALID_PARAM);
  RDMX_CHECK_EQ(rank, rdmx_tag_inject_header(nullptr, 1, &x, 1, 1, 0), RDMX_ERR_INVALID_PARAM);
  RDMX_CHECK_EQ(rank, rdmx_tag_inject_header(ep, 1, nullptr, 1, 1, 0), RDMX_ERR_INVALID_PARAM);
  RDMX_CHECK_EQ(rank, rdmx_tag_inject_header(ep, 1, &x, 1, 1, RDMX_SEND_SYNC),
                RDMX_ERR_INVALID_PARAM);

  quiesce(rank, s);  // rank 1 checked every message
  rank.barrier();
  rank.barrier();  // rank 1's worker is gone
  // Its goodbye (or, lost, the timeout) fails the peer: injects are refused from then on.
  const auto t0 = std::chrono::steady_clock::now();
  int rc = RDMX_OK;
  while ((rc == RDMX_OK || rc == RDMX_ERR_NO_RESOURCE) &&
         seconds_since(t0) < 3 * kPeerTimeoutMs / 1000.0) {
    (void)rdmx_worker_progress(s.worker);
    rc = rdmx_tag_inject(ep, &x, 1, 1, 0);
  }
  RDMX_CHECK_EQ(rank, rc, RDMX_ERR_UNREACHABLE);
  close_session(rank, s);
}

void receiver(Rank& rank, Session& s) {
  std::vector<std::uint8_t> buf(kBig);
  std::vector<rdmx_request_t> later;
  later.reserve(kTotal);
  std::size_t injected = 0;
  for (std::size_t i = kPing; i < kTotal; ++i) {
    rdmx_request_t r;
    rdmx_status_t st{};
    RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, buf.data(), buf.size(), s.uids[0], i, ~0ull, &r,
                                      nullptr, nullptr));
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &r, &st, "message"));
    const std::vector<std::uint8_t> want = message(i);
    RDMX_CHECK_EQ(rank, st.length, want.size());
    RDMX_CHECK(rank, std::memcmp(buf.data(), want.data(), want.size()) == 0);
    if (i >= kPing && i < kPing + kPings) {
      const std::uint64_t pong = i;
      const std::vector<std::uint8_t> reply(reinterpret_cast<const std::uint8_t*>(&pong),
                                            reinterpret_cast<const std::uint8_t*>(&pong + 1));
      injected += send(rank, s.eps[0], reply, kPongTag | i, 0, &later) == RDMX_OK ? 1 : 0;
      wait_all(rank, s.worker, &later);
    }
  }
  std::printf("ping-pong: %zu of %zu pongs injected\n", injected, kPings);
  RDMX_CHECK(rank, injected >= kPings - kPings / 20);
  quiesce(rank, s);
  rank.barrier();
  close_session(rank, s);
  rank.barrier();
}

class Inject : public ::testing::TestWithParam<rdmx_transport_t> {
 protected:
  void SetUp() override { RDMX_REQUIRE_DEVICE(); }
};

TEST_P(Inject, LeavesAtOnceOrIsRefusedWithNothingDone) {
  EXPECT_TRUE(run_ranks(2, [&](Rank& rank) {
    early(rank, GetParam());
    Session s =
        open_session(rank, device_for(rank.rank(), false), GetParam(), [](rdmx_config_t& c) {
          c.peer_timeout_ms = kPeerTimeoutMs;
          c.coalesce = 1;  // the burst case
        });
    if (rank.rank() == 0) {
      sender(rank, s);
    } else {
      receiver(rank, s);
    }
  }));
}

std::string transport_name(const ::testing::TestParamInfo<rdmx_transport_t>& p) {
  return p.param == RDMX_TRANSPORT_RC ? "Rc" : "Ud";
}

INSTANTIATE_TEST_SUITE_P(Transports, Inject,
                         ::testing::Values(RDMX_TRANSPORT_RC, RDMX_TRANSPORT_UD), transport_name);

}  // namespace
}  // namespace rdmx::test
