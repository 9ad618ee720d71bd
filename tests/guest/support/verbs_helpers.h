// Building blocks for device tests: the test device, registered buffers, bringing two QPs of
// one device up to RTS against each other (rxe loops packets back internally) and polling with
// a deadline. Everything goes through rdmx::verbs so that the tests exercise its API.
#pragma once

#include <infiniband/verbs.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "verbs/ah.h"
#include "verbs/context.h"
#include "verbs/cq.h"
#include "verbs/mr.h"
#include "verbs/pd.h"
#include "verbs/qp.h"
#include "verbs/srq.h"

namespace rdmx::test {

inline constexpr std::uint32_t kTestQkey = 0x11111111;
inline constexpr std::size_t kGrhBytes = 40;  // every UD receive starts with the GRH
inline constexpr std::size_t kKiB32 = std::size_t{32} << 10;
inline constexpr std::size_t kKiB64 = std::size_t{64} << 10;

struct TestDevice {
  verbs::Context ctx;
  std::uint8_t port = 1;
  std::uint32_t gid_index = 0;
  ibv_gid gid{};
  ibv_mtu mtu = IBV_MTU_1024;

  // The first device of RDMX_TEST_DEVICES (the first active one if unset).
  static TestDevice open();
};

// Memory and its registration, members in creation order (the MR goes before the memory).
struct Buffer {
  std::vector<std::uint8_t> bytes;
  verbs::MemoryRegion mr;

  Buffer(const verbs::ProtectionDomain& pd, std::size_t size,
         int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  std::uint8_t* at(std::size_t offset) { return bytes.data() + offset; }
  ibv_sge sge(std::size_t offset, std::uint32_t length) {
    return ibv_sge{reinterpret_cast<std::uintptr_t>(at(offset)), length, mr.lkey()};
  }
};

struct RcOptions {
  std::uint8_t min_rnr_timer = 1;  // 0.01 ms: RNR waits stay short in tests
  std::uint8_t rnr_retry = 7;
  std::uint8_t timeout = 14;  // ~67 ms
  std::uint8_t retry_cnt = 7;
};

// Two QPs of `type` on the test device, each with its own CQ of at least cq_depth entries (b's
// optionally reporting to `b_channel`), in RESET: connect_rc_pair() or activate_ud() next.
// Members in creation order. Tests bind the parts: auto& [cq_a, cq_b, a, b] = pair;
struct QpPair {
  verbs::CompletionQueue cq_a;
  verbs::CompletionQueue cq_b;
  verbs::QueuePair a;
  verbs::QueuePair b;

  QpPair(const TestDevice& dev, const verbs::ProtectionDomain& pd, ibv_qp_type type, int cq_depth,
         const verbs::QpCaps& caps, verbs::CompletionChannel* b_channel = nullptr);
};

// An address handle to the test device itself (rxe loops the packets back): UD sends between
// two QPs of one device.
verbs::AddressHandle loopback_ah(const verbs::ProtectionDomain& pd, const TestDevice& dev);

// A QP made with plain libibverbs (4 send and, without an SRQ, 4 receive WRs of one SGE), for the
// tests that record what raw rxe does where rdmx::verbs refuses. nullptr when refused.
ibv_qp* create_raw_qp(ibv_pd* pd, ibv_cq* cq, ibv_qp_type type, ibv_srq* srq = nullptr);

// Moves a and b to RTS, each connected to the other.
void connect_rc_pair(const TestDevice& dev, verbs::QueuePair& a, verbs::QueuePair& b,
                     const RcOptions& a_opts = {}, const RcOptions& b_opts = {});
// Moves a UD QP to RTS; both QPs of a UD pair.
void activate_ud(verbs::QueuePair& qp, const TestDevice& dev);
void activate_ud(QpPair& pair, const TestDevice& dev);

// Polls until `n` completions arrived or the timeout passed; returns what arrived.
std::vector<ibv_wc> poll_n(ibv_cq* cq, std::size_t n,
                           std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));
// Polls whatever is there now.
std::vector<ibv_wc> poll_all(ibv_cq* cq);

// Posts one signalled send of `length` bytes from buf at offset (RC: no AH).
void post_send(verbs::QueuePair& qp, Buffer& buf, std::size_t offset, std::uint32_t length,
               std::uint64_t wr_id, ibv_ah* ah = nullptr, std::uint32_t remote_qpn = 0);

std::string wc_status(const ibv_wc& wc);

}  // namespace rdmx::test

namespace rdmx::test {

// n receive WRs linked into one chain, WR i receiving into slot i of buf, wr_id first_wr_id + i.
struct RecvChain {
  std::vector<ibv_sge> sges;
  std::vector<ibv_recv_wr> wrs;
  ibv_recv_wr* head() { return wrs.empty() ? nullptr : wrs.data(); }
};
RecvChain make_recv_chain(Buffer& buf, std::size_t n, std::uint32_t slot_bytes,
                          std::uint64_t first_wr_id);

// A sender RC QP connected to a receiver RC QP that takes its receives from an SRQ. Separate
// CQs, so that the test can see which side a completion belongs to. Members in creation order.
struct SrqRig {
  static constexpr std::uint32_t kSlotBytes = 256;

  verbs::CompletionQueue send_cq;
  verbs::CompletionQueue recv_cq;
  verbs::SharedReceiveQueue srq;
  verbs::QueuePair sender;
  verbs::QueuePair receiver;
  Buffer sbuf;
  Buffer rbuf;

  // srq_wr: SRQ size requested; slots: receive buffer slots; sender_rnr_retry 0 makes a send
  // that finds the SRQ empty fail at once (IBV_WC_RNR_RETRY_EXC_ERR) instead of waiting.
  SrqRig(const TestDevice& dev, const verbs::ProtectionDomain& pd, std::uint32_t srq_wr,
         std::uint32_t slots, std::uint8_t sender_rnr_retry = 7);

  // Posts n signalled sends of 64 bytes; the payload's first 8 bytes hold wr_id.
  void send(std::size_t n, std::uint64_t first_wr_id);
  // Sends one more message and expects it to find the SRQ empty: the sender (connected with
  // rnr_retry 0) gets IBV_WC_RNR_RETRY_EXC_ERR and the receiver gets nothing.
  void expect_srq_empty();
};

}  // namespace rdmx::test
