// Malformed and hostile packets to a running worker (UD, where any process can address a QP):
// sent by its peer's own UD QP through debug::send_raw, so they pass the source-QP check and
// reach the parsers. Each is dropped and counted (dropped_malformed, out_of_window,
// rndv_stale: the unreliable ones are sent twice, in case UD loses one), nothing
// crashes, no byte lands outside the posted receive buffers (guard bytes around each), and the
// traffic that follows, both ways, eager and rendezvous, is delivered intact. The parsers
// themselves are fuzzed on the host (tests/fuzz).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "protocol/wire.h"
#include "rdmx/rdmx.h"
#include "tests/guest/support/guest_env.h"
#include "tests/transport/support/procs.h"
#include "transport/debug.h"

namespace rdmx::test {
namespace {

using protocol::MsgHeader;
using protocol::MsgKind;
using rdmx::transport::debug::Raw;

std::vector<std::byte> message(const MsgHeader& h, const void* rest = nullptr, std::size_t n = 0) {
  std::vector<std::byte> m(protocol::kHeaderSize + n);
  protocol::store_wire(m.data(), h);
  if (n != 0) {
    std::memcpy(m.data() + protocol::kHeaderSize, rest, n);
  }
  return m;
}

MsgHeader eager_header(std::uint32_t payload) {
  MsgHeader h = protocol::make_header(MsgKind::kEager);
  h.payload_length = payload;
  h.tag = 77;
  return h;
}

struct Hostile {
  const char* what;
  std::vector<std::byte> bytes;
  Raw how;
};

// What the hostile peer sends; every one must be dropped before it touches a receive. Each is
// otherwise a valid next message of the stream (Raw::kInStream), tag 77 as the victim's posted
// receives: accepting one would complete a receive, and lose the peer's next real message.
std::vector<Hostile> hostile_messages() {
  std::vector<Hostile> out;
  const std::uint64_t payload = 0x5555555555555555ull;
  MsgHeader h = eager_header(8);
  h.version = protocol::kWireVersion + 1;
  out.push_back({"another wire version", message(h, &payload, 8), Raw::kInStream});
  h = eager_header(8);
  h.kind = 0;
  out.push_back({"kind kInvalid", message(h, &payload, 8), Raw::kInStream});
  h.kind = 200;
  out.push_back({"kind 200", message(h, &payload, 8), Raw::kInStream});
  h = eager_header(8);
  h.flags = 0x8000;
  out.push_back({"an unknown flag", message(h, &payload, 8), Raw::kInStream});
  h = eager_header(100000);
  out.push_back({"payload_length beyond the packet", message(h, &payload, 8), Raw::kInStream});
  h = eager_header(8);
  h.src_ep = 60000;
  out.push_back({"an unknown src_ep", message(h, &payload, 8), Raw::kAsIs});
  const auto whole = message(eager_header(8), &payload, 8);
  out.push_back({"a packet shorter than a header",
                 std::vector<std::byte>(whole.begin(), whole.begin() + 10), Raw::kAsIs});
  return out;
}

// Valid, but far ahead of the stream's window: out_of_window.
Hostile beyond_window() {
  const std::uint64_t payload = 0x5555555555555555ull;
  MsgHeader h = eager_header(8);
  h.seq = 30000;  // added to the stream's next number
  return {"a sequence number far beyond the window", message(h, &payload, 8), Raw::kInStream};
}

// In the reliable stream, in order, but naming no live transfer: dropped by the rendezvous
// engine (a CTS is answered with a FIN that cancels it).
std::vector<Hostile> stale_rendezvous() {
  std::vector<Hostile> out;
  MsgHeader h = protocol::make_header(MsgKind::kCts);
  const protocol::CtsBody cts{.remote_addr = 0x1000,
                              .offset = 0,
                              .granted_length = 1 << 30,
                              .rkey = 0x1234,
                              .sender_slot = 0x7fff0001,
                              .receiver_slot = 3,
                              .flags = 0};
  out.push_back({"a CTS for no live send", message(h, &cts, sizeof(cts)), Raw::kSequenced});
  h = protocol::make_header(MsgKind::kFin);
  const protocol::FinBody fin{
      .sender_slot = 0x7fff0002, .receiver_slot = 0x7fff0003, .status = 0, .flags = 0};
  out.push_back({"a FIN for no live transfer", message(h, &fin, sizeof(fin)), Raw::kSequenced});
  h = protocol::make_header(MsgKind::kRndvData);
  h.payload_length = 16;
  std::vector<std::byte> data(sizeof(protocol::DataBody) + 16, std::byte{0x66});
  const protocol::DataBody body{.offset = 0, .receiver_slot = 0x7fff0004, .reserved = 0};
  std::memcpy(data.data(), &body, sizeof(body));
  out.push_back({"rendezvous data for no live receive", message(h, data.data(), data.size()),
                 Raw::kSequenced});
  return out;
}

constexpr std::size_t kGuard = 256;
constexpr std::byte kGuardByte{0xa5};

// A receive buffer of n bytes with kGuard guard bytes on each side.
struct Guarded {
  explicit Guarded(std::size_t n) : bytes(n + 2 * kGuard, kGuardByte) {}
  std::byte* data() { return bytes.data() + kGuard; }
  bool guards_intact() const {
    for (std::size_t i = 0; i < kGuard; ++i) {
      if (bytes[i] != kGuardByte || bytes[bytes.size() - 1 - i] != kGuardByte) {
        return false;
      }
    }
    return true;
  }
  std::vector<std::byte> bytes;
};

std::byte pattern(std::size_t i, std::uint32_t seed) {
  return static_cast<std::byte>((i * 131 + seed * 7 + (i >> 9)) & 0xff);
}

constexpr std::size_t kSizes[] = {0, 1, 8, 700, 1000, 3000, 1 << 20};

// Sends every size of kSizes to `peer` (tag = index) and receives every size from it, into
// guarded buffers; checks contents and guards.
void clean_traffic(Rank& rank, Session& s, int peer, std::uint32_t seed) {
  constexpr std::size_t n = std::size(kSizes);
  std::vector<Guarded> in;
  std::vector<std::vector<std::byte>> out;
  std::vector<rdmx_request_t> reqs(2 * n);
  for (std::size_t k = 0; k < n; ++k) {
    in.emplace_back(kSizes[k]);
    RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, in[k].data(), kSizes[k],
                                      s.uids[static_cast<std::size_t>(peer)], k, ~0ull, &reqs[k],
                                      nullptr, nullptr));
  }
  for (std::size_t k = 0; k < n; ++k) {
    out.emplace_back(kSizes[k]);
    for (std::size_t i = 0; i < kSizes[k]; ++i) {
      out[k][i] = pattern(i, seed + static_cast<std::uint32_t>(rank.rank()));
    }
    RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[static_cast<std::size_t>(peer)], out[k].data(),
                                      kSizes[k], k, 0, &reqs[n + k], nullptr, nullptr));
  }
  for (auto& r : reqs) {
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &r, nullptr, "traffic after hostile input"));
  }
  for (std::size_t k = 0; k < n; ++k) {
    RDMX_CHECK(rank, in[k].guards_intact());
    for (std::size_t i = 0; i < kSizes[k]; ++i) {
      RDMX_CHECK(rank, in[k].data()[i] == pattern(i, seed + static_cast<std::uint32_t>(peer)));
    }
  }
}

rdmx_stats_t stats(Rank& rank, Session& s) {
  rdmx_stats_t st{};
  RDMX_CHECK_OK(rank, rdmx_worker_stats(s.worker, &st));
  return st;
}

TEST(Hostile, PacketsFromAPeerAreDroppedAndCounted) {
  RDMX_REQUIRE_DEVICE();
  const auto hostile = hostile_messages();
  const std::vector<Hostile> beyond{beyond_window()};
  const auto stale = stale_rendezvous();
  EXPECT_TRUE(run_ranks(2, [&](Rank& rank) {
    Session s = open_session(rank, device_for(rank.rank(), true), RDMX_TRANSPORT_UD, nullptr);
    quiesce(rank, s);
    clean_traffic(rank, s, 1 - rank.rank(), 1);  // the stream is up, both ways
    if (rank.rank() == 0) {                      // the hostile peer
      rank.barrier();
      for (const auto* list : {&hostile, &beyond, &hostile, &beyond, &stale}) {
        for (const Hostile& m : *list) {
          const auto t0 = std::chrono::steady_clock::now();
          while (!rdmx::transport::debug::send_raw(s.worker, s.uids[1], m.bytes.data(),
                                                   m.bytes.size(), m.how)) {
            if (seconds_since(t0) > 10) {
              rank.fail(__FILE__, __LINE__, std::string("cannot send ") + m.what);
            }
            (void)rdmx_worker_progress(s.worker);
          }
        }
      }
      // Completes once the victim matched it: after every message before it in the stream.
      std::uint8_t x = 1;
      rdmx_request_t ssend;
      RDMX_CHECK_OK(rank,
                    rdmx_tag_send(s.eps[1], &x, 1, 99, RDMX_SEND_SYNC, &ssend, nullptr, nullptr));
      RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &ssend, nullptr, "sync send after"));
    } else {  // the victim
      const rdmx_stats_t before = stats(rank, s);
      // Receives that no hostile packet may complete or write into.
      std::vector<Guarded> bufs;
      std::vector<rdmx_request_t> posted(4);
      for (std::size_t k = 0; k < posted.size(); ++k) {
        bufs.emplace_back(64);
        RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, bufs[k].data(), 64, RDMX_ANY_SOURCE, 77, ~0ull,
                                          &posted[k], nullptr, nullptr));
      }
      rank.barrier();
      std::uint8_t x = 0;
      rdmx_request_t r;
      RDMX_CHECK_OK(rank,
                    rdmx_tag_recv(s.worker, &x, 1, s.uids[0], 99, ~0ull, &r, nullptr, nullptr));
      RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &r, nullptr, "the sync send after"));
      RDMX_CHECK_EQ(rank, x, 1);
      const rdmx_stats_t after = stats(rank, s);
      const std::uint64_t malformed = after.dropped_malformed - before.dropped_malformed;
      const std::uint64_t ahead = after.out_of_window - before.out_of_window;
      std::printf(
          "victim: 2 x %zu malformed, 2 x 1 beyond the window, %zu stale: "
          "dropped_malformed +%llu out_of_window +%llu dropped_foreign +%llu "
          "rndv_stale +%llu\n",
          hostile.size(), stale.size(), static_cast<unsigned long long>(malformed),
          static_cast<unsigned long long>(ahead),
          static_cast<unsigned long long>(after.dropped_foreign - before.dropped_foreign),
          static_cast<unsigned long long>(after.rndv_stale - before.rndv_stale));
      RDMX_CHECK(rank, malformed >= hostile.size() && malformed <= 2 * hostile.size());
      RDMX_CHECK(rank, ahead >= 1 && ahead <= 2);
      RDMX_CHECK_EQ(rank, after.rndv_stale - before.rndv_stale, stale.size());
      for (std::size_t k = 0; k < posted.size(); ++k) {
        rdmx_status_t st{};
        RDMX_CHECK_EQ(rank, rdmx_request_test(&posted[k], &st), RDMX_INPROGRESS);
        RDMX_CHECK_OK(rank, rdmx_request_cancel(s.worker, &posted[k]));
        RDMX_CHECK_EQ(rank, wait_request(rank, s.worker, &posted[k], &st, "cancel"),
                      RDMX_ERR_CANCELED);
        RDMX_CHECK(rank, bufs[k].guards_intact());
        for (std::size_t i = 0; i < 64; ++i) {
          RDMX_CHECK(rank, bufs[k].data()[i] == kGuardByte);  // untouched
        }
      }
    }
    clean_traffic(rank, s, 1 - rank.rank(), 2);  // and after, both ways
    quiesce(rank, s);
    close_session(rank, s);
  }));
}

}  // namespace
}  // namespace rdmx::test
