// Test and debug hooks that are not part of the public C API: wr_id accounting of a live worker,
// the report of the last rdmx_worker_destroy in this process, and the means to reach failure
// paths a healthy run never takes (a hold on SRQ refills, raw messages, device events).
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "rdmx/rdmx.h"
#include "transport/worker_lock.h"

namespace rdmx::transport::debug {

struct WrIds {
  std::uint64_t recv_posted = 0;       // receive WRs posted (SRQs and control)
  std::uint64_t recv_completed = 0;    // receive completions polled (success or flush)
  std::uint64_t recv_reclaimed = 0;    // still in an SRQ when it was destroyed (no completion)
  std::uint64_t send_outstanding = 0;  // send WRs posted and not yet retired
  // Every wr_id posted and not yet accounted for: 0 after a clean destroy.
  std::uint64_t outstanding() const noexcept {
    return recv_posted - recv_completed - recv_reclaimed + send_outstanding;
  }
};

struct DestroyReport {
  bool valid = false;
  WrIds wr_ids;                    // after teardown
  std::uint64_t teardown_us = 0;   // wall time of rdmx_worker_destroy
  std::uint32_t qps = 0;           // QPs shut down
  std::uint32_t qps_last_wqe = 0;  // of which IBV_EVENT_QP_LAST_WQE_REACHED arrived
  std::uint32_t drain_timeouts = 0;
  std::uint32_t requests_failed = 0;  // active requests failed by the destroy
  bool flush_complete = false;        // every buffered send reached its peer before teardown
  std::uint32_t destroy_errors = 0;   // verbs destroy calls that failed
  std::uint64_t refused_moves = 0;    // state moves refused in this process so far (a bug)
};

WrIds wr_ids(const rdmx_worker_t* worker);

// The RDMA-read limits of the RC QPs to the peer with this uid, one per size class, as the
// device reports them (ibv_query_qp); empty when there is no such peer or no RC QP to it.
struct RcReadLimits {
  int max_rd_atomic = 0;       // reads we may have in flight
  int max_dest_rd_atomic = 0;  // reads the peer may have in flight to us
};
std::vector<RcReadLimits> rc_read_limits(const rdmx_worker_t* worker, std::uint64_t peer_uid);
// The path attributes of the RC QPs to the peer with this uid, one per size class, as the device
// reports them (ibv_query_qp): what the fabric settings (traffic_class, service_level,
// pkey_index, path_mtu, rc_timeout, rc_retry_cnt) became; empty when there is no RC QP to it.
struct RcPath {
  int traffic_class = 0;
  int sl = 0;
  bool is_global = false;
  int sgid_index = 0;
  int pkey_index = 0;
  int path_mtu = 0;  // bytes
  int timeout = 0;
  int retry_cnt = 0;
};
std::vector<RcPath> rc_paths(const rdmx_worker_t* worker, std::uint64_t peer_uid);
// One paragraph on stderr: queues, windows, pools and peers (for a test that timed out).
void dump(const rdmx_worker_t* worker);
DestroyReport last_destroy_report();
// While `hold` is true the worker reposts no receive buffer to its data SRQs, yet grants RC
// credits as if they were full: senders then meet empty SRQs (RNR NAKs), a state rdmx's credits
// otherwise never let happen. For tests of the RNR paths (rdmx_config_t.rc_rnr_retry).
void hold_srq_refills(rdmx_worker_t* worker, bool hold);
// Receive buffers posted now to the SRQ of size class `size_class` (0 small, 1 large).
std::uint32_t srq_posted(const rdmx_worker_t* worker, int size_class);

// Send contexts (thread mode multi: one per thread; transport/threads.cc). The calling thread's
// index (made on first use), or the error code (< 0) when it gets none.
int caller_send_context(rdmx_worker_t* worker);
// Per context, in index order: WRs posted with its index in the wr_id, their descriptors retired
// back to its pool, and the send completions routed to it by the wr_id's thread field.
struct SendContextCounts {
  std::uint64_t posted = 0;
  std::uint64_t retired = 0;
  std::uint64_t routed = 0;
};
std::vector<SendContextCounts> send_context_counts(rdmx_worker_t* worker);
// Thread mode multi: holds the worker lock while the returned lock lives (or its shared side, as
// an eager send does); the calls (not progress) waiting for it now; the progress calls that
// returned at once because such a call waited.
std::unique_lock<WorkerLock> hold_worker_lock(rdmx_worker_t* worker);
std::shared_lock<WorkerLock> hold_worker_lock_shared(rdmx_worker_t* worker);
int lock_waiters(const rdmx_worker_t* worker);
std::uint64_t progress_deferrals(const rdmx_worker_t* worker);
// Thread mode multi: the synchronous messages received beside the shared side whose match-ack
// could not leave then (e.g. no RC credits, a full UD window) and waits for the next progress
// call, arming or destroy (release_shared_taken). Call it holding the shared side
// (hold_worker_lock_shared): no descriptor is then unlinked or reused under the count. It takes
// no lock itself, since taking the shared side again while a writer waits would deadlock.
int owed_match_acks(const rdmx_worker_t* worker);
// Thread mode multi: the post lock of the peer with this uid (which must exist: found under the
// worker lock, and peers live as long as the worker) and the matcher's lock, for tests that hold
// one while another thread's send or receive waits for it (ShortLock::waits, the mt_*_lock_waits
// counters).
ShortLock& post_lock(rdmx_worker_t* worker, std::uint64_t peer_uid);
ShortLock& match_lock(rdmx_worker_t* worker);

// UD mode: sends a whole message as the peer will read it (header included) to the peer's
// small-class UD QP from this worker's own, so the peer takes it as coming from us. For tests of
// what a misbehaving peer can send. kAsIs: every byte as given, outside the reliable stream;
// kInStream: our endpoint index at the peer in src_ep and the stream's next sequence number plus
// the given seq in seq, without taking that number (a peer that accepted the message would then
// drop our next real one as a duplicate); kSequenced: src_ep, the next sequence number and our
// ack, in the reliable stream (resent until acked). false: not UD mode, no such connected peer,
// too long, or no room now (progress and retry).
enum class Raw { kAsIs, kInStream, kSequenced };
bool send_raw(rdmx_worker_t* worker, std::uint64_t peer_uid, const void* bytes, std::size_t length,
              Raw how);

// Hands the worker an asynchronous event as if the device had reported it (transport/faults.cc),
// on one of its objects: for the faults rxe cannot be made to report on demand.
enum class EventOn { kRecvCq, kSmallSrq, kCtrlQp, kPeerRcQp, kPort, kDevice };
// kPeerRcQp: the first RC QP to the peer with this uid (0 for the others). false: no such object.
bool inject_async_event(rdmx_worker_t* worker, ibv_event_type type, EventOn on,
                        std::uint64_t peer_uid = 0);

}  // namespace rdmx::transport::debug
