// Queue pairs (ibv_create_qp / ibv_modify_qp / ibv_destroy_qp), RC and UD, and their teardown.
//
// Bring-up: create() -> to_init() -> to_rtr() -> to_rts(), each taking a plain struct; the remote
// side is a RemoteQp {qpn, psn, gid, lid} exchanged out of band.
//
// Teardown (shutdown()), the one sequence every owner uses:
//   1. stop posting: the checked post helpers refuse with ESHUTDOWN from here on; code posting
//      through the raw get() handle must have stopped before calling shutdown();
//   2. a QP with its own receive queue gets a marker receive (wr_id kDrainRecvWrId, no SGE) posted
//      behind everything else; receive completions are in order, so its return proves the RQ
//      is empty;
//   3. move to ERR (also when already there: on rxe the transition runs the flush); outstanding
//      WRs complete with IBV_WC_WR_FLUSH_ERR (or their real status). A QP still in RESET holds
//      no WRs and skips steps 2-6 (RESET->ERR is not a valid transition);
//   4. an SRQ-attached QP waits (bounded) for IBV_EVENT_QP_LAST_WQE_REACHED, after which the HCA
//      takes no more WRs from the SRQ for this QP. A device that never sends it (rxe) costs one
//      timeout, is logged and the sequence goes on;
//   5. a marker send (wr_id kDrainSendWrId) is posted in ERR: it is flushed after every earlier
//   send;
//   6. the CQs are drained until both markers are back and the CQs stayed empty for a short
//      quiet period (completions of SRQ receives that were in flight), bounded by a timeout;
//      every completion except the markers goes to the owner's callback, so each posted wr_id
//      comes back exactly once, completed or flushed;
//   7. ibv_destroy_qp (refused with EBUSY while attached to a multicast group), which also
//      releases the QP's registration on its CQs and SRQ.
// The owner returns credits / recycles buffers from the callback. WRs still sitting in an SRQ
// are not the QP's: they stay posted in the SRQ.
#pragma once

#include <infiniband/verbs.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "verbs/async_event.h"
#include "verbs/cq.h"
#include "verbs/explicit.h"
#include "verbs/pd.h"
#include "verbs/post.h"
#include "verbs/srq.h"
#include "verbs/use_count.h"

namespace rdmx::verbs {

// wr_ids of the teardown markers. The datapath never uses them: their top 4 bits are all ones,
// the reserved "invalid" kind of protocol/wr_id.h. Two values because an error completion's
// opcode is undefined, so on a shared CQ only the wr_id tells the send marker from the receive
// marker. One WR per queue is reserved for them at creation.
inline constexpr std::uint64_t kDrainSendWrId = 0xFFFF'FFFF'FFFF'FFFEULL;
inline constexpr std::uint64_t kDrainRecvWrId = 0xFFFF'FFFF'FFFF'FFFDULL;

// Capacities. create() asks the device for one more WR per queue for the teardown marker;
// QueuePair::caps() reports what the owner may use.
struct QpCaps {
  std::uint32_t max_send_wr = 0;
  std::uint32_t max_recv_wr = 0;  // ignored (0) for an SRQ-attached QP
  std::uint32_t max_send_sge = 1;
  std::uint32_t max_recv_sge = 1;
  std::uint32_t max_inline_data = 0;
};

struct QpConfig {
  ibv_qp_type type = IBV_QPT_RC;  // IBV_QPT_RC or IBV_QPT_UD
  CompletionQueue* send_cq = nullptr;
  CompletionQueue* recv_cq = nullptr;
  SharedReceiveQueue* srq = nullptr;  // optional
  QpCaps caps;
  bool sq_sig_all = false;
};

// The peer's side, exchanged out of band.
struct RemoteQp {
  std::uint32_t qpn = 0;
  std::uint32_t psn = 0;  // the peer's sq_psn: our expected receive PSN
  ibv_gid gid{};          // routed with a GRH when non-zero (always on RoCE)
  std::uint16_t lid = 0;  // InfiniBand only
};

struct RcInitAttr {
  std::uint8_t port_num = 1;
  std::uint16_t pkey_index = 0;
  unsigned access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
};

// Explicit<> members have no default constructor: the compiler enforces initialisation.
// NOLINTNEXTLINE(cppcoreguidelines-pro-type-member-init)
struct UdInitAttr {
  Explicit<std::uint32_t> qkey;
  std::uint8_t port_num = 1;
  std::uint16_t pkey_index = 0;
};

// NOLINTNEXTLINE(cppcoreguidelines-pro-type-member-init): Explicit<> members, as above
struct RcRtrAttr {
  RemoteQp remote;
  Explicit<ibv_mtu> path_mtu;
  Explicit<std::uint8_t> sgid_index;  // find_gid_index()
  // RNR NAK delay we ask senders to wait (IB encoding: 1 = 0.01 ms ... 31 = 491 ms, and
  // 0 = 655 ms, which turned short RNR waits into multi-second tails elsewhere).
  Explicit<std::uint8_t> min_rnr_timer;
  Explicit<std::uint8_t> max_dest_rd_atomic;  // RDMA reads/atomics the peer may have in flight
  std::uint8_t port_num = 1;
  std::uint8_t hop_limit = 64;
  std::uint8_t traffic_class = 0;
  std::uint8_t sl = 0;
};

// NOLINTNEXTLINE(cppcoreguidelines-pro-type-member-init): Explicit<> members, as above
struct RcRtsAttr {
  Explicit<std::uint32_t> sq_psn;        // our first send PSN; the peer gets it as RemoteQp::psn
  Explicit<std::uint8_t> timeout;        // ack timeout 4.096 us * 2^timeout; 0 waits for ever
  Explicit<std::uint8_t> retry_cnt;      // transport retries before IBV_WC_RETRY_EXC_ERR
  Explicit<std::uint8_t> max_rd_atomic;  // RDMA reads/atomics we may have in flight
  // RNR retries; 7 = infinite, required when the peer receives from an SRQ that can run dry
  // (otherwise the sender fails with IBV_WC_RNR_RETRY_EXC_ERR).
  std::uint8_t rnr_retry = 7;
};

// NOLINTNEXTLINE(cppcoreguidelines-pro-type-member-init): Explicit<> members, as above
struct UdRtsAttr {
  Explicit<std::uint32_t> sq_psn;
};

struct TeardownOptions {
  // Needed to wait for IBV_EVENT_QP_LAST_WQE_REACHED on an SRQ-attached QP; without it that
  // step is skipped (and reported).
  AsyncEventReader* events = nullptr;
  std::chrono::milliseconds last_wqe_timeout{200};
  std::chrono::milliseconds drain_timeout{2000};
  // After both markers, the CQs must stay empty this long (SRQ receives in flight).
  std::chrono::milliseconds quiet_period{20};
  // UD only: a UD send WR needs an address handle even to be flushed. Any AH of the QP's PD
  // enables the send marker; without one the send queue drain relies on the quiet period.
  ibv_ah* ud_marker_ah = nullptr;
};

struct TeardownReport {
  bool last_wqe_awaited = false;  // SRQ-attached and an event reader was given
  bool last_wqe_reached = false;  // IBV_EVENT_QP_LAST_WQE_REACHED arrived in time
  std::chrono::microseconds last_wqe_wait{0};
  bool send_marker_posted = false;
  bool send_marker_returned = false;
  bool recv_marker_posted = false;
  bool recv_marker_returned = false;
  bool drain_timed_out = false;
  std::size_t completions = 0;  // handed to the callback
  std::size_t flushed = 0;      // of which IBV_WC_WR_FLUSH_ERR
  std::size_t failed = 0;       // of which another error status
  int modify_error = 0;         // ibv_modify_qp(ERR) result
  int destroy_error = 0;        // 0 when the QP was destroyed
};

// Called for every completion drained during teardown (markers excepted). The CQ may be
// shared: completions of other QPs come through too; dispatch on wc.qp_num.
using CompletionCallback = std::function<void(const ibv_wc&)>;

class QueuePair {
 public:
  // Checks the request against the device limits (EINVAL naming the limit) and that the CQs
  // exist; registers the QP as a user of its CQs and SRQ.
  static QueuePair create(const ProtectionDomain& pd, const QpConfig& config);

  QueuePair(QueuePair&& other) noexcept;
  QueuePair& operator=(QueuePair&& other) noexcept;
  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;
  // Destroys without draining (logging failures). Owners that care about their wr_ids call
  // shutdown() first.
  ~QueuePair();

  ibv_qp* get() const noexcept { return qp_; }
  std::uint32_t qp_num() const noexcept { return qp_->qp_num; }
  ibv_qp_type type() const noexcept { return qp_->qp_type; }
  bool has_srq() const noexcept { return qp_->srq != nullptr; }
  // What the owner may use: granted by the device, minus the teardown marker's reserved WRs.
  const QpCaps& caps() const noexcept { return caps_; }
  // State as last set through this wrapper; the HCA may have moved it to ERR since.
  ibv_qp_state state() const noexcept { return state_; }
  ibv_qp_state query_state() const;        // ibv_query_qp
  ibv_qp_attr query(int attr_mask) const;  // ibv_query_qp: the fields attr_mask names

  void to_init(const RcInitAttr& attr);
  void to_init(const UdInitAttr& attr);
  void to_rtr(const RcRtrAttr& attr);
  void to_rtr();  // UD: no attributes
  void to_rts(const RcRtsAttr& attr);
  void to_rts(const UdRtsAttr& attr);
  void to_error();
  void to_reset();         // from any state; the WRs still queued are discarded without completions
  void to_rts_from_sqe();  // a UD QP in SQE (a send error) back to RTS

  // Checked posts (post.h); ESHUTDOWN once shutdown() started.
  ChainPostResult post_send(ibv_send_wr* chain) noexcept;
  ChainPostResult post_recv(ibv_recv_wr* chain) noexcept;

  // UD only. ibv_destroy_qp "fails if the QP is attached to a multicast group": tracked here.
  void attach_mcast(const ibv_gid& gid, std::uint16_t lid);
  void detach_mcast(const ibv_gid& gid, std::uint16_t lid);
  std::size_t mcast_groups() const noexcept { return mcast_.size(); }

  // The teardown sequence above. Never throws for verb failures (they are reported);
  // exceptions from the callback propagate.
  TeardownReport shutdown(const CompletionCallback& on_completion,
                          const TeardownOptions& options = {});

  // ibv_destroy_qp now, without draining. EBUSY (without calling the verb) while attached to a
  // multicast group. On success releases the CQ and SRQ registrations.
  [[nodiscard]] int destroy() noexcept;

 private:
  struct Mcast {
    ibv_gid gid;
    std::uint16_t lid;
  };

  QueuePair() = default;
  void modify(ibv_qp_attr& attr, int mask, ibv_qp_state to, const char* what);
  // RESET -> INIT on either transport: `attr`/`mask` carry what RC (access flags) or UD (Q_Key)
  // adds to the P_Key index and port both need.
  void to_init(ibv_qp_attr& attr, int mask, std::uint16_t pkey_index, std::uint8_t port_num);

  // Creation order: the registrations are taken before the QP exists and released after it
  // is gone.
  UseRef send_cq_use_;
  UseRef recv_cq_use_;
  UseRef srq_use_;
  ibv_qp* qp_ = nullptr;
  QpCaps caps_;
  ibv_qp_state state_ = IBV_QPS_RESET;
  bool closing_ = false;
  std::vector<Mcast> mcast_;
};

}  // namespace rdmx::verbs
