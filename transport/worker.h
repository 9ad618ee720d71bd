// The worker: one device context with its PD, CQs, SRQ pools, control QP and peers; the progress
// engine behind the C API (include/rdmx/rdmx.h).
//
// Its member functions live in files named for their role (the transport/README.md table says
// what each holds): setup.cc, teardown.cc, worker.cc (stats, test hooks), wireup.cc, send.cc,
// recv.cc, requests.cc, rndv.cc, liveness.cc, faults.cc, wakeup.cc; the channels' own in channel/
// (rc_send.cc, rc_ring.cc, ud_send.cc, ud_write_qp.cc; channel/channel.h says what a channel is);
// api.cc has the C functions.
//
// Threads (rdmx.h, "Threads"; threads.cc): SINGLE and SERIALIZED take no lock and have one send
// context. MULTI takes the worker lock around every call (progress only if it is free; an eager
// send that leaves at once or joins an open batch only its shared side and the peer's post lock,
// send_shared and send_request_shared; a receive that nothing or an unexpected eager message
// matches, a probe, an mprobe and a cancel its shared side and match_mu_, recv_shared,
// probe_shared and cancel_shared; the receive of an mprobed eager message its shared side,
// msg_recv_shared; a synchronous one's match-ack the peer's post lock too), runs callbacks after
// releasing it, and gives each calling thread a send context (ThreadCtx: its send descriptors and
// bounce buffers, its index in every wr_id it posts). Whichever thread polls a send completion
// routes it by the wr_id's thread field to the context that posted it.
#pragma once

#include <infiniband/verbs.h>
#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "eager/send_pool.h"
#include "eager/send_queue.h"
#include "eager/srq_pool.h"
#include "protocol/connect.h"
#include "protocol/sync_cookie.h"
#include "protocol/tag_match.h"
#include "protocol/wire.h"
#include "rdmx/rdmx.h"
#include "rendezvous/engine.h"
#include "rendezvous/rc_lru.h"
#include "rendezvous/reg_cache.h"
#include "transport/channel/channel.h"
#include "transport/clock.h"
#include "transport/config.h"
#include "transport/debug.h"
#include "transport/idle_backoff.h"
#include "transport/peer.h"
#include "transport/request.h"
#include "transport/wake_set.h"
#include "transport/worker_lock.h"
#include "verbs/async_event.h"
#include "verbs/context.h"
#include "verbs/cq.h"
#include "verbs/pd.h"
#include "verbs/qp.h"

struct rdmx_worker {
  rdmx::transport::Worker* impl;
};

namespace rdmx::transport {

// kConnect operations (protocol/connect.h).
namespace connect_op = protocol::connect_op;

// Pools by id (the id is in the wr_id slot of every receive).
inline constexpr std::uint8_t kPoolSmall = 0;
inline constexpr std::uint8_t kPoolLarge = 1;
inline constexpr std::uint8_t kPoolCtrl = 2;
inline constexpr int kNumPools = 3;
// Not a pool: a message read from a peer's eager ring (channel/rc_ring.cc); held or unexpected ones
// are copied out, the ring slot is cleared once the message is delivered.
inline constexpr std::uint8_t kPoolRing = 0xfe;

// RC eager rings (channel/rc_ring.cc): a peer gets one after this many messages in order (openib's
// eager_rdma_threshold was 16), and a progress call takes at most kRingPollBatch per ring.
inline constexpr std::uint32_t kRingOfferAfter = 16;
inline constexpr int kRingPollBatch = 16;
// A sleeper whose rings are being taken back (a writer has not answered kRingWithdraw yet) wakes
// this often to look at them (wakeup.cc): a ring write makes no completion, and the writer may not
// progress for long. A message written meanwhile waits about this long (plus the wake's own
// time); a writer that lives but never progresses costs the sleeper a wake per period.
inline constexpr std::uint64_t kRingWithdrawPollUs = 1000;

// Queue sizes (see README "Defaults").
inline constexpr std::uint32_t kRcSendDepth = 128;  // WRs per RC QP for messages
inline constexpr std::uint32_t kRcSendReserve = 2;  // + WRs for flushes and kicks
// RC credit window per peer: half the SRQ depth (less a refill batch) shared among the peers
// that may send to us (Worker::update_rc_credit_window), within bounds.
inline constexpr std::uint32_t kRcMinCredits = 1;
inline constexpr std::uint32_t kRcMaxCredits = 64;
inline constexpr std::uint32_t kUdSendDepth = 1024;   // WRs per UD data QP (shared by peers)
inline constexpr std::uint32_t kCtrlSendDepth = 256;  // WRs of the control QP
inline constexpr std::uint32_t kCtrlDepth = 64;       // control receive buffers
inline constexpr std::uint32_t kCtrlCapacity = 256;   // control message payload bytes
inline constexpr std::uint32_t kSignalEvery = 32;     // selective signalling period
inline constexpr std::uint32_t kSendDescs = 4096;     // send WRs in flight (SINGLE, SERIALIZED)
// MULTI: every context's descriptors fit in the send CQ, so a context has the largest power of
// two of descriptors that max_threads contexts fit in the device's CQ with, at most kSendDescs
// and at least kMinThreadDescs (below, max_threads is refused); it has a quarter of the bounce
// buffers (kSendSmallBuffers / kThreadBufferDiv...): contexts are made per thread, pinned memory
// with them.
inline constexpr std::uint32_t kMinThreadDescs = 256;
inline constexpr std::uint32_t kThreadBufferDiv = 4;
inline constexpr std::uint32_t kSendSmallBuffers = 1024;
inline constexpr std::uint32_t kSendLargeBuffers = 256;
inline constexpr std::uint32_t kSyncSlots = 4096;            // Ssends waiting per thread
inline constexpr std::size_t kRcOrderWindow = 512;           // early arrivals held per RC peer
inline constexpr std::size_t kUdWindow = 256;                // UD send window = reorder window
inline constexpr std::uint32_t kUdResendBurst = 16;          // UD messages resent per timer expiry
inline constexpr std::uint32_t kUdCwndInitial = 16;          // UD congestion window: start,
inline constexpr std::uint64_t kWatchdogPeriodUs = 100'000;  // RC send-progress check
inline constexpr std::uint64_t kStallKickUs = 300'000;       // RC QP without progress: kick it
// Liveness of quiet peers (liveness.cc, README "Peer failure"), T = peer_timeout_ms: a peer
// silent for T / kLiveProbeDiv while requests wait is probed; RC fails it when the probe write
// does not complete within T, UD when pings (one per T / kLiveProbeDiv) stay unanswered for
// kUdPingBoundFactor x T (the peer's progress must answer, so the bound is generous).
inline constexpr std::uint32_t kLiveProbeDiv = 4;
inline constexpr std::uint32_t kUdPingBoundFactor = 2;

inline constexpr std::uint32_t kUdCwndMin = 2;  // floor (halved on every timeout)
inline constexpr std::uint32_t kMaxPendingPerPeer = 1u << 16;
inline constexpr std::uint32_t kQkey = 0x52444d58;  // "RDMX"
inline constexpr int kPollBatch = 16;
// Async events (a read(2)) are read at most this often, except when an SRQ runs low.
inline constexpr std::uint64_t kAsyncEventPeriodUs = 1000;
// rdmx_request_wait's idle policy (idle_backoff.h): yield after 100 us of nothing, nap after
// 2 ms.
inline constexpr std::uint64_t kWaitYieldAfterUs = 100;
inline constexpr std::uint64_t kWaitNapAfterUs = 2000;
// rdmx_worker_idle: a turn more than this after the end of the last idle one is not a wait loop's
// next turn (a test between compute steps), and starts the count again. A turn of pml cm's wait
// loop took under 5 us in the guest (MTL_RDMX_SPIN_GAP_US), but a thread's CachedClock steps by
// up to a window (2^20 cycles) until it has measured the TSC's rate, and its corrections jump
// too: at 50 us, a new thread's 20 ms of idle turns in ci/test never yielded. A turn preempted
// past it restarts the count too: that only delays a yield or nap, never hastens one.
inline constexpr std::uint64_t kIdleLoopGapUs = 2000;
// Every send WR of every thread fits in the send CQ (plus one teardown marker at a time), so the
// CQ cannot overflow whatever completes in error.
inline constexpr std::uint32_t kSendCqSlack = 64;
static_assert(kSignalEvery < kRcSendDepth && kRcSendDepth <= kSendDescs);
static_assert(kUdWindow <= kSendDescs && kUdWindow <= protocol::kMaxSeqWindow);
static_assert(kRcOrderWindow <= protocol::kMaxSeqWindow);
static_assert(kRcMaxCredits <= kRcOrderWindow, "credits never exceed what the receiver can hold");
static_assert(kSyncSlots <= protocol::kSyncCookieSlots, "sync cookie: its slot field");
static_assert(kMaxThreads <= protocol::kSyncCookieThreads &&
                  kMaxThreads <= protocol::kWrMaxThread + 1,
              "a thread index fits the sync cookie and the wr_id");
static_assert(kSendDescs <= eager::SendQueue::kMaxDescs && kUdWindow <= kMinThreadDescs);

// A message removed from the receive path before its receive was posted (unexpected) or before
// its turn (early in sequence). Its bytes stay in the receive buffer when the pool can spare it,
// otherwise they are copied to the heap.
struct MsgDesc : protocol::UnexpectedMsg {
  Peer* peer = nullptr;
  protocol::MsgKind kind = protocol::MsgKind::kInvalid;
  protocol::Seq seq = 0;
  std::uint32_t aux = 0;
  std::uint32_t length = 0;
  // The kind's body (kRts: RtsBody, whose total_length probe reports), copied out.
  std::array<std::byte, protocol::kMaxBodySize> body{};
  const std::byte* data = nullptr;  // payload
  std::uint8_t pool = 0xff;         // receive pool holding the bytes, 0xff: heap copy
  std::uint32_t buf = 0;
  std::byte* heap = nullptr;
  MsgDesc* next_free = nullptr;
  // MULTI: a kEagerSync taken under the shared side whose match-ack could not be posted there;
  // release_shared_taken sends it.
  bool ack_owed = false;
};

struct SyncSlot {
  Request* request = nullptr;
  Peer* peer = nullptr;
  std::uint8_t generation = 0;
};

// Aligned so that two threads sending at once do not pass a line between them: each writes its
// own context's shared_sends (and reads its `send`) on the shared path.
struct alignas(64) ThreadCtx {
  std::uint16_t index = 0;
  pid_t owner = 0;           // MULTI: the thread (gettid) it serves
  std::uint64_t routed = 0;  // send completions routed here by their wr_id (tests)
  std::unique_ptr<eager::SendPool> send;
  // MULTI: sends of its thread that left under the shared side (mt_shared_sends), written by
  // that thread only, read under the whole lock.
  std::uint64_t shared_sends = 0;
  std::vector<SyncSlot> sync;
  std::vector<std::uint32_t> sync_free;
};

// The bytes of an eager send that leaves at once: `head_length` bytes at `head`, then `length` at
// `data`, one message of total() bytes at the receiver. `head` is empty but for
// rdmx_tag_inject_header (UCT's am_short: its header beside the caller's payload, copied once,
// straight into the channel's image of the message, and not into a descriptor first).
struct SendBytes {
  const void* head;
  std::size_t head_length;
  const void* data;
  std::size_t length;
  std::size_t total() const noexcept { return head_length + length; }
  // The data and flags rdmx_tag_inject(_header) accept (the head is the API's own).
  bool injectable(unsigned flags) const noexcept {
    return (data != nullptr || length == 0) && (flags & ~unsigned{RDMX_SEND_FLUSH}) == 0;
  }
};

// Outstanding-wr_id accounting for tests (transport/debug.h).
struct WrAccount {
  std::uint64_t recv_posted = 0;     // from the pools' counters
  std::uint64_t recv_completed = 0;  // receive completions polled
  std::uint64_t recv_reclaimed = 0;  // still in an SRQ when it was destroyed
  std::uint64_t send_outstanding = 0;
};

class Worker {
 public:
  // Creates a worker; on failure prints the cause and fix (stderr) and returns the code.
  static int create(const rdmx_config_t& config, Worker** out);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  rdmx_worker* handle() noexcept { return &handle_; }
  std::uint64_t uid() const noexcept { return uid_; }
  const std::uint8_t* address() const noexcept { return address_bytes_.data(); }
  std::size_t address_length() const noexcept { return address_bytes_.size(); }

  int ep_create(const void* address, std::size_t length, rdmx_ep** ep);
  // rdmx_worker_check_peer: decodes the blob, then the transports, then check_reach.
  int check_peer(const void* address, std::size_t length, std::string* why) const;
  // Why a worker with this address cannot be talked to for its transport (RC against UD), or
  // empty: one text for check_peer, rdmx_ep_create and a connection request (set_address).
  std::string transport_mismatch(const WorkerAddress& address) const;
  void ep_destroy(Peer& peer);

  int tag_send(Peer& peer, const void* buffer, std::size_t length, std::uint64_t tag,
               unsigned flags, Request* request, rdmx_callback_t callback, void* user_data);
  // rdmx_tag_inject_header, and rdmx_tag_inject with no head: its own overload, so that the
  // empty head folds away in the MTL's MPI_Send (11 instructions, callgrind). The caller has
  // built the head; the checks are the data's and the flags'. Inline, in send_now.h.
  int tag_inject(Peer& peer, const SendBytes& bytes, std::uint64_t tag, unsigned flags);
  int tag_inject(Peer& peer, const void* buffer, std::size_t length, std::uint64_t tag,
                 unsigned flags);
  // rdmx_tag_send_zcopy (the caller holds the lock in MULTI mode): the checks and send_now's
  // leave-now conditions, then post_rc_gather.
  int tag_send_zcopy(Peer& peer, const SendBytes& bytes, std::uint32_t lkey, std::uint64_t tag,
                     Request* request, rdmx_callback_t callback, void* user_data);
  // rdmx_tag_send and rdmx_tag_inject in MULTI mode (threads.cc): an eager send that leaves at
  // once (or, for rdmx_tag_send, joins an open batch) does so under the shared side of the worker
  // lock (send_shared, send_request_shared), the rest under the lock.
  bool multi() const noexcept { return multi_; }
  int tag_send_multi(Peer& peer, const void* buffer, std::size_t length, std::uint64_t tag,
                     unsigned flags, Request* request, rdmx_callback_t callback, void* user_data);
  int tag_inject_multi(Peer& peer, const SendBytes& bytes, std::uint64_t tag, unsigned flags);
  // rdmx_tag_recv in MULTI mode: a receive that nothing or an unexpected eager message (standard
  // or synchronous) matches, under the shared side of the worker lock and match_mu_ (recv_shared);
  // the rest under the lock.
  int tag_recv_multi(void* buffer, std::size_t length, std::uint64_t source, std::uint64_t tag,
                     std::uint64_t mask, Request* request, rdmx_callback_t callback,
                     void* user_data);
  int tag_recv(void* buffer, std::size_t length, std::uint64_t source, std::uint64_t tag,
               std::uint64_t mask, Request* request, rdmx_callback_t callback, void* user_data);
  int probe(std::uint64_t source, std::uint64_t tag, std::uint64_t mask, rdmx_status_t* status,
            rdmx_message_t** message);
  // MULTI: probe (MPI_Iprobe) and mprobe (MPI_Improbe, which takes the message out) under the
  // shared side of lock_ and match_mu_ (recv.cc): the peers are the exclusive holders', the
  // unexpected queue also recv_shared's.
  int probe_shared(std::uint64_t source, std::uint64_t tag, std::uint64_t mask,
                   rdmx_status_t* status, rdmx_message_t** message);
  int msg_recv(MsgDesc* message, void* buffer, std::size_t length, Request* request,
               rdmx_callback_t callback, void* user_data);
  // rdmx_tag_msg_recv in MULTI mode (threads.cc): an eager message under the shared side
  // (msg_recv_shared), a rendezvous under the lock.
  int msg_recv_multi(MsgDesc* message, void* buffer, std::size_t length, Request* request,
                     rdmx_callback_t callback, void* user_data);
  int cancel(Request* request);
  // A receive that is still posted (nothing matched it yet) taken out of the matcher: true. The
  // rule of cancel and cancel_shared.
  bool unpost_recv(Request* r);
  // MULTI: cancel under the shared side of lock_ and match_mu_ (recv.cc): only a posted receive
  // that nothing matched yet is cancelled. Among shared holders only cancels take posted
  // receives out of the matcher (receives only insert them); progress, failures and destroy,
  // which also do, are exclusive holders.
  int cancel_shared(Request* request);
  // rdmx_tag_recv_fail_any_source: the posted wildcard-source receives whose tag agrees with
  // `tag` in `mask` complete with `code` (liveness.cc). Returns how many.
  std::size_t fail_any_source_recvs(std::uint64_t tag, std::uint64_t mask, int code);
  // rdmx_put (get = false) and rdmx_get (rma.cc).
  int rma(Peer& peer, bool get, void* buffer, std::size_t length, std::uint32_t lkey,
          std::uint64_t remote_addr, std::uint32_t rkey, Request* request, rdmx_callback_t callback,
          void* user_data);
  ibv_pd* pd() const noexcept { return pd_ ? pd_->get() : nullptr; }
  void set_peer_failure_callback(rdmx_peer_failure_cb_t callback, void* arg) noexcept {
    peer_failure_cb_ = callback;
    peer_failure_arg_ = arg;
  }
  void set_recv_sink(rdmx_recv_sink_t sink, void* arg) noexcept {
    recv_sink_ = sink;
    recv_sink_arg_ = arg;
  }
  int progress();
  int wait(Request* request, rdmx_status_t* status, int timeout_ms);
  int poll(std::uint32_t max_polls, std::uint64_t spin_gap_us);  // rdmx_worker_poll
  // rdmx_worker_idle (IdleBackoff::kNever: never)
  void idle(int events, std::uint64_t yield_after_us, std::uint64_t nap_after_us) noexcept;
  // rdmx_worker_event_fd and rdmx_worker_arm (wakeup.cc).
  int event_fd() const noexcept { return wake_->fd(); }
  int arm();

  // --- threads (threads.cc). In MULTI mode every C API call holds the worker lock through a
  // Locked (api.cc), which also points tx_ at the caller's send context; in the other modes it
  // costs one test of a flag set at creation. Progress calls go through progress_any instead,
  // and sends and receives first try their shared paths (tag_send_multi, tag_recv_multi).
  class Locked {
   public:
    // own: the call posts for its caller (a send) and needs the caller's own context; other
    // calls of a thread that has none borrow context 0.
    explicit Locked(Worker& w, bool own = false) noexcept : w_(w) {
      if (w_.multi_) [[unlikely]] {
        rc_ = w_.lock_caller(own);
      }
    }
    ~Locked() {
      if (w_.multi_ && rc_ == RDMX_OK) [[unlikely]] {
        w_.lock_.unlock();
      }
    }
    Locked(const Locked&) = delete;
    Locked& operator=(const Locked&) = delete;
    // RDMX_ERR_TOO_MANY_THREADS or RDMX_ERR_NO_MEMORY: `own` and no context of its own.
    int error() const noexcept { return rc_; }

   private:
    Worker& w_;
    int rc_ = RDMX_OK;
  };
  // rdmx_worker_progress / rdmx_worker_poll in any mode: MULTI polls once if no other thread is
  // polling (else 0 at once) and runs the callbacks after unlocking. Inline: the other modes
  // call progress() directly, with no frame of their own for the MULTI path's lock.
  int progress_any() {
    if (!multi_) [[likely]] {
      return progress();
    }
    return progress_multi();
  }
  int poll_any(std::uint32_t max_polls, std::uint64_t spin_gap_us);
  int wait_on(Request* r, rdmx_status_t* status, int timeout_ms, CachedClock& clock);
  // rdmx_worker_destroy in MULTI mode: fails every request, lets waiting threads leave, deletes.
  static void destroy(Worker* w);
  // debug::caller_send_context, debug::send_context_counts, debug::hold_worker_lock,
  // debug::lock_waiters, debug::progress_deferrals, debug::owed_match_acks, debug::post_lock,
  // debug::match_lock.
  int caller_send_context();
  WorkerLock& lock_for_test() noexcept { return lock_; }
  ShortLock& post_lock_for_test(std::uint64_t peer_uid);
  ShortLock& match_lock_for_test() noexcept { return match_mu_; }
  int lock_waiters() const noexcept { return lock_wanted_.load(std::memory_order_relaxed); }
  std::uint64_t progress_deferrals() const noexcept {
    return progress_deferred_.load(std::memory_order_relaxed);
  }
  int owed_match_acks() const noexcept;
  std::vector<debug::SendContextCounts> send_context_counts();
  void stats(rdmx_stats_t* out) const;
  WrAccount wqp_account() const;
  void dump() const;
  std::vector<debug::RcReadLimits> rc_read_limits(std::uint64_t peer_uid) const;
  std::vector<debug::RcPath> rc_paths(std::uint64_t peer_uid) const;
  void hold_refills_for_test(bool hold) noexcept;
  std::uint32_t srq_posted(int size_class) const noexcept { return pools_[size_class]->posted(); }
  bool inject_async_event(ibv_event_type type, debug::EventOn on, std::uint64_t peer_uid);
  bool send_raw_for_test(std::uint64_t peer_uid, const void* bytes, std::size_t length,
                         debug::Raw how);

 private:
  explicit Worker(const rdmx_config_t& config);
  friend struct RcChannel;
  friend struct UdChannel;
  friend struct ShmChannel;
  template <class Ch>
  static ChannelOps channel_ops() noexcept;
  void choose_channel() noexcept;  // ops_ for ud_mode_ (setup.cc)
  void setup();                    // throws verbs::Error
  // The buffers setup registers, from the resolved sizes: one home for their parameters, used to
  // size them against the pinning limit and to make them.
  static eager::SrqPool::Params data_pool_params(std::uint8_t c, const Resolved& r) noexcept;
  static eager::SrqPool::Params ctrl_pool_params() noexcept;
  // Context 0 has the full bounce buffers; a MULTI thread's own context 1/kThreadBufferDiv.
  static eager::SendPool::Params send_pool_params(std::uint16_t thread, const Resolved& r,
                                                  std::uint32_t descs) noexcept;
  static std::size_t setup_pinned_bytes(const Resolved& r) noexcept;
  // Under a finite locked-memory limit (`ulimit -l`; Debian gives non-root users 8 MiB) lowers
  // res_.srq_depth until setup's buffers fit in 3/4 of it, or throws SetupError naming the limit,
  // the need and the fixes.
  void fit_pinned_memory(std::uint32_t mtu);
  void bring_up_ud(verbs::QueuePair& qp);  // RESET -> INIT -> RTR -> RTS
  // setup()'s steps, in order (setup.cc); each throws SetupError or verbs::Error.
  ibv_device_attr open_port();  // the device, its port, GID and P_Key entry
  void size_queues(const ibv_device_attr& dev);
  void size_send_contexts(const ibv_device_attr& dev);  // multi_, serial_, send_descs_
  void name_worker();                                   // uid, instance; the verbose line
  void create_queues();                                 // event channel, PD, CQs, receive pools
  // progress() without the polls: pools, async events and watchdogs (when `look_at_clock`, or a
  // pool is low), UD and connection timers, the flush list, rendezvous steps, write QPs. Also
  // what arming does before it decides (wakeup.cc). Returns the events it found.
  int housekeeping(bool look_at_clock);
  // Whether housekeeping(look_at_clock) would do anything (recv.cc, beside it): progress()
  // calls it only then, so that a call finding nothing (a waiter's spin) pays no call and frame.
  bool housekeeping_due(bool look_at_clock) const noexcept;
  // The part of that which no deadline brings: pools to look at, sends in the flush list,
  // rendezvous steps, write-QP work. Also what arming must not sleep on (needs_progress).
  bool housekeeping_queued() const noexcept {
    return pools_moved_ || !flush_list_.empty() || rndv_->has_pending() || !wqp_retired_.empty() ||
           !wqp_connect_list_.empty();
  }
  // progress_any's MULTI path (threads.cc): the lock, then progress and the callbacks.
  int progress_multi();
  // After housekeeping: work that progress calls must do and neither a completion nor the
  // wake timer would announce; and the earliest deadline for the timer (wakeup.cc).
  bool needs_progress() const noexcept;
  std::uint64_t next_deadline_us(std::uint64_t now_us) const noexcept;
  bool rings_written() const noexcept;  // the next slot of an open ring holds a message
  void create_send_contexts();
  // MULTI (threads.cc): the worker lock and the caller's context in tx_; with the lock held,
  // tx_ = the calling thread's context (cached, found, made, or taken over from an exited
  // thread), or RDMX_ERR_TOO_MANY_THREADS / RDMX_ERR_NO_MEMORY; a context made whole.
  int lock_caller(bool own) noexcept;
  // The index of the calling thread's own context, if it has one cached for this worker; else
  // kNoContext. Read without the lock (a thread-local and serial_): the context itself is read
  // under it.
  static constexpr int kNoContext = -1;
  int cached_ctx() const noexcept;
  // The shared side of lock_ for the *_shared calls (sends, receives, probes, cancels):
  // lock_shared_side takes it (a waiter counts in lock_wanted_), a SharedSide made right after
  // releases it. Nothing is written to the caller's stack before the lock orders this thread
  // after the last holder: that memory may have been a host's request that progress completed
  // (pml cm's blocking one), which the host hands back through atomics of its own that
  // ThreadSanitizer does not see.
  void lock_shared_side() noexcept;
  class SharedSide {
   public:
    explicit SharedSide(WorkerLock& lock) noexcept : lock_(lock) {}
    ~SharedSide() { lock_.unlock_shared(); }
    SharedSide(const SharedSide&) = delete;
    SharedSide& operator=(const SharedSide&) = delete;

   private:
    WorkerLock& lock_;
  };
  class SharedPost;  // a peer's post_mu and, over UD, ud_post_mu_ (send.cc)
  // send_now from context `ctx` (the caller's own) under the shared side of lock_, the peer's
  // post_mu and (UD) ud_post_mu_ (send.cc): RDMX_OK, RDMX_ERR_IO (the post failed), or
  // RDMX_ERR_NO_RESOURCE with nothing done (not now: the caller takes the lock).
  int send_shared(int ctx, Peer& peer, const SendBytes& bytes, std::uint64_t tag, unsigned flags);
  // rdmx_tag_send's standard eager send under the same locks (send.cc): it leaves at once, or,
  // inside a burst, joins the batch that an exclusive holder opened for the peer. true: the
  // request is done, or completing (with a callback: on shared_done_); false with nothing done.
  bool send_request_shared(int ctx, Peer& peer, const void* buffer, std::size_t length,
                           std::uint64_t tag, unsigned flags, Request* r, rdmx_callback_t callback,
                           void* user_data);
  // tag_recv for context `ctx` under the shared side of lock_ and match_mu_ (recv.cc): a receive
  // that nothing unexpected matches is posted; one that an unexpected eager message matches takes
  // it and completes (with a callback: on shared_done_). true, done so; false with nothing done
  // (a rendezvous matches, the source is new or gone: the caller takes the lock).
  bool recv_shared(int ctx, void* buffer, std::size_t length, std::uint64_t source,
                   std::uint64_t tag, std::uint64_t mask, Request* r, rdmx_callback_t callback,
                   void* user_data);
  // rdmx_tag_msg_recv of a message an mprobe took out, for context `ctx` under the shared side of
  // lock_ (recv.cc): an eager message is copied and completes (with a callback: on shared_done_)
  // as in recv_shared; false with nothing done for a rendezvous (or a message still queued, which
  // the locked path refuses).
  bool msg_recv_shared(int ctx, MsgDesc* d, void* buffer, std::size_t length, Request* r,
                       rdmx_callback_t callback, void* user_data);
  // An eager message (standard or synchronous) taken by context `ctx` under the shared side: its
  // bytes into r (init_recv'd), a synchronous one's match-ack posted (post_match_ack_shared), r
  // completed, its buffer onto shared_taken_.
  void take_eager_shared(int ctx, MsgDesc* d, Request* r);
  // try_match_ack under the shared side and the peer's locks (send.cc): false if the ack must
  // wait for an exclusive holder (not connected, acks queued before it, no credits or queue room,
  // a failed post), which then sends or queues it with send_match_ack.
  bool post_match_ack_shared(int ctx, Peer& peer, std::uint32_t cookie);
  // shared_taken_'s buffers back and its owed match-acks sent, under the whole lock.
  void release_shared_taken();
  int enter_caller(bool own) noexcept;
  void add_thread_ctx(pid_t owner);
  static std::uint64_t next_serial() noexcept;
  // The registry of live MULTI workers, through which an exiting thread frees its contexts.
  static void register_multi(Worker* w);
  static void unregister_multi(Worker* w);

 public:
  static void release_thread_ctx(Worker& w, std::uint16_t index, pid_t tid);  // at thread exit

 private:
  // The completion list (and dead peers to report) taken under the lock, run after it.
  struct Completions {
    Request* head = nullptr;
    std::vector<std::uint64_t> failed_uids;
    rdmx_peer_failure_cb_t failure_cb = nullptr;  // as set when taken (none while closing)
    void* failure_arg = nullptr;
  };
  Completions take_completions();
  int run_completions(Completions c);
  int run_completions() { return run_completions(take_completions()); }
  std::unique_ptr<verbs::QueuePair> make_ud_qp(verbs::SharedReceiveQueue& srq, std::uint32_t depth);
  void create_ud_qps();
  void create_segment();  // shared memory for node-local peers (channel/shm_send.cc)
  WorkerAddress local_address() const;
  std::uint64_t node_rnr_count() const;  // the port's node-wide RNR NAKs (0: not exposed)
  void teardown() noexcept;
  // teardown()'s steps, in order (teardown.cc).
  void fail_all_requests(debug::DestroyReport& report);
  std::uint32_t fail_active();  // every active request completes RDMX_ERR_CANCELED: how many
  void flush_before_close(debug::DestroyReport& report);
  void say_goodbye();
  std::vector<std::pair<verbs::QueuePair*, eager::SendQueue*>> all_qps();
  void shut_down_qps(debug::DestroyReport& report);
  void release_remote_access(debug::DestroyReport& report);
  void release_held_messages();
  void destroy_queues(debug::DestroyReport& report);
  void close_segment() noexcept;

  // --- peers and connections (wireup.cc)
  Peer* find_peer(std::uint64_t uid) noexcept;
  Peer& add_peer(std::uint64_t uid);
  int set_address(Peer& peer, const WorkerAddress& address);
  // Whether a peer can be reached (reach.h): RDMX_OK or RDMX_ERR_UNREACHABLE with *why naming
  // both hosts' devices and GIDs. Node-local shared-memory peers always pass.
  int check_reach(const WorkerAddress& address, std::string* why) const;
  // The peer's GID for a GRH: on InfiniBand none (zero: LID-routed, within the subnet
  // check_reach requires), on RoCE its GID.
  ibv_gid grh_dgid(const WorkerAddress& address) const noexcept;
  void create_rc_qps(Peer& peer);
  void connect_rc(Peer& peer, const std::uint32_t* qpn, const std::uint32_t* psn);
  void set_state(Peer& peer, PeerState to);
  void start_connect(Peer& peer);
  void arm_connect(Peer& peer, bool send_request);
  bool send_connect(Peer& peer, std::uint8_t op);
  bool send_disconnect(Peer& peer);
  bool post_ctrl(Peer& peer, const protocol::MsgHeader& header, const void* body,
                 std::size_t length);
  void on_ctrl_message(const std::byte* msg, std::size_t length, const ibv_wc& wc);
  void on_disconnect(const protocol::MsgHeader& header, const ibv_wc& wc);
  void on_handshake(const protocol::ConnectBody& body,
                    const WorkerAddress& from);  // kRequest, kReply
  void run_connect_timers(std::uint64_t now_us);
  void on_connected(Peer& peer);

  // --- send path (send.cc)
  // One outcome for every post, the rendezvous engine's hooks included.
  using PostResult = rendezvous::PostResult;
  // From the calling thread's send context (tx_), or from `pool`.
  PostResult post_message(Peer& peer, protocol::MsgKind kind, std::uint64_t tag, std::uint32_t aux,
                          const void* payload, std::size_t length) {
    return post_message(*tx_->send, peer, kind, tag, aux, nullptr, 0, payload, length);
  }
  // With the kind's body (body_length == protocol::body_size(kind)) between header and payload.
  PostResult post_message(Peer& peer, protocol::MsgKind kind, std::uint64_t tag, std::uint32_t aux,
                          const void* body, std::size_t body_length, const void* payload,
                          std::size_t length) {
    return post_message(*tx_->send, peer, kind, tag, aux, body, body_length, payload, length);
  }
  PostResult post_message(eager::SendPool& pool, Peer& peer, protocol::MsgKind kind,
                          std::uint64_t tag, std::uint32_t aux, const void* body,
                          std::size_t body_length, const void* payload, std::size_t length);
  // The header of a message to `peer`, before the channel stamps its sequence and acks.
  static protocol::MsgHeader message_header(const Peer& peer, protocol::MsgKind kind,
                                            std::uint64_t tag, std::uint32_t aux,
                                            std::size_t payload_length) noexcept;
  bool post_rc_flush(Peer& peer, int cls) { return post_rc_flush(*tx_->send, peer, cls); }
  bool post_rc_flush(eager::SendPool& pool, Peer& peer, int cls);
  void update_rc_credit_window() noexcept;
  protocol::Seq grant_credits(Peer& peer) noexcept;
  void maybe_grant(Peer& peer);
  // Some SRQ waits for its refill: a credit grant must wait for it too (maybe_grant).
  bool refill_wanted() const noexcept {
    if (hold_refills_for_test_) [[unlikely]] {
      return false;  // credits flow as if the SRQs were full: senders meet empty ones (RNR)
    }
    for (const auto& pool : pools_) {
      if (pool->wants_refill()) {
        return true;
      }
    }
    return false;
  }
  bool post_rc_ack(Peer& peer);
  bool header_only_wr(eager::SendPool& pool, const protocol::MsgHeader& h,
                      eager::SendQueue::Post* post, ibv_sge* sge, ibv_send_wr* wr) const;
  void on_rc_credits(Peer& peer, protocol::Seq limit);
  // Inlined into their channel's post (RcChannel::post, UdChannel::post), the one entry to them.
  [[gnu::always_inline]] PostResult post_rc(eager::SendPool& pool, Peer& peer,
                                            protocol::MsgHeader& header, const void* body,
                                            std::size_t body_length, const void* payload,
                                            std::size_t length);
  // post_rc's steps that post_rc_gather shares: room on the class's QP and in the peer's
  // credits; the sequence number, credit grant and ring ack every RC message carries (true when
  // it carries a grant that fell due: the caller clears grant_due once the message is posted).
  [[gnu::always_inline]] bool rc_admit(eager::SendPool& pool, Peer& peer, int cls);
  [[gnu::always_inline]] bool rc_stamp(Peer& peer, protocol::MsgHeader& header);
  // rdmx_tag_send_zcopy's post (rc_send.cc): header and head from a bounce buffer, the data
  // from the caller's registration (lkey); a signalled WR whose completion completes `r`.
  PostResult post_rc_gather(eager::SendPool& pool, Peer& peer, protocol::MsgHeader& header,
                            const SendBytes& bytes, std::uint32_t lkey, Request* r);
  [[gnu::always_inline]] PostResult post_ud(eager::SendPool& pool, Peer& peer,
                                            protocol::MsgHeader& header, const void* body,
                                            std::size_t body_length, const void* payload,
                                            std::size_t length);
  bool post_ud_ack(Peer& peer);
  // Posts `pool`'s UD bounce buffer `buf` of class `bcls` (header + payload, `total` bytes) to
  // the peer's class-`cls` QP: 0, or the errno of SendQueue::post. Inline in its callers, all
  // in ud_send.cc.
  [[gnu::always_inline]] int post_ud_buffer(eager::SendPool& pool, Peer& peer, int cls,
                                            std::uint8_t bcls, std::uint32_t buf, std::size_t total,
                                            bool want_signal);
  bool resend_ud(Peer& peer, std::uint32_t slot);
  // The eager path's steps are forced inline into their few callers (all in the same .cc): in an
  // emulated guest every call and return costs a translated-block lookup. true: posted (or failed),
  // false: must queue.
  [[gnu::always_inline]] bool start_send(Peer& peer, Request* request);
  // Whether a send of `length` bytes to `peer` goes by rendezvous.
  bool rendezvous_size(const Peer& peer, std::size_t length) const noexcept;
  // A standard eager send that leaves now (RDMX_OK, or RDMX_ERR_IO: its post failed), or
  // RDMX_ERR_NO_RESOURCE with nothing done. send_now.h says when, and defines it, inject_now,
  // rendezvous_size and wants_coalesce inline.
  [[gnu::always_inline]] int send_now(eager::SendPool& pool, Peer& peer, const SendBytes& bytes,
                                      std::uint64_t tag, unsigned flags);
  // Both tag_injects: the checks, then send_now.
  [[gnu::always_inline]] int inject_now(Peer& peer, const SendBytes& bytes, std::uint64_t tag,
                                        unsigned flags);
  // true: packed into the peer's batch and complete. queued: from the peer's pending FIFO.
  [[gnu::always_inline]] bool coalesce(Peer& peer, Request* request, bool queued);
  // Whether coalesce would take a send of `length` bytes with these Request::send_flags.
  bool wants_coalesce(const Peer& peer, std::size_t length, unsigned send_flags,
                      bool queued) const noexcept;
  bool flush_batch(Peer& peer);  // false: no resource now, the batch stays
  void queue_send(Peer& peer, Request* request);
  void flush_peer(Peer& peer);
  void flush_listed_peers();
  void list_for_flush(Peer& peer);
  // A synchronous message's match-ack: posted now from `pool` (or nothing to send: the peer
  // failed), true; false if it must queue (not connected, acks queued before it, no room).
  bool try_match_ack(eager::SendPool& pool, Peer& peer, std::uint32_t cookie);
  // try_match_ack from the caller's context, else queued on the peer for the flush.
  void send_match_ack(Peer& peer, std::uint32_t cookie);
  // `acks_now`: every owed ack goes out, due or not (arming: a sleeper has nothing to carry it).
  void run_ud_timers(std::uint64_t now_us, bool acks_now = false);
  void run_rc_watchdog(std::uint64_t now_us);
  // Inline in every UD message's path (ud_channel.h); enlist_ud_timer, out of line, adds the
  // peer to the list.
  [[gnu::always_inline]] void list_ud_timer(Peer& peer);
  void enlist_ud_timer(Peer& peer);
  // dead = false: the peer left cleanly (kDisconnect): only what is sent to it fails.
  void fail_peer(Peer& peer, int code, const char* why, bool dead = true);
  void fail_pending(Peer& peer, int code);
  std::uint64_t now_us() noexcept { return clock_.now_us(); }  // late by a few us at most

  // --- liveness of quiet peers and failure reporting (liveness.cc)
  void run_watchdogs(std::uint64_t now_us);  // every kWatchdogPeriodUs, from progress
  void run_liveness(std::uint64_t now_us);
  void on_ping(Peer& peer, std::uint8_t op);  // UD: protocol::connect_op::kPing /
                                              // protocol::connect_op::kPong from the control QP
  std::size_t fail_posted_recvs(const Peer* peer, int code);  // nullptr: every posted receive
  // The walk both take: each posted receive `fails(spec)` picks completes with `code`, its
  // status source `source_uid`.
  template <class Pick>
  std::size_t fail_posted_recvs_if(Pick fails, std::uint64_t source_uid, int code);
  void notify_peer_failures(const Completions& c);

  // --- receive path (recv.cc)
  int poll_cqs();  // both CQs (teardown)
  bool send_completions_expected() const noexcept;
  void on_drain_completion(const ibv_wc& wc);
  // The completion of a put or get's work request, `r` its request (rma.cc).
  void on_rma_completion(Request* r, const ibv_wc& wc);
  // Teardown: fails a put or get still posted; its work request's completion is then ignored.
  void cancel_rma(Request* r);
  // Up to kPollBatch completions of `cq`, each to on_wc.
  template <class OnWc>
  [[gnu::always_inline]] static int poll_batch(ibv_cq* cq, OnWc&& on_wc) {
    std::array<ibv_wc, kPollBatch> wcs;
    const int n = ibv_poll_cq(cq, kPollBatch, wcs.data());
    for (int i = 0; i < n; ++i) {
      on_wc(wcs[static_cast<std::size_t>(i)]);
    }
    return n > 0 ? n : 0;
  }
  // The generic completion paths over the channel type Ch (channel/channel.h), entered through
  // ops_: receives in recv.cc, sends in send.cc, each instantiated there for every channel type.
  template <class Ch>
  static int poll_recv(Worker& w, ibv_cq* cq);
  template <class Ch>
  static void on_recv(Worker& w, const ibv_wc& wc);
  template <class Ch>
  static int poll_send(Worker& w, ibv_cq* cq);
  template <class Ch>
  static void on_send(Worker& w, const ibv_wc& wc);
  template <class Ch>
  void on_recv_completion(const ibv_wc& wc);
  template <class Ch>
  void on_send_completion(const ibv_wc& wc);
  // Inlined into their few callers (see start_send).
  template <class Ch>
  [[gnu::always_inline]] void on_data_message(eager::SrqPool& pool, std::uint32_t buf,
                                              const ibv_wc& wc);
  [[gnu::always_inline]] void deliver(Peer& peer, MsgDesc* held, const protocol::MsgHeader& header,
                                      const std::byte* body, const std::byte* payload,
                                      std::uint8_t pool, std::uint32_t buf);
  // The receive an arriving message goes to (a posted one, else the sink's), or nullptr.
  [[gnu::always_inline]] Request* match_recv(const Peer& peer, std::uint64_t tag);
  Request* take_sink_recv();
  MsgDesc* keep_message(Peer& peer, const protocol::MsgHeader& header, const std::byte* payload,
                        std::uint8_t pool, std::uint32_t buf);
  void deliver_batch(Peer& peer, const protocol::MsgHeader& header, const std::byte* payload);
  void on_ud_ack(Peer& peer, protocol::Seq ack, std::uint64_t now);
  void release_ud_window(Peer& peer);  // a failed peer's unacked messages give their buffers back
  void release_message(MsgDesc* desc);
  MsgDesc* alloc_desc();
  void free_desc(MsgDesc* desc);
  // A matched eager message's bytes into the receive, and its status but the error, which it
  // returns (RDMX_OK, RDMX_ERR_TRUNCATED).
  [[gnu::always_inline]] int copy_out(Request* request, const Peer& peer, std::uint64_t tag,
                                      const std::byte* payload, std::size_t length) noexcept;
  [[gnu::always_inline]] void finish_recv(Request* request, Peer& peer, std::uint64_t tag,
                                          protocol::MsgKind kind, std::uint32_t aux,
                                          const std::byte* payload, std::size_t length);
  bool drop_for_test() noexcept;

  // --- faults the device reports (faults.cc)
  void handle_async_events();
  void on_async_event(const ibv_async_event& event);
  void check_port(std::uint64_t now_us);  // from run_watchdogs
  void fail_worker(int code, const std::string& why);
  // A send on a shared UD QP (control, or UD mode's data QPs) failed: the QP is in an error state.
  void note_ud_qp_error(const eager::SendQueue* queue) noexcept;
  void recover_ud_qps();  // from run_watchdogs

  // --- RC eager rings (channel/rc_ring.cc, protocol/ring.h)
  void offer_ring(Peer& peer);
  void on_ring_offer(Peer& peer, const protocol::RingBody& body);
  // A sleeper takes its rings back (rdmx_worker_arm): kRingWithdraw to each writer, which
  // stops and answers kRingReleased; no ring is offered after.
  void withdraw_rings();
  void on_ring_withdraw(Peer& peer);
  void on_ring_released(Peer& peer);
  void close_rx_ring(Peer& peer) noexcept;
  // The ring messages the peer is owed (offer, withdraw, release), in that order; false: one
  // waits for a send resource, and flush_peer retries.
  bool post_ring_messages(Peer& peer);
  int poll_rings();
  int poll_ring(Peer& peer);
  // An RC header's two acks for the reverse direction: our credit limit (kFlagAckValid) and how
  // many messages the peer took from its ring (kFlagRingAck). Every RC message and kAck, from
  // the SRQs or a ring, carries them.
  void on_rc_acks(Peer& peer, const protocol::MsgHeader& h) {
    if ((h.flags & protocol::kFlagAckValid) != 0) {
      on_rc_credits(peer, h.ack);
    }
    if ((h.flags & protocol::kFlagRingAck) != 0) {
      peer.rc.tx_ring.taken = protocol::ring_newer(peer.rc.tx_ring.taken, h.ring_ack);
    }
  }
  // Sending side of the ring ack: how far we have read the ring the peer writes into, put in an
  // outgoing RC header; once that header is posted, reported.
  static void stamp_ring_ack(const Peer& peer, protocol::MsgHeader& h) noexcept {
    if (peer.rc.rx_ring) {
      h.flags = static_cast<std::uint16_t>(h.flags | protocol::kFlagRingAck);
      h.ring_ack = peer.rc.rx_ring->taken();
    }
  }
  static void ring_ack_posted(Peer& peer, const protocol::MsgHeader& h) noexcept {
    if ((h.flags & protocol::kFlagRingAck) != 0) {
      peer.rc.rx_ring->reported(h.ring_ack);
    }
  }
  // One more message from the peer in order: offer it a ring once it has sent kRingOfferAfter.
  void count_for_ring(Peer& peer) {
    if (peer.rc.ring_countdown != 0 && --peer.rc.ring_countdown == 0) [[unlikely]] {
      offer_ring(peer);
    }
  }
  // A message that arrived in order, then those held behind it that are now in order.
  [[gnu::always_inline]] void deliver_in_order(Peer& peer, const protocol::MsgHeader& header,
                                               const std::byte* body, const std::byte* payload,
                                               std::uint8_t pool, std::uint32_t buf);

  // --- shared memory for node-local peers (channel/shm_send.cc, shm_segment.h)
  // set_address's choice: true when the peer is on this node and both have a segment; then
  // attaches the peer's segment (false and a message when it cannot: the peer fails).
  bool wants_shm(const WorkerAddress& a) const noexcept;
  int attach_shm(Peer& peer, const WorkerAddress& a);
  int poll_shm();  // our segment's rings, in progress before the CQs
  [[gnu::always_inline]] int poll_shm_ring(std::uint32_t ring);
  rendezvous::PostResult shm_write(Peer& peer, const rendezvous::WriteRequest& write);
  rendezvous::PostResult shm_read(Peer& peer, const rendezvous::ReadRequest& read);
  rendezvous::PostResult shm_copy_failed(Peer& peer, int error);
  int run_shm_done();  // the copies' completions for the engine, and the peers found gone

  // --- rendezvous (rndv.cc): the glue between the transport and rendezvous::Engine
  template <class Ch>
  class RndvHooks;  // the engine's rendezvous::Transport over channel type Ch
  void setup_rendezvous();
  // Posts the RTS of a rendezvous send (start_send's counterpart for large messages).
  bool start_rndv_send(Peer& peer, Request* request);
  // A receive matched an RTS (on arrival, from the unexpected queue, or by mrecv).
  void start_rndv_recv(Request* request, Peer& peer, std::uint64_t tag,
                       const protocol::RtsBody& rts);
  // kCts, kFin and kRndvData delivered in order.
  void on_rndv_message(Peer& peer, const protocol::MsgHeader& header, const std::byte* body,
                       const std::byte* payload);
  rendezvous::WriteConnection ud_write_connection(Peer& peer);  // UdChannel::write_connection
  // On the channel's write queue (nullptr: none ready).
  rendezvous::PostResult post_write(Peer& peer, eager::SendQueue* sq,
                                    const rendezvous::WriteRequest& write);
  rendezvous::PostResult post_read(Peer& peer, const rendezvous::ReadRequest& read);
  // UD: on-demand RC connections for writes.
  void start_wqp_connect(Peer& peer);
  bool create_wqp(Peer& peer);
  bool connect_wqp(Peer& peer, std::uint32_t remote_qpn, std::uint32_t remote_psn);
  bool send_wqp_ctrl(Peer& peer, std::uint8_t op, std::uint32_t qpn, std::uint32_t psn,
                     std::uint32_t for_qpn = 0);
  void on_wqp_ctrl(Peer& peer, std::uint8_t op, std::uint32_t qpn, std::uint32_t psn,
                   std::uint32_t for_qpn);
  void wqp_connect_failed(Peer& peer, const char* why);
  // Takes the peer's write QP out of service (destroyed from progress()); false while busy.
  bool retire_wqp(Peer& peer, bool tell_peer);
  bool wqp_busy(std::uint32_t peer_index) const noexcept;
  void run_wqp_timers(std::uint64_t now_us);
  void destroy_retired_qps();

  // --- requests
  void init_request(Request* r, ReqType type, rdmx_callback_t cb, void* user_data) {
    init_request(r, type, cb, user_data, tx_->index);
  }
  void init_request(Request* r, ReqType type, rdmx_callback_t cb, void* user_data,
                    std::uint16_t thread);
  // A receive of `length` bytes into `buffer`, matching `spec`, not yet posted to the matcher.
  void init_recv(Request* r, void* buffer, std::size_t length, const protocol::RecvSpec& spec,
                 rdmx_callback_t cb, void* user_data, std::uint16_t thread) {
    init_request(r, ReqType::kRecv, cb, user_data, thread);
    r->buffer = buffer;
    r->capacity = length;
    r->recv.spec = spec;
  }
  // A send without callback that left (or failed) inside tag_send: written as done in one go.
  void init_done_send(Request* r, std::size_t length, std::uint64_t tag, unsigned flags, int code,
                      std::uint16_t thread);
  void activate(Request* r) noexcept;
  void deactivate(Request* r) noexcept;
  // Inlined into every caller: most are per message (an eager send completes as it is posted).
  [[gnu::always_inline]] void complete(Request* r, int code);
  // complete() for a request of a shared holder's (status set, never activated): done at once, or
  // with a callback on shared_done_ for the next progress (posting calls run no callbacks).
  void complete_shared(Request* r) noexcept;

  rdmx_worker handle_{this};
  rdmx_config_t config_;
  std::string device_name_;
  Resolved res_;
  bool ud_mode_ = false;
  // The channel type's entry points (channel.h), chosen once at setup (choose_channel).
  ChannelOps ops_;
  std::uint64_t uid_ = 0;
  std::uint64_t instance_ = 0;
  std::uint8_t port_ = 1;
  // At most verbs::kMaxUsableGidIndex, checked once in open_port: what every address handle and
  // RC connection carries as its source GID index.
  std::uint8_t gid_index_ = 0;
  ibv_gid gid_{};
  bool gid_roce_v2_ = false;  // RoCE v2 GID: routed by IP, so the kernel's route is checked
  std::uint16_t pkey_ = 0;    // the P_Key at res_.pkey_index (for the verbose line)
  ibv_port_attr port_attr_{};
  std::uint32_t max_inline_ = 0;
  // RDMA reads this worker's RC QPs take in flight as responder (max_dest_rd_atomic), and
  // at most have in flight as requester (max_rd_atomic, also capped by the peer's): the
  // device's limit, at most rdmx_config_t.rc_max_rd_atomic.
  std::uint8_t rd_atomic_ = 1;
  // A software RDMA device (rxe, siw): the CPUs of the two processes move the bytes.
  bool software_device_ = false;
  std::uint64_t rng_ = 0;
  std::uint32_t drop_threshold_ = 0;  // ud_drop_rate scaled to 2^32

  // Verbs objects in creation order; teardown() destroys them in reverse, QPs first.
  std::optional<verbs::Context> ctx_;
  std::optional<verbs::AsyncEventReader> events_;
  std::optional<verbs::ProtectionDomain> pd_;
  // Completion events for rdmx_worker_arm (wakeup.cc); before the CQs, which use it.
  std::optional<verbs::CompletionChannel> cq_channel_;
  std::optional<verbs::CompletionQueue> send_cq_;
  std::optional<verbs::CompletionQueue> recv_cq_;
  std::optional<WakeSet> wake_;  // the channel, a deadline timer, the async fd (not verbs objects)
  std::array<std::unique_ptr<eager::SrqPool>, kNumPools> pools_;
  // The memory of every eager ring we give (channel/rc_ring.cc), registered on the first offer.
  std::unique_ptr<eager::RingSlab> ring_slab_;
  // Send contexts (one, or in MULTI mode one per thread, reserved to max_threads so that tx_
  // stays valid), the table of their pools that the send queues retire through, and the
  // context of the thread inside the worker now.
  std::vector<ThreadCtx> threads_;
  std::vector<eager::SendPool*> pool_table_;
  ThreadCtx* tx_ = nullptr;
  std::unique_ptr<verbs::QueuePair> ctrl_qp_;
  eager::SendQueue ctrl_sq_;
  std::array<std::unique_ptr<verbs::QueuePair>, kNumClasses> ud_qp_;
  std::array<eager::SendQueue, kNumClasses> ud_sq_;
  // Each UD QP's send WR, its constant fields set once (create_ud_qps): a post fills in only
  // the buffer, the destination and the flags (post_ud_buffer), instead of building a whole
  // WR each time. Serialized with ud_sq_[c]'s posts.
  std::array<ibv_sge, kNumClasses> ud_sge_{};
  std::array<ibv_send_wr, kNumClasses> ud_wr_{};
  // Rendezvous: the registration cache (its MRs go before the PD), the engine and, in UD mode,
  // the cap on on-demand RC connections.
  std::unique_ptr<rendezvous::RegCache> rcache_;
  std::unique_ptr<rendezvous::Transport> rndv_hooks_;  // a RndvHooks<channel type>
  std::unique_ptr<rendezvous::Engine> rndv_;
  std::unique_ptr<rendezvous::RcLru> wqp_lru_;
  std::vector<Peer*> wqp_connect_list_;
  std::uint64_t next_wqp_timer_us_ = 0;
  // Write QPs taken out of service, destroyed from progress() (never from inside a hook).
  std::vector<std::unique_ptr<verbs::QueuePair>> wqp_retired_;
  std::vector<std::unique_ptr<Peer>> peers_;
  std::unordered_map<std::uint64_t, std::uint32_t> peer_by_uid_;
  std::vector<Peer*> ring_peers_;  // peers we gave a ring (ring i of the slab), polled by progress
  std::uint32_t open_rings_ = 0;   // ... whose writer may still write (rx_ring_open)
  bool rings_withdrawn_ = false;   // a sleeper took its rings back: none is offered again
  // Shared memory: our segment (its rings are node-local peers' messages to us), the read side of
  // each claimed ring with the peer that writes it (bound at its first message), and the
  // rendezvous copies done whose completions the engine has not had yet (never from inside a
  // hook).
  std::unique_ptr<shm::Segment> shm_;
  struct ShmRx {
    shm::Consumer ring;
    Peer* peer = nullptr;
  };
  std::vector<ShmRx> shm_rx_;
  struct ShmDone {  // a copy done (a failed one is reported by its hook's result instead)
    std::uint64_t token;
    bool read;
  };
  std::vector<ShmDone> shm_done_;
  std::vector<Peer*> shm_gone_;  // a copy met ESRCH: failed by run_shm_done
  std::uint64_t node_id_ = 0;

  AddressBytes address_bytes_{};
  protocol::TagMatcher matcher_;

  Request* active_head_ = nullptr;
  // Completed requests whose callbacks have not run (FIFO).
  Request* done_head_ = nullptr;
  Request* done_tail_ = nullptr;
  // MULTI: sends, receives and cancels with a callback completed under the shared side
  // (send_request_shared, recv_shared, msg_recv_shared, cancel_shared), newest first. Shared
  // holders push at once (compare-and-swap); take_completions, under the whole lock, takes them
  // after done_head_'s.
  std::atomic<Request*> shared_done_{nullptr};
  // MULTI: unexpected messages taken by a receive under the shared side (recv_shared,
  // msg_recv_shared), newest first, linked by next_free; progress_multi, arm and destroy give their
  // buffers back (and send their owed match-acks) under the whole lock, which owns the pools and
  // the descriptor list (release_shared_taken).
  std::atomic<MsgDesc*> shared_taken_{nullptr};
  std::vector<Peer*> flush_list_;
  std::vector<Peer*> ud_timer_list_;
  std::vector<Peer*> connect_list_;
  // Earliest timer deadlines (protocol::kNoDeadline: none).
  std::uint64_t next_ud_timer_us_ = protocol::kNoDeadline;
  std::uint64_t next_connect_timer_us_ = protocol::kNoDeadline;
  std::uint32_t progress_calls_ = 0;
  CachedClock clock_;
  IdleBackoff idle_{IdleBackoff::kNever, IdleBackoff::kNever};  // rdmx_worker_idle's
  SpinPolls spin_;                                              // rdmx_worker_poll's
  std::uint64_t next_watchdog_us_ = 0;
  std::uint64_t next_async_us_ = 0;  // progress() reads async events again from then
  std::uint32_t rc_connected_peers_ = 0;
  std::uint32_t device_peers_ = 0;      // peers with an address whose channel is the device's
  std::uint32_t rc_credit_window_ = 0;  // update_rc_credit_window
  bool closing_ = false;
  // MULTI mode (threads.cc): set at creation; the worker lock; this worker's serial number (a
  // thread's cached context names it); threads inside rdmx_request_wait, which destroy lets go.
  bool multi_ = false;
  WorkerLock lock_;
  // UD's shared send state, for eager sends and match-acks under the shared side of lock_ (after
  // the peer's post_mu): the data QPs' send queues and WRs (ud_sq_, ud_wr_, ud_sge_), the timer
  // list and its deadline, and clock_.
  ShortLock ud_post_mu_;
  // The matcher (its posted receives and the taking and reading of unexpected messages) and the
  // active list, for receives, probes and cancels under the shared side of lock_ (recv_shared,
  // probe_shared, cancel_shared); exclusive holders (progress's matching) need no more.
  ShortLock match_mu_;
  // Threads waiting for lock_ in a call that is not progress (lock_caller): while there are any,
  // progress_multi leaves the lock to them (a poller that spins would otherwise take it back first
  // after each turn, and a blocking send would wait for its idle yield).
  std::atomic<int> lock_wanted_{0};
  std::atomic<std::uint64_t> stat_mt_lock_waits_{0};  // mt_lock_waits: by the waiter, as above
  // progress_multi calls that left it so: counted by the poller, on a line of its own so that the
  // poller's increments do not take the line of lock_ and lock_wanted_ from the waiters.
  alignas(64) std::atomic<std::uint64_t> progress_deferred_{0};
  std::uint64_t serial_ = 0;
  std::atomic<int> waiters_{0};
  std::atomic<bool> destroying_{false};
  bool warned_threads_ = false;            // the max_threads message, once
  bool ctx_alloc_failed_ = false;          // a context's registration failed: made no more
  std::uint32_t failed_early_ = 0;         // requests destroy() failed before teardown (its report)
  std::uint32_t send_descs_ = kSendDescs;  // per send context (size_send_contexts)
  bool hold_refills_for_test_ = false;     // debug::hold_srq_refills: the data classes' SRQs
  bool pools_moved_ = true;                // SrqPool::watch: progress looks at the pools
  int failed_code_ = 0;                    // fail_worker: what every request gets from now on
  std::uint64_t port_down_us_ = 0;         // IBV_EVENT_PORT_ERR seen, no PORT_ACTIVE since
  std::uint32_t ud_qps_in_error_ = 0;      // bit c: ud_qp_[c]; bit kNumClasses: ctrl_qp_
  // Liveness (liveness.cc): a probe found nothing since the last watchdog run (the application
  // waits in a probe loop), and dead peers whose callback has not run yet.
  std::atomic<bool> probe_waiting_{false};  // written by probes under the shared side
  rdmx_peer_failure_cb_t peer_failure_cb_ = nullptr;
  void* peer_failure_arg_ = nullptr;
  std::vector<std::uint64_t> failed_uids_;
  rdmx_recv_sink_t recv_sink_ = nullptr;  // rdmx_worker_set_recv_sink
  void* recv_sink_arg_ = nullptr;

  // Message descriptors: a free list grown in chunks on the slow path.
  static constexpr std::size_t kDescChunk = 256;
  std::vector<std::unique_ptr<MsgDesc[]>> desc_chunks_;
  MsgDesc* desc_free_ = nullptr;
  std::uint64_t heap_bytes_ = 0;

  // Counters (rdmx_stats_t).
  std::uint64_t stat_unexpected_ = 0;
  std::uint64_t stat_ud_retransmits_ = 0;
  std::uint64_t stat_ud_duplicates_ = 0;
  std::uint64_t stat_ud_dropped_test_ = 0;
  std::uint64_t stat_ud_qp_resets_ = 0;
  std::uint64_t stat_out_of_window_ = 0;
  std::uint64_t stat_rnr_exceeded_ = 0;       // own sends failed with IBV_WC_RNR_RETRY_EXC_ERR
  std::uint64_t stat_rc_kicks_ = 0;           // stalled RC QPs given a doorbell by the watchdog
  std::uint64_t stat_dropped_malformed_ = 0;  // failed validation or unknown src_ep
  std::uint64_t stat_dropped_foreign_ = 0;    // from a QP or peer we do not know
  std::uint64_t stat_limit_events_ctrl_ = 0;
  std::string node_rnr_path_;  // the port's node-wide RNR NAK counter (sysfs)
  std::uint64_t node_rnr_baseline_ = 0;
  std::uint64_t recv_completed_ = 0;
  std::uint64_t stat_rc_connects_ = 0;
  std::uint64_t stat_rc_retired_ = 0;
  std::uint64_t stat_coalesced_msgs_ = 0;
  std::uint64_t stat_coalesced_batches_ = 0;
  std::uint64_t stat_ring_recvs_ = 0;
  std::uint64_t stat_zcopy_sends_ = 0;
  std::uint64_t stat_shm_recvs_ = 0;
  std::uint64_t stat_cma_bytes_ = 0;
  // rdmx_worker_idle's; atomic since MULTI counts them outside the lock (a system call follows).
  std::atomic<std::uint64_t> stat_idle_yields_{0};
  std::atomic<std::uint64_t> stat_idle_naps_{0};
  std::uint64_t stat_spin_polls_ = 0;
  // MULTI (threads.cc): counted under the whole lock (mt_locked_sends, mt_progress_takes,
  // mt_whole_takes).
  std::uint64_t stat_mt_locked_sends_ = 0;
  std::uint64_t stat_mt_progress_takes_ = 0;
  std::uint64_t stat_mt_whole_takes_ = 0;
};

// --- requests: every send and receive passes through these, so they are inline.

inline void Worker::init_request(Request* r, ReqType type, rdmx_callback_t cb, void* user_data,
                                 std::uint16_t thread) {
  new (r) Request{};
  r->magic = kRequestMagic;
  r->type = type;
  move_to(r, ReqState::kActive);
  r->callback = cb;
  r->user_data = user_data;
  r->recv.owner = r;
  r->sync_slot = kNoIndex;
  r->rndv = 0;
  r->thread = thread;
  r->status.error = RDMX_INPROGRESS;
}

inline void Worker::init_done_send(Request* r, std::size_t length, std::uint64_t tag,
                                   unsigned flags, int code, std::uint16_t thread) {
  // Only what a done send shows (rdmx_request_test, wait, cancel); nothing reads the other
  // fields of a done send (not linked anywhere), and whichever way the storage is posted again
  // writes them anew.
  r->magic = kRequestMagic;
  r->type = ReqType::kSend;
  r->send_flags = static_cast<std::uint16_t>(flags);
  r->status = rdmx_status_t{.error = code, .tag = tag, .source = 0, .length = length};
  r->callback = nullptr;
  r->user_data = nullptr;
  r->peer = nullptr;
  r->sync_slot = kNoIndex;
  r->rndv = 0;
  r->thread = thread;
  r->active = false;
  std::atomic_ref<ReqState>(r->state).store(ReqState::kDone, std::memory_order_release);
}

inline void Worker::activate(Request* r) noexcept {
  if (r->active) {
    return;
  }
  r->active = true;
  r->active_prev = nullptr;
  r->active_next = active_head_;
  if (active_head_ != nullptr) {
    active_head_->active_prev = r;
  }
  active_head_ = r;
}

inline void Worker::deactivate(Request* r) noexcept {
  if (!r->active) {
    return;
  }
  r->active = false;
  if (r->active_prev != nullptr) {
    r->active_prev->active_next = r->active_next;
  } else {
    active_head_ = r->active_next;
  }
  if (r->active_next != nullptr) {
    r->active_next->active_prev = r->active_prev;
  }
  r->active_prev = r->active_next = nullptr;
}

inline void Worker::complete_shared(Request* r) noexcept {
  if (r->callback == nullptr) {
    move_to(r, ReqState::kDone);
    return;
  }
  move_to(r, ReqState::kCompleting);
  Request* head = shared_done_.load(std::memory_order_relaxed);
  do {
    r->next = head;
  } while (!shared_done_.compare_exchange_weak(head, r, std::memory_order_release,
                                               std::memory_order_relaxed));
}

inline void Worker::complete(Request* r, int code) {
  deactivate(r);
  r->status.error = code;
  // Nothing to call back: done at once, so a caller that tests the request right after posting
  // an eager send (the MTL's blocking send) needs no progress call to see it complete.
  if (r->callback == nullptr) {
    move_to(r, ReqState::kDone);
    return;
  }
  move_to(r, ReqState::kCompleting);
  r->next = nullptr;
  if (done_tail_ == nullptr) {
    done_head_ = r;
  } else {
    done_tail_->next = r;
  }
  done_tail_ = r;
}

// --- the send path's entry to the channel (chosen at setup: no mode test per message).

inline protocol::MsgHeader Worker::message_header(const Peer& peer, protocol::MsgKind kind,
                                                  std::uint64_t tag, std::uint32_t aux,
                                                  std::size_t payload_length) noexcept {
  protocol::MsgHeader h = protocol::make_header(kind);
  h.src_ep = peer.remote_index;
  h.payload_length = static_cast<std::uint32_t>(payload_length);
  h.tag = tag;
  h.aux = aux;
  return h;
}

inline Worker::PostResult Worker::post_message(eager::SendPool& pool, Peer& peer,
                                               protocol::MsgKind kind, std::uint64_t tag,
                                               std::uint32_t aux, const void* body,
                                               std::size_t body_length, const void* payload,
                                               std::size_t length) {
  protocol::MsgHeader h = message_header(peer, kind, tag, aux, length);
  return peer.post(*this, peer, pool, h, body, body_length, payload, length);
}

}  // namespace rdmx::transport
