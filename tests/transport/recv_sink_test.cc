// The receive sink of the C API (rdmx_worker_set_recv_sink), two ranks on one device, over RC and
// UD. Rank 0 sends, rank 1 takes every message into a ring of eight buffers given out by its
// sink, as the UCX transport does, and checks each message's tag (its index), length and bytes:
// - eager and rendezvous sizes mixed, synchronous sends among them (their match-acks come from
//   the sink's receives), and a burst of small sends that leave coalesced (kBatch records);
// - a receive posted for one tag still takes that message, not the sink;
// - with the ring full the sink refuses: the next messages wait unexpected (a probe sees them);
//   two that come once the ring has room again (a rendezvous one first) still wait behind them;
//   wildcard receives posted for them as buffers come back take them in order, and then the
//   sink the next ones;
// - a message longer than the sink's buffer ends truncated, as in a posted receive.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <vector>

#include "rdmx/rdmx.h"
#include "tests/guest/support/guest_env.h"
#include "tests/transport/support/procs.h"

namespace rdmx::test {
namespace {

constexpr std::size_t kSlots = 8;
constexpr std::size_t kSlotBytes = 320000;
constexpr std::uint64_t kPostedTag = std::uint64_t{1} << 40;  // the message a posted receive takes
constexpr std::uint64_t kDoneTag = std::uint64_t{1} << 41;    // rank 1 to rank 0: all checked
// Sizes cycled through: eager ones and rendezvous ones (64 KiB and up on every transport); a
// rendezvous one at index 2, so that message kSlots + 2 is one.
constexpr std::array<std::size_t, 8> kSizes = {0, 1, 65536, 64, 1000, 4000, 9000, 300000};
constexpr std::size_t kMessages = 120;      // one by one (every 7th synchronous)
constexpr std::size_t kBurst = 40;          // then posted back to back, 8 bytes each
constexpr std::size_t kTruncated = 400000;  // the last message, beyond a slot
constexpr std::size_t kPostedAt = 50;       // the kPostedTag message goes after message 50

std::size_t size_of(std::size_t i) {
  return i < kMessages ? kSizes[i % kSizes.size()] : i < kMessages + kBurst ? 8 : kTruncated;
}
std::uint8_t byte_of(std::size_t i, std::size_t k) {
  return static_cast<std::uint8_t>(i * 31 + k * 7 + 1);
}
// The bytes of message i.
std::vector<std::uint8_t> message(std::size_t i) {
  std::vector<std::uint8_t> bytes(size_of(i));
  for (std::size_t k = 0; k < bytes.size(); ++k) {
    bytes[k] = byte_of(i, k);
  }
  return bytes;
}

// The receiver's ring, given out by the sink in order, handed back in order.
struct Ring {
  std::vector<std::vector<std::uint8_t>> bufs;
  std::array<rdmx_request_t, kSlots> reqs{};
  std::size_t head = 0;  // oldest not yet checked
  std::size_t used = 0;
  int refused = 0;  // the sink had no buffer
  Ring() : bufs(kSlots, std::vector<std::uint8_t>(kSlotBytes)) {}
  std::size_t take() {
    const std::size_t i = (head + used) % kSlots;
    ++used;
    return i;
  }
};

rdmx_request_t* sink(void* arg, void** buffer, std::size_t* capacity) {
  auto* ring = static_cast<Ring*>(arg);
  if (ring->used == kSlots) {
    ++ring->refused;
    return nullptr;
  }
  const std::size_t i = ring->take();
  *buffer = ring->bufs[i].data();
  *capacity = kSlotBytes;
  return &ring->reqs[i];
}

void send_all(Rank& rank, Session& s) {
  rdmx_ep_t* ep = s.eps[1];
  rank.barrier();  // the receiver's sink is in place
  // Message kSlots + 2 waits while later ones are sent: its bytes (sent zero-copy) stay apart.
  const std::vector<std::uint8_t> held_bytes = message(kSlots + 2);
  rdmx_request_t held;
  for (std::size_t i = 0; i < kMessages; ++i) {
    const std::vector<std::uint8_t> bytes = message(i);
    rdmx_request_t req;
    // Message kSlots + 1 must leave before the barrier (not wait coalesced for a progress call).
    unsigned flags = 0;
    if (i % 7 == 3) {
      flags = RDMX_SEND_SYNC;
    } else if (i == kSlots + 1) {
      flags = RDMX_SEND_FLUSH;
    }
    if (i == kSlots + 2) {
      // A rendezvous send, and an eager one behind it, both waiting unexpected at once.
      RDMX_CHECK_OK(rank, rdmx_tag_send(ep, held_bytes.data(), size_of(i), i, flags, &held, nullptr,
                                        nullptr));
      continue;
    }
    RDMX_CHECK_OK(rank,
                  rdmx_tag_send(ep, bytes.data(), size_of(i), i, flags, &req, nullptr, nullptr));
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, nullptr, "send"));
    if (i == kSlots + 3) {
      RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &held, nullptr, "rendezvous send"));
    }
    if (i == kSlots + 1) {
      rank.barrier();  // the receiver emptied its ring while kSlots and kSlots + 1 wait
    }
    if (i == kPostedAt) {
      const std::uint64_t v = 0x5151;
      RDMX_CHECK_OK(rank, rdmx_tag_send(ep, &v, sizeof(v), kPostedTag, 0, &req, nullptr, nullptr));
      RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, nullptr, "send to the posted"));
    }
  }
  std::vector<std::vector<std::uint8_t>> small(kBurst);
  std::vector<rdmx_request_t> reqs(kBurst + 1);
  for (std::size_t j = 0; j < kBurst; ++j) {
    small[j] = message(kMessages + j);
    RDMX_CHECK_OK(
        rank, rdmx_tag_send(ep, small[j].data(), 8, kMessages + j, 0, &reqs[j], nullptr, nullptr));
  }
  const std::vector<std::uint8_t> big = message(kMessages + kBurst);
  RDMX_CHECK_OK(rank, rdmx_tag_send(ep, big.data(), kTruncated, kMessages + kBurst, 0,
                                    &reqs[kBurst], nullptr, nullptr));
  for (auto& r : reqs) {
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &r, nullptr, "burst send"));
  }
  rdmx_request_t done;
  RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, nullptr, 0, s.uids[1], kDoneTag, ~0ull, &done,
                                    nullptr, nullptr));
  RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &done, nullptr, "done message"));
}

void receive_all(Rank& rank, Session& s) {
  Ring ring;
  std::uint64_t posted_value = 0;
  rdmx_request_t posted;
  RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, &posted_value, sizeof(posted_value), s.uids[0],
                                    kPostedTag, ~0ull, &posted, nullptr, nullptr));
  RDMX_CHECK_OK(rank, rdmx_worker_set_recv_sink(s.worker, sink, &ring));
  rank.barrier();
  const std::size_t total = kMessages + kBurst + 1;
  std::size_t next = 0;  // the index the next message must have
  // The ring full, then messages kSlots and kSlots + 1 waiting unexpected.
  rdmx_status_t seen{};
  const auto t0 = std::chrono::steady_clock::now();
  while (rdmx_tag_probe(s.worker, RDMX_ANY_SOURCE, kSlots + 1, ~0ull, &seen, nullptr) != 1 &&
         seconds_since(t0) < 60) {
    (void)rdmx_worker_progress(s.worker);
  }
  RDMX_CHECK_EQ(rank, ring.used, kSlots);
  RDMX_CHECK(rank, ring.refused > 0);
  RDMX_CHECK_EQ(rank, rdmx_tag_probe(s.worker, RDMX_ANY_SOURCE, 0, 0, &seen, nullptr), 1);
  RDMX_CHECK_EQ(rank, seen.tag, kSlots);
  // Check and free the whole ring, then let messages kSlots + 2 (rendezvous) and kSlots + 3 come:
  // the sink has room, but they must wait behind the two.
  auto check_ring = [&] {
    while (ring.used > 0) {
      rdmx_status_t st{};
      const int rc = rdmx_request_test(&ring.reqs[ring.head], &st);
      if (rc == RDMX_INPROGRESS) {
        break;
      }
      const std::uint8_t* got = ring.bufs[ring.head].data();
      RDMX_CHECK_EQ(rank, st.tag, next);
      RDMX_CHECK_EQ(rank, st.length, size_of(next));
      RDMX_CHECK_EQ(rank, st.source, s.uids[0]);
      RDMX_CHECK_EQ(rank, rc, size_of(next) > kSlotBytes ? RDMX_ERR_TRUNCATED : RDMX_OK);
      for (std::size_t k = 0; k < std::min(size_of(next), kSlotBytes); ++k) {
        if (got[k] != byte_of(next, k)) {
          RDMX_CHECK_EQ(rank, static_cast<int>(got[k]), static_cast<int>(byte_of(next, k)));
        }
      }
      ring.head = (ring.head + 1) % kSlots;
      --ring.used;
      ++next;
    }
  };
  check_ring();
  RDMX_CHECK_EQ(rank, next, kSlots);
  rank.barrier();
  while (ring.used == 0 &&
         rdmx_tag_probe(s.worker, RDMX_ANY_SOURCE, kSlots + 3, ~0ull, &seen, nullptr) != 1 &&
         seconds_since(t0) < 60) {
    (void)rdmx_worker_progress(s.worker);
  }
  RDMX_CHECK_EQ(rank, ring.used, std::size_t{0});  // not the sink's: it would overtake
  while (next < total && seconds_since(t0) < 120) {
    (void)rdmx_worker_progress(s.worker);
    // After a refusal, free buffers go to the waiting messages as wildcard receives posted
    // for them (each matches the oldest at once), until none waits (as the UCX transport does).
    while (ring.refused != 0 && ring.used < kSlots) {
      rdmx_status_t st{};
      if (rdmx_tag_probe(s.worker, RDMX_ANY_SOURCE, 0, 0, &st, nullptr) != 1) {
        ring.refused = 0;
        break;
      }
      const std::size_t i = ring.take();
      RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, ring.bufs[i].data(), kSlotBytes, RDMX_ANY_SOURCE,
                                        0, 0, &ring.reqs[i], nullptr, nullptr));
    }
    check_ring();
  }
  RDMX_CHECK_EQ(rank, next, total);
  rdmx_status_t st{};
  RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &posted, &st, "the posted receive"));
  RDMX_CHECK_EQ(rank, posted_value, std::uint64_t{0x5151});
  RDMX_CHECK_OK(rank, rdmx_worker_set_recv_sink(s.worker, nullptr, nullptr));
  rdmx_request_t done;
  RDMX_CHECK_OK(
      rank, rdmx_tag_send(s.eps[0], nullptr, 0, kDoneTag, RDMX_SEND_SYNC, &done, nullptr, nullptr));
  RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &done, nullptr, "done send"));
}

class RecvSink : public ::testing::TestWithParam<rdmx_transport_t> {
 protected:
  void SetUp() override { RDMX_REQUIRE_DEVICE(); }
};

TEST_P(RecvSink, TakesEveryMessageInOrderWithItsBytes) {
  EXPECT_TRUE(run_ranks(2, [&](Rank& rank) {
    Session s = open_session(rank, device_for(rank.rank(), false), GetParam());
    if (rank.rank() == 0) {
      send_all(rank, s);
    } else {
      receive_all(rank, s);
    }
    close_session(rank, s);
  }));
}

std::string transport_name(const ::testing::TestParamInfo<rdmx_transport_t>& p) {
  return p.param == RDMX_TRANSPORT_RC ? "Rc" : "Ud";
}

INSTANTIATE_TEST_SUITE_P(Transports, RecvSink,
                         ::testing::Values(RDMX_TRANSPORT_RC, RDMX_TRANSPORT_UD), transport_name);

TEST(RecvSinkApi, RefusesANullWorker) {
  EXPECT_EQ(rdmx_worker_set_recv_sink(nullptr, sink, nullptr), RDMX_ERR_INVALID_PARAM);
}

}  // namespace
}  // namespace rdmx::test
