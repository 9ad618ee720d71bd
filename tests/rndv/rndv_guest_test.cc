// RDMA-write rendezvous on real rxe devices, through the public API: sizes around the threshold
// and the device's 8 MiB write limit, up to 64 MiB (1 GiB once), unaligned buffers, receives
// posted before and after the RTS, any-source, probe and mprobe, truncation, several senders at
// once, eager/rendezvous ordering, synchronous sends, read-only send buffers, the zero-copy
// counter, the copy path under a small `ulimit -l`, and (UD) the cap on on-demand RC connections.
// Every case runs over RC and UD, on one device and on two (`ci/softroce/run --devices 2`).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "rdmx/rdmx.h"
#include "tests/guest/support/guest_env.h"
#include "tests/transport/support/procs.h"
#include "transport/debug.h"

namespace rdmx::test {
namespace {

// Bound for probe_until: a large message probed under TCG emulation takes a while to arrive.
constexpr std::chrono::milliseconds kProbeTimeout = std::chrono::seconds(60);

constexpr std::uint64_t kAll = ~std::uint64_t{0};
constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kWriteLimit = 8 * kMiB;  // rxe's max_msg_sz
// UD's eager limit is one packet (992 bytes at MTU 1024): the tests pin the UD threshold below
// it so that "threshold - 1" is still an eager message.
constexpr std::size_t kUdThresh = 900;

struct Mode {
  rdmx_transport_t transport;
  bool two_devices;
};

std::string mode_name(const ::testing::TestParamInfo<Mode>& info) {
  return std::string(info.param.transport == RDMX_TRANSPORT_RC ? "Rc" : "Ud") +
         (info.param.two_devices ? "TwoDevices" : "OneDevice");
}

static_assert(std::endian::native == std::endian::little, "fill() stores words little endian");

// Deterministic bytes: message `seed`, byte i is byte i % 8 (little endian) of word i / 8.
// Filled and checked a word at a time: the 1 GiB case runs on an emulated CPU.
std::uint64_t word_at(std::uint32_t seed, std::size_t w) {
  std::uint64_t x = (std::uint64_t{seed} << 40) ^ w * 0x9e3779b97f4a7c15ull;
  x ^= x >> 29;
  return x;
}

std::uint8_t byte_at(std::uint32_t seed, std::size_t i) {
  return static_cast<std::uint8_t>(word_at(seed, i / 8) >> (8 * (i % 8)));
}

void fill(std::uint8_t* p, std::size_t n, std::uint32_t seed) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const std::uint64_t x = word_at(seed, i / 8);
    std::memcpy(p + i, &x, 8);
  }
  for (; i < n; ++i) {
    p[i] = byte_at(seed, i);
  }
}

// Index of the first wrong byte, or n.
std::size_t first_mismatch(const std::uint8_t* p, std::size_t n, std::uint32_t seed) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const std::uint64_t x = word_at(seed, i / 8);
    if (std::memcmp(p + i, &x, 8) != 0) {
      break;  // the byte loop below finds which
    }
  }
  for (; i < n; ++i) {
    if (p[i] != byte_at(seed, i)) {
      return i;
    }
  }
  return n;
}

#define RDMX_CHECK_CONTENTS(rank, p, n, seed)                                   \
  do {                                                                          \
    const std::size_t _bad = first_mismatch((p), (n), (seed));                  \
    if (_bad != (n)) {                                                          \
      (rank).fail(__FILE__, __LINE__,                                           \
                  "byte " + std::to_string(_bad) + " of " + std::to_string(n) + \
                      " differs (message " + std::to_string(seed) + ")");       \
    }                                                                           \
  } while (0)

rdmx_stats_t stats_of(Rank& rank, Session& s) {
  rdmx_stats_t st{};
  RDMX_CHECK_OK(rank, rdmx_worker_stats(s.worker, &st));
  return st;
}

// A receive buffer with 64 canary bytes on each side, `misalign` bytes past an 8-byte boundary.
class GuardedBuffer {
 public:
  static constexpr std::uint8_t kCanary = 0xc5;
  GuardedBuffer(std::size_t n, std::size_t misalign = 0)
      : storage_(n + misalign + 128, kCanary), data_(storage_.data() + 64 + misalign), n_(n) {}
  std::uint8_t* data() { return data_; }
  bool canaries_intact() const {
    const auto lead = static_cast<std::size_t>(data_ - storage_.data());
    for (std::size_t i = 0; i < lead; ++i) {
      if (storage_[i] != kCanary) return false;
    }
    for (std::size_t i = lead + n_; i < storage_.size(); ++i) {
      if (storage_[i] != kCanary) return false;
    }
    return true;
  }

 private:
  std::vector<std::uint8_t> storage_;
  std::uint8_t* data_;
  std::size_t n_;
};

void send_blocking(Rank& rank, Session& s, int peer, const void* buf, std::size_t n,
                   std::uint64_t tag, unsigned flags = 0) {
  rdmx_request_t req;
  RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[static_cast<std::size_t>(peer)], buf, n, tag, flags, &req,
                                    nullptr, nullptr));
  RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, nullptr, "send", std::chrono::minutes(5)));
}

class Rndv : public ::testing::TestWithParam<Mode> {
 protected:
  void SetUp() override {
    RDMX_REQUIRE_DEVICE();
    if (GetParam().two_devices && devices().size() < 2) {
      GTEST_SKIP() << "needs two devices: ci/softroce/run --devices 2";
    }
  }
  bool ud() const { return GetParam().transport == RDMX_TRANSPORT_UD; }
  // What the receiver of an n-byte rendezvous message reads itself with the default share: the
  // guest's devices are rxe, a software device (50 %, from 8 KiB); UD mode writes only.
  std::uint64_t read_share_of(std::size_t n) const {
    return ud() || n < 8 * 1024 ? 0 : (n / 100 * 50) & ~std::uint64_t{63};
  }
  // The long cases (64 MiB, the copy path) run in one device pairing per transport: RC on one
  // device, UD across two. What they test does not depend on the pairing, and the CI's whole
  // guest phase has ~15 min.
  bool long_cases() const { return ud() == GetParam().two_devices; }
  // The threshold the test pins (UD) or the default (RC).
  std::size_t thresh() const {
    if (ud()) {
      return kUdThresh;
    }
    rdmx_config_t c = test_config("", RDMX_TRANSPORT_RC);
    return c.rndv_thresh;
  }
  void run(int n, const std::function<void(Rank&, Session&)>& body,
           const std::function<void(Rank&, rdmx_config_t&)>& tweak = {},
           std::chrono::seconds timeout = std::chrono::seconds(600)) {
    const Mode m = GetParam();
    EXPECT_TRUE(run_ranks(
        n,
        [&](Rank& rank) {
          Session s = open_session(rank, device_for(rank.rank(), m.two_devices), m.transport,
                                   [&](rdmx_config_t& c) {
                                     if (m.transport == RDMX_TRANSPORT_UD) {
                                       c.rndv_thresh = kUdThresh;
                                     }
                                     if (tweak) {
                                       tweak(rank, c);
                                     }
                                   });
          body(rank, s);
          rank.barrier();
          close_session(rank, s);
        },
        RunOptions{.timeout = timeout}));
  }
};

// Rank 1 sends every size twice: first to a receive posted before the RTS arrives, then to one
// posted after it (the RTS waits as an unexpected message, which probe shows with its full
// length). Contents, statuses and the zero-copy counters are checked. The other two pairings
// (long_cases() false) take the sizes around the threshold, 1 MiB and 8 MiB + 1 only.
TEST_P(Rndv, SizesAroundTheThresholdAndTheWriteLimit) {
  const std::size_t th = thresh();
  const std::vector<std::size_t> sizes =
      long_cases()
          ? std::vector<std::size_t>{th - 1,          th,          th + 1,          kMiB,
                                     kWriteLimit - 1, kWriteLimit, kWriteLimit + 1, 64 * kMiB}
          : std::vector<std::size_t>{th - 1, th, th + 1, kMiB, kWriteLimit + 1};
  run(2, [&](Rank& rank, Session& s) {
    std::vector<std::uint8_t> buf(sizes.back() + 1);
    std::uint64_t want_rndv = 0, want_bytes = 0, want_read = 0;
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      const std::size_t n = sizes[k];
      const int rounds = n >= 64 * kMiB ? 1 : 2;
      for (int round = 0; round < rounds; ++round) {
        const auto seed = static_cast<std::uint32_t>(k * 2 + round);
        const std::uint64_t tag = 1000 + seed;
        if (n >= th) {
          ++want_rndv;
          want_bytes += n;
          want_read += read_share_of(n);
        }
        if (rank.rank() == 1) {
          fill(buf.data(), n, seed);
          if (round == 0) {
            rank.barrier();  // the receive is posted
          }
          send_blocking(rank, s, 0, buf.data(), n, tag);
          if (round == 1) {
            rank.barrier();
          }
          continue;
        }
        rdmx_request_t req;
        rdmx_status_t st{};
        std::fill(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n + 1), 0);
        if (round == 0) {
          RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, buf.data(), n + 1, s.uids[1], tag, kAll, &req,
                                            nullptr, nullptr));
          rank.barrier();
        } else {
          const rdmx_status_t ps = probe_until(rank, s, s.uids[1], tag, kAll, kProbeTimeout);
          RDMX_CHECK_EQ(rank, ps.length, n);
          RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, buf.data(), n + 1, s.uids[1], tag, kAll, &req,
                                            nullptr, nullptr));
        }
        RDMX_CHECK_OK(rank,
                      wait_request(rank, s.worker, &req, &st, "receive", std::chrono::minutes(5)));
        if (round == 1) {
          rank.barrier();
        }
        RDMX_CHECK_EQ(rank, st.length, n);
        RDMX_CHECK_EQ(rank, st.tag, tag);
        RDMX_CHECK_EQ(rank, st.source, s.uids[1]);
        RDMX_CHECK_CONTENTS(rank, buf.data(), n, seed);
        RDMX_CHECK_EQ(rank, buf[n], 0);
      }
    }
    const rdmx_stats_t st = stats_of(rank, s);
    if (rank.rank() == 1) {
      RDMX_CHECK_EQ(rank, st.rndv_sends, want_rndv);
      RDMX_CHECK_EQ(rank, st.rndv_zero_copy_bytes, want_bytes);
      RDMX_CHECK_EQ(rank, st.rndv_copied_bytes, 0u);
    } else {
      RDMX_CHECK_EQ(rank, st.rndv_recvs, want_rndv);
      RDMX_CHECK_EQ(rank, st.rndv_read_bytes, want_read);
    }
  });
}

// The writes-only protocol (rndv_read_share 0, a hardware device's default) around the write
// limit; the other cases here run with rxe's default share.
TEST_P(Rndv, WritesOnlyWhenTheReadShareIsOff) {
  if (ud()) {
    GTEST_SKIP() << "UD mode always writes only";
  }
  const std::vector<std::size_t> sizes = {kMiB, kWriteLimit + 1};
  run(
      2,
      [&](Rank& rank, Session& s) {
        std::vector<std::uint8_t> buf(sizes.back());
        for (std::size_t k = 0; k < sizes.size(); ++k) {
          const std::size_t n = sizes[k];
          const auto seed = static_cast<std::uint32_t>(50 + k);
          if (rank.rank() == 1) {
            fill(buf.data(), n, seed);
            send_blocking(rank, s, 0, buf.data(), n, seed);
            continue;
          }
          std::fill(buf.begin(), buf.end(), 0);
          rdmx_request_t req;
          rdmx_status_t st{};
          RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, buf.data(), n, s.uids[1], seed, kAll, &req,
                                            nullptr, nullptr));
          RDMX_CHECK_OK(
              rank, wait_request(rank, s.worker, &req, &st, "receive", std::chrono::minutes(5)));
          RDMX_CHECK_EQ(rank, st.length, n);
          RDMX_CHECK_CONTENTS(rank, buf.data(), n, seed);
        }
        const rdmx_stats_t st = stats_of(rank, s);
        RDMX_CHECK_EQ(rank, st.rndv_read_bytes, 0u);
        if (rank.rank() == 1) {
          RDMX_CHECK_EQ(rank, st.rndv_zero_copy_bytes, kMiB + kWriteLimit + 1);
        }
      },
      [](Rank&, rdmx_config_t& c) { c.rndv_read_share = 0; });
}

// A worker that takes fewer RDMA reads in flight (rc_max_rd_atomic 2, as a device with few
// read resources would) is never sent more than that: its peer's QPs to it are capped by the
// address, while its own cap holds both ways. Both directions read and deliver the bytes.
TEST_P(Rndv, ReadsStayWithinWhatThePeerTakes) {
  if (ud()) {
    GTEST_SKIP() << "UD mode reads nothing (its on-demand RC connections carry writes only)";
  }
  constexpr std::size_t n = 4 * kMiB;
  run(
      2,
      [&](Rank& rank, Session& s) {
        std::vector<std::uint8_t> buf(n);
        for (int sender = 1; sender >= 0; --sender) {
          const auto seed = static_cast<std::uint32_t>(60 + sender);
          if (rank.rank() == sender) {
            fill(buf.data(), n, seed);
            send_blocking(rank, s, 1 - sender, buf.data(), n, seed);
            continue;
          }
          std::fill(buf.begin(), buf.end(), 0);
          rdmx_request_t req;
          rdmx_status_t st{};
          RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, buf.data(), n, s.uids[1 - rank.rank()], seed,
                                            kAll, &req, nullptr, nullptr));
          RDMX_CHECK_OK(
              rank, wait_request(rank, s.worker, &req, &st, "receive", std::chrono::minutes(5)));
          RDMX_CHECK_EQ(rank, st.length, n);
          RDMX_CHECK_CONTENTS(rank, buf.data(), n, seed);
        }
        RDMX_CHECK(rank, stats_of(rank, s).rndv_read_bytes > 0);
        const auto limits = transport::debug::rc_read_limits(s.worker, s.uids[1 - rank.rank()]);
        RDMX_CHECK(rank, !limits.empty());
        for (const auto& l : limits) {
          RDMX_CHECK_EQ(rank, l.max_rd_atomic, 2);
          if (rank.rank() == 0) {
            RDMX_CHECK_EQ(rank, l.max_dest_rd_atomic, 2);
          } else {
            RDMX_CHECK(rank, l.max_dest_rd_atomic > 2);  // its own (rxe: 16)
          }
        }
      },
      [](Rank& rank, rdmx_config_t& c) {
        if (rank.rank() == 0) {
          c.rc_max_rd_atomic = 2;
        }
      });
}

TEST_P(Rndv, OneGiBOnce) {
  if (ud() || GetParam().two_devices) {
    GTEST_SKIP() << "one 1 GiB run: RC on one device";
  }
  constexpr std::size_t n = std::size_t{1} << 30;
  run(
      2,
      [&](Rank& rank, Session& s) {
        auto* p = static_cast<std::uint8_t*>(
            mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        RDMX_CHECK(rank, p != MAP_FAILED);
        const auto t0 = std::chrono::steady_clock::now();
        if (rank.rank() == 1) {
          fill(p, n, 77);
          rank.barrier();
          send_blocking(rank, s, 0, p, n, 5);
        } else {
          rdmx_request_t req;
          rdmx_status_t st{};
          RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, p, n, RDMX_ANY_SOURCE, 5, kAll, &req, nullptr,
                                            nullptr));
          rank.barrier();
          RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, &st, "1 GiB receive",
                                           std::chrono::minutes(8)));
          const double secs = seconds_since(t0);
          RDMX_CHECK_EQ(rank, st.length, n);
          RDMX_CHECK_CONTENTS(rank, p, n, 77);
          std::printf("1 GiB in %.1f s (%.1f MB/s)\n", secs, static_cast<double>(n) / secs / 1e6);
        }
        munmap(p, n);
      },
      {}, std::chrono::seconds(900));
}

TEST_P(Rndv, UnalignedStartAndEnd) {
  const std::size_t n = kMiB + 5;
  run(2, [&](Rank& rank, Session& s) {
    std::vector<std::uint8_t> src(n + 16);
    for (const std::size_t mis : {1ul, 3ul, 7ul}) {
      const auto seed = static_cast<std::uint32_t>(mis);
      if (rank.rank() == 1) {
        fill(src.data() + mis, n, seed);
        send_blocking(rank, s, 0, src.data() + mis, n, mis);
        continue;
      }
      GuardedBuffer dst(n, (mis * 3) % 8 + 1);
      rdmx_request_t req;
      rdmx_status_t st{};
      RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, dst.data(), n, s.uids[1], mis, kAll, &req,
                                        nullptr, nullptr));
      RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, &st, "unaligned receive"));
      RDMX_CHECK_CONTENTS(rank, dst.data(), n, seed);
      RDMX_CHECK(rank, dst.canaries_intact());
    }
  });
}

TEST_P(Rndv, TruncationWritesExactlyTheBufferAndReportsTheTrueLength) {
  const std::size_t n = 3 * kMiB + 11;
  run(2, [&](Rank& rank, Session& s) {
    const std::vector<std::size_t> caps = {100 * 1024 + 3, 0, n - 1};
    for (std::size_t k = 0; k < caps.size(); ++k) {
      const auto seed = static_cast<std::uint32_t>(40 + k);
      if (rank.rank() == 1) {
        std::vector<std::uint8_t> src(n);
        fill(src.data(), n, seed);
        if (k % 2 == 0) rank.barrier();
        send_blocking(rank, s, 0, src.data(), n, seed);  // the sender completes normally
        if (k % 2 == 1) rank.barrier();
        continue;
      }
      GuardedBuffer dst(caps[k]);
      rdmx_request_t req;
      rdmx_status_t st{};
      if (k % 2 == 1) {
        (void)probe_until(rank, s, s.uids[1], seed, kAll, kProbeTimeout);  // unexpected first
      }
      RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, dst.data(), caps[k], s.uids[1], seed, kAll, &req,
                                        nullptr, nullptr));
      if (k % 2 == 0) rank.barrier();
      RDMX_CHECK_EQ(rank, wait_request(rank, s.worker, &req, &st, "truncated receive"),
                    RDMX_ERR_TRUNCATED);
      if (k % 2 == 1) rank.barrier();
      RDMX_CHECK_EQ(rank, st.error, RDMX_ERR_TRUNCATED);
      RDMX_CHECK_EQ(rank, st.length, n);
      RDMX_CHECK_CONTENTS(rank, dst.data(), caps[k], seed);
      RDMX_CHECK(rank, dst.canaries_intact());
    }
  });
}

// Three ranks: 1 and 2 send large messages; rank 0 takes them with any-source receives, a probe
// and an mprobe + mrecv.
TEST_P(Rndv, AnySourceProbeAndMprobe) {
  const std::size_t n = 2 * kMiB + 1;
  run(3, [&](Rank& rank, Session& s) {
    if (rank.rank() != 0) {
      // All three at once: rank 0 takes them in an order of its choosing (a rendezvous send
      // completes only when its receive is matched).
      std::vector<std::vector<std::uint8_t>> src(3, std::vector<std::uint8_t>(n));
      rdmx_request_t reqs[3];
      for (std::uint32_t i = 0; i < 3; ++i) {
        fill(src[i].data(), n, static_cast<std::uint32_t>(rank.rank() * 10 + static_cast<int>(i)));
        RDMX_CHECK_OK(
            rank, rdmx_tag_send(s.eps[0], src[i].data(), n, 7 + i, 0, &reqs[i], nullptr, nullptr));
      }
      for (auto& r : reqs) {
        RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &r, nullptr, "send"));
      }
      return;
    }
    std::vector<std::uint8_t> dst(n);
    auto seed_of = [&](const rdmx_status_t& st) {
      const int from = st.source == s.uids[1] ? 1 : 2;
      return static_cast<std::uint32_t>(from * 10 + (st.tag - 7));
    };
    // Any source, tag 7: one from each.
    for (int i = 0; i < 2; ++i) {
      rdmx_request_t req;
      rdmx_status_t st{};
      RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, dst.data(), n, RDMX_ANY_SOURCE, 7, kAll, &req,
                                        nullptr, nullptr));
      RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, &st, "any-source receive"));
      RDMX_CHECK(rank, st.source == s.uids[1] || st.source == s.uids[2]);
      RDMX_CHECK_EQ(rank, st.length, n);
      RDMX_CHECK_CONTENTS(rank, dst.data(), n, seed_of(st));
    }
    // Probe (any source, tag 8), then mprobe it and receive it with mrecv after another receive.
    rdmx_status_t ps = probe_until(rank, s, RDMX_ANY_SOURCE, 8, kAll, kProbeTimeout);
    RDMX_CHECK_EQ(rank, ps.length, n);
    rdmx_message_t* m = nullptr;
    rdmx_status_t ms = probe_until(rank, s, ps.source, 8, kAll, kProbeTimeout, &m);
    RDMX_CHECK_EQ(rank, ms.length, n);
    RDMX_CHECK(rank, m != nullptr);
    for (int i = 0; i < 3; ++i) {  // the other tag-8 message and both tag-9 ones
      rdmx_request_t req;
      rdmx_status_t st{};
      RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, dst.data(), n, RDMX_ANY_SOURCE, 0, 0, &req,
                                        nullptr, nullptr));
      RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, &st, "wildcard receive"));
      RDMX_CHECK_CONTENTS(rank, dst.data(), n, seed_of(st));
    }
    rdmx_request_t req;
    rdmx_status_t st{};
    RDMX_CHECK_OK(rank, rdmx_tag_msg_recv(s.worker, m, dst.data(), n, &req, nullptr, nullptr));
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, &st, "mrecv"));
    RDMX_CHECK_EQ(rank, st.source, ms.source);
    RDMX_CHECK_EQ(rank, st.tag, 8u);
    RDMX_CHECK_CONTENTS(rank, dst.data(), n, seed_of(st));
  });
}

// Four ranks, every one sending several large messages to every other at once (nonblocking),
// with all receives posted up front.
TEST_P(Rndv, ManyConcurrentTransfersFromSeveralPeers) {
  constexpr int kRanks = 4;
  constexpr int kPerPeer = 4;
  run(kRanks, [&](Rank& rank, Session& s) {
    auto size_of = [](int from, int to, int i) {
      return std::size_t{64 * 1024} * static_cast<std::size_t>(1 + (from * 7 + to * 3 + i) % 9) +
             static_cast<std::size_t>(from + i);
    };
    auto seed_of = [](int from, int to, int i) {
      return static_cast<std::uint32_t>(1000 + from * 100 + to * 10 + i);
    };
    std::vector<std::vector<std::uint8_t>> out, in;
    std::vector<rdmx_request_t> reqs;
    reqs.reserve(2 * kRanks * kPerPeer);
    std::vector<std::pair<int, int>> in_ids;
    for (int p = 0; p < kRanks; ++p) {
      if (p == rank.rank()) continue;
      for (int i = 0; i < kPerPeer; ++i) {
        in.emplace_back(size_of(p, rank.rank(), i));
        in_ids.emplace_back(p, i);
        reqs.emplace_back();
        RDMX_CHECK_OK(
            rank, rdmx_tag_recv(s.worker, in.back().data(), in.back().size(),
                                s.uids[static_cast<std::size_t>(p)], static_cast<std::uint64_t>(i),
                                kAll, &reqs.back(), nullptr, nullptr));
      }
    }
    rank.barrier();
    for (int p = 0; p < kRanks; ++p) {
      if (p == rank.rank()) continue;
      for (int i = 0; i < kPerPeer; ++i) {
        out.emplace_back(size_of(rank.rank(), p, i));
        fill(out.back().data(), out.back().size(), seed_of(rank.rank(), p, i));
        reqs.emplace_back();
        RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[static_cast<std::size_t>(p)], out.back().data(),
                                          out.back().size(), static_cast<std::uint64_t>(i), 0,
                                          &reqs.back(), nullptr, nullptr));
      }
    }
    for (auto& r : reqs) {
      RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &r, nullptr, "concurrent transfer",
                                       std::chrono::minutes(5)));
    }
    for (std::size_t k = 0; k < in.size(); ++k) {
      const auto [p, i] = in_ids[k];
      RDMX_CHECK_CONTENTS(rank, in[k].data(), in[k].size(), seed_of(p, rank.rank(), i));
    }
  });
}

// Eager and rendezvous messages with one tag match in send order (MPI non-overtaking).
TEST_P(Rndv, EagerAndRendezvousKeepSendOrder) {
  const std::size_t th = thresh();
  run(2, [&](Rank& rank, Session& s) {
    constexpr int kMsgs = 24;
    auto size_of = [&](int i) {
      return i % 3 == 0 ? th + 1000 * static_cast<std::size_t>(i)
                        : 16 + static_cast<std::size_t>(i);
    };
    if (rank.rank() == 1) {
      std::vector<std::vector<std::uint8_t>> bufs(kMsgs);
      std::vector<rdmx_request_t> reqs(kMsgs);
      for (int i = 0; i < kMsgs; ++i) {
        bufs[i].resize(size_of(i));
        fill(bufs[i].data(), bufs[i].size(), static_cast<std::uint32_t>(i));
        RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[0], bufs[i].data(), bufs[i].size(), 3, 0, &reqs[i],
                                          nullptr, nullptr));
      }
      for (auto& r : reqs) {
        RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &r, nullptr, "send"));
      }
      return;
    }
    std::vector<std::uint8_t> dst(th + 1000 * kMsgs);
    for (int i = 0; i < kMsgs; ++i) {
      if (i == kMsgs / 2) {
        // Let the rest arrive first (unexpected) and then take them in order.
        (void)probe_until(rank, s, s.uids[1], 3, kAll, kProbeTimeout);
        for (int k = 0; k < 200; ++k) (void)rdmx_worker_progress(s.worker);
      }
      rdmx_request_t req;
      rdmx_status_t st{};
      RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, dst.data(), dst.size(), RDMX_ANY_SOURCE, 3, kAll,
                                        &req, nullptr, nullptr));
      RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, &st, "ordered receive"));
      RDMX_CHECK_EQ(rank, st.length, size_of(i));
      RDMX_CHECK_CONTENTS(rank, dst.data(), st.length, static_cast<std::uint32_t>(i));
    }
  });
}

TEST_P(Rndv, SyncSendAndReadOnlySendBuffer) {
  const std::size_t n = 5 * kMiB + 3;
  run(2, [&](Rank& rank, Session& s) {
    if (rank.rank() == 1) {
      // A read-only mapping: the sender registers it for local reads only.
      const std::size_t len = (n + 4095) & ~std::size_t{4095};
      auto* p = static_cast<std::uint8_t*>(
          mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
      RDMX_CHECK(rank, p != MAP_FAILED);
      fill(p, n, 9);
      RDMX_CHECK(rank, mprotect(p, len, PROT_READ) == 0);
      const auto t0 = std::chrono::steady_clock::now();
      send_blocking(rank, s, 0, p, n, 1, RDMX_SEND_SYNC);
      // The receive is posted 300 ms after the barrier: a sync send cannot complete before.
      RDMX_CHECK(rank, seconds_since(t0) > 0.25);
      rank.barrier();
      const rdmx_stats_t st = stats_of(rank, s);
      RDMX_CHECK_EQ(rank, st.rndv_zero_copy_bytes, n);
      munmap(p, len);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::vector<std::uint8_t> dst(n);
    rdmx_request_t req;
    RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, dst.data(), n, RDMX_ANY_SOURCE, 1, kAll, &req,
                                      nullptr, nullptr));
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, nullptr, "receive"));
    RDMX_CHECK_CONTENTS(rank, dst.data(), n, 9);
    rank.barrier();
  });
}

// A matched rendezvous receive cannot be cancelled; an unmatched one can.
TEST_P(Rndv, CancelOnlyBeforeTheMatch) {
  const std::size_t n = 4 * kMiB;
  run(2, [&](Rank& rank, Session& s) {
    if (rank.rank() == 1) {
      std::vector<std::uint8_t> src(n);
      fill(src.data(), n, 3);
      send_blocking(rank, s, 0, src.data(), n, 2);
      return;
    }
    std::vector<std::uint8_t> dst(n);
    rdmx_request_t other;
    RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, dst.data(), n, RDMX_ANY_SOURCE, 99, kAll, &other,
                                      nullptr, nullptr));
    RDMX_CHECK_OK(rank, rdmx_request_cancel(s.worker, &other));
    RDMX_CHECK_EQ(rank, wait_request(rank, s.worker, &other, nullptr, "cancelled"),
                  RDMX_ERR_CANCELED);
    (void)probe_until(rank, s, s.uids[1], 2, kAll, kProbeTimeout);
    rdmx_request_t req;
    RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, dst.data(), n, RDMX_ANY_SOURCE, 2, kAll, &req,
                                      nullptr, nullptr));
    if (rdmx_request_test(&req, nullptr) == RDMX_INPROGRESS) {
      RDMX_CHECK_EQ(rank, rdmx_request_cancel(s.worker, &req), RDMX_ERR_BUSY);
    }
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, nullptr, "receive"));
    RDMX_CHECK_CONTENTS(rank, dst.data(), n, 3);
  });
}

// The receiver (first round) and then the sender (second round) cannot pin the message (larger
// than the whole RLIMIT_MEMLOCK): it arrives intact through the copy path, and the counters say
// so. UD copies go one packet at a time under the congestion window (0.1-1 MB/s emulated): a
// smaller limit and message there.
TEST_P(Rndv, RegistrationFailureFallsBackToCopies) {
  if (!long_cases()) {
    GTEST_SKIP() << "the copy path runs in one pairing per transport (RC one device, UD two)";
  }
  const std::size_t pin_limit = ud() ? 6 * kMiB : 32 * kMiB;
  const std::size_t n = pin_limit + 1;
  for (int limited = 0; limited < 2; ++limited) {
    SCOPED_TRACE(limited == 0 ? "receiver limited" : "sender limited");
    run(
        2,
        [&](Rank& rank, Session& s) {
          std::vector<std::uint8_t> buf(n);
          if (rank.rank() == 1) {
            fill(buf.data(), n, 21);
            send_blocking(rank, s, 0, buf.data(), n, 4);
            const rdmx_stats_t st = stats_of(rank, s);
            RDMX_CHECK_EQ(rank, st.rndv_copied_bytes, n);
            RDMX_CHECK_EQ(rank, st.rndv_zero_copy_bytes, 0u);
            if (limited == 1) {
              RDMX_CHECK(rank, st.rndv_reg_failures >= 1);
            }
            return;
          }
          rdmx_request_t req;
          rdmx_status_t st{};
          RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, buf.data(), n, RDMX_ANY_SOURCE, 4, kAll, &req,
                                            nullptr, nullptr));
          RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, &st, "receive by copies",
                                           std::chrono::minutes(8)));
          RDMX_CHECK_EQ(rank, st.length, n);
          RDMX_CHECK_CONTENTS(rank, buf.data(), n, 21);
          if (limited == 0) {
            RDMX_CHECK(rank, stats_of(rank, s).rndv_reg_failures >= 1);
          }
        },
        [&](Rank& rank, rdmx_config_t&) {
          // Before the worker exists: its own pools (RC ~12 MiB, UD ~3 MiB) still fit.
          if (rank.rank() == (limited == 0 ? 0 : 1) && !limit_pinning(pin_limit)) {
            rank.fail(__FILE__, __LINE__, "cannot drop CAP_IPC_LOCK / lower RLIMIT_MEMLOCK");
          }
        },
        std::chrono::seconds(900));
  }
}

// UD: with at most one RC connection, rank 0 writes to ranks 1, 2, 3 in turn (twice round):
// each new peer retires the previous, idle connection, and everything still arrives.
TEST_P(Rndv, UdRcConnectionCapRetiresTheLeastRecentlyUsed) {
  if (!ud()) {
    GTEST_SKIP() << "on-demand RC connections are a UD-mode feature";
  }
  const std::size_t n = kMiB + 17;
  run(
      4,
      [&](Rank& rank, Session& s) {
        std::vector<std::uint8_t> buf(n);
        if (rank.rank() == 0) {
          for (int round = 0; round < 2; ++round) {
            for (int p = 1; p < 4; ++p) {
              fill(buf.data(), n, static_cast<std::uint32_t>(round * 10 + p));
              send_blocking(rank, s, p, buf.data(), n, static_cast<std::uint64_t>(round));
              const rdmx_stats_t st = stats_of(rank, s);
              RDMX_CHECK(rank, st.rc_connections <= 1);
            }
          }
          const rdmx_stats_t st = stats_of(rank, s);
          RDMX_CHECK_EQ(rank, st.rndv_zero_copy_bytes, 6 * n);
          RDMX_CHECK(rank, st.rc_retired >= 5);
          return;
        }
        for (int round = 0; round < 2; ++round) {
          rdmx_request_t req;
          RDMX_CHECK_OK(
              rank, rdmx_tag_recv(s.worker, buf.data(), n, RDMX_ANY_SOURCE,
                                  static_cast<std::uint64_t>(round), kAll, &req, nullptr, nullptr));
          RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &req, nullptr, "receive"));
          RDMX_CHECK_CONTENTS(rank, buf.data(), n,
                              static_cast<std::uint32_t>(round * 10 + rank.rank()));
        }
      },
      [](Rank& rank, rdmx_config_t& c) {
        if (rank.rank() == 0) {
          c.max_rc_peers = 1;
        }
      });
}

INSTANTIATE_TEST_SUITE_P(Modes, Rndv,
                         ::testing::Values(Mode{RDMX_TRANSPORT_RC, false},
                                           Mode{RDMX_TRANSPORT_UD, false},
                                           Mode{RDMX_TRANSPORT_RC, true},
                                           Mode{RDMX_TRANSPORT_UD, true}),
                         mode_name);

}  // namespace
}  // namespace rdmx::test
