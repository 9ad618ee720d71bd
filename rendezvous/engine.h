// RDMA-write rendezvous for messages at or above the rendezvous threshold: the protocol logic of
// both sides, driven by the transport through the hooks below. The engine never touches a QP:
// it asks the transport (the Transport interface) to post control messages, RDMA writes and
// copy-path fragments, so the whole protocol runs on the host against a simulated transport in
// the unit tests (tests/rndv/).
//
//   sender                                                 receiver
//   begin_send: register the source buffer (read-only
//   is fine: access 0, REMOTE_READ for a read share),
//   RtsBody for the transport,
//   which sends kRts in the peer's message order  ──RTS──> matched at once, later from the
//                                                          unexpected queue, or by mprobe+mrecv:
//                                                          on_rts_matched: register the receive
//                                                          buffer (LOCAL|REMOTE_WRITE), grant
//                                           <──CTS──       min(capacity, length)
//   on_cts: plan the writes (write_plan.h), post
//   up to `depth` of them from the user's buffer
//   straight into the receiver's; each completion
//   refills the window (on_write_completion)   ══writes══> (no completion at the receiver)
//   the last: RDMA_WRITE_WITH_IMM              ══imm═════> on_imm: one SRQ receive consumed;
//   its completion completes the send                      the receive completes (OK, or
//                                                          TRUNCATED with the true length)
//
// Read share (EngineConfig.read_percent, RC): the RTS also carries the sender's buffer (address,
// rkey for remote reads). The receiver of a message of min_read_split bytes or more keeps
// [0, offset) for itself and grants only [offset, granted) in a CTS with kCtsFlagRead:
//
//   on_rts_matched: CTS{offset, kCtsFlagRead}  ──CTS──>  on_cts: writes of [offset, granted),
//   then RDMA reads of [0, offset) from the               the last with imm, as above
//   sender's buffer into ours (planned like writes)
//   imm and the reads' completions, in either order:
//   the receive completes; once the reads are done ──FIN(status 0, kFinFlagReadDone)──>
//                                                         its writes done and this FIN: the send
//                                                         completes (its buffer is read no more)
//
// On a software device (rxe, siw) the sender's writes run in its system calls and the
// receiver's reads in the receiver's, so two CPUs move one message (measured: 1.9x the bandwidth
// of writes alone). A receive that fails with reads in flight waits for them (kDraining).
//
// Copy path (zero copy impossible): a registration refused (`ulimit -l`, unregisterable
// memory), or, on UD, no RC connection to write over (cap reached with every connection busy,
// connection failed). The receiver that cannot register answers a CTS with kCtsFlagCopy; a
// sender that cannot write sends the granted bytes as kRndvData fragments through the eager
// channel (post_fragment: copied into bounce buffers, reliable and ordered on RC and UD alike).
// The receiver completes when the granted bytes have all arrived; the sender when the last
// fragment is posted (its bytes are copied by then). Nothing crashes or hangs: a request either
// completes by one of the two paths or fails with an error code.
//
// Failures: a failed post or write, a peer declared dead, a FIN with an error, teardown. The
// request fails with the code; a sender with writes in flight keeps its registration until they
// have retired (kDraining), because the device may still read the buffer. The other side is told
// with a FIN when it can still be reached.
//
// Threads: one engine per worker, used from the worker's thread only, like the RegCache it uses.
// Allocation: transfers live in tables that grow in chunks on the slow path; a transfer in the
// steady state allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "protocol/wire.h"
#include "rendezvous/reg_cache.h"
#include "rendezvous/transfer_id.h"
#include "rendezvous/transfer_state.h"
#include "rendezvous/write_plan.h"

namespace rdmx::rendezvous {

// The transport's index for a peer (the same number in every hook).
using PeerIndex = std::uint32_t;

enum class PostResult : std::uint8_t {
  kPosted,      // accepted
  kNoResource,  // no send-queue room, descriptor or bounce buffer now: the engine retries from
                // progress()
  kFailed,      // cannot be posted (QP in error, peer unreachable): the transfer fails
};

// Whether RDMA writes to a peer can be posted.
enum class WriteConnection : std::uint8_t {
  kReady,        // an RC QP connected to the peer: post_write now
  kConnecting,   // being set up (UD: on demand): on_connection_ready/failed follows
  kUnavailable,  // none, and none coming: the transfer takes the copy path
};

// One RDMA write for the transport to post on the peer's RC QP.
struct WriteRequest {
  std::uint64_t token = 0;  // give back to on_write_completion (names transfer and write)
  const void* local_addr = nullptr;
  std::uint32_t lkey = 0;
  std::uint32_t length = 0;  // 0: a zero-length write (no SGE)
  std::uint64_t remote_addr = 0;
  std::uint32_t rkey = 0;
  bool with_imm = false;  // IBV_WR_RDMA_WRITE_WITH_IMM
  std::uint32_t imm = 0;  // host order: the transport posts to_imm(imm)
  bool signaled = false;  // ask for a completion (others retire with a later one)
};

// One RDMA read for the transport to post on the peer's RC QP (the receiver's read share):
// `length` bytes from the sender's buffer (remote_addr, rkey) into ours (local_addr, lkey).
struct ReadRequest {
  std::uint64_t token = 0;  // give back to on_read_completion (names transfer and read)
  void* local_addr = nullptr;
  std::uint32_t lkey = 0;
  std::uint32_t length = 0;
  std::uint64_t remote_addr = 0;
  std::uint32_t rkey = 0;
  bool signaled = false;  // ask for a completion (others retire with a later one)
};

// What the engine needs from the transport. The worker implements it; the tests simulate it.
class Transport {
 public:
  virtual ~Transport() = default;

  // Control messages to a peer over the eager channel (sequenced; reliable on RC and UD).
  virtual PostResult post_cts(PeerIndex peer, const protocol::CtsBody& body) = 0;
  virtual PostResult post_fin(PeerIndex peer, const protocol::FinBody& body) = 0;
  // Copy path: one kRndvData message with `length` bytes read from `data` (copied before the
  // call returns kPosted).
  virtual PostResult post_fragment(PeerIndex peer, const protocol::DataBody& body, const void* data,
                                   std::size_t length) = 0;
  // The largest `length` post_fragment takes for this peer (> 0).
  virtual std::size_t fragment_capacity(PeerIndex peer) = 0;

  // RDMA writes. A connection with transfers in flight (Engine::active_with) must not be
  // retired (rc_lru.h).
  virtual WriteConnection write_connection(PeerIndex peer) = 0;
  // May signal a write the engine did not ask to (its completion then simply arrives earlier),
  // but must signal the write that fills the send queue: after kNoResource, some completion must
  // come back to make room, or the transfer would wait for ever.
  virtual PostResult post_write(PeerIndex peer, const WriteRequest& write) = 0;
  // RDMA reads (only asked for when EngineConfig.read_percent is not 0), with the same rules.
  virtual PostResult post_read(PeerIndex peer, const ReadRequest& read) = 0;

  // The request given to begin_send/on_rts_matched is finished (exactly once per request; the
  // transport queues it for its callback, which never runs inside these hooks). `length`
  // (receives) is the message's length as sent, also when it was truncated.
  virtual void complete_send(void* request, int code) = 0;
  virtual void complete_recv(void* request, int code, std::uint64_t length) = 0;
};

struct EngineConfig {
  // The port's max_msg_sz: no single write is larger (8 MiB on rxe).
  std::uint32_t max_write = 8u << 20;
  // Writes in flight per transfer.
  std::uint32_t pipeline_depth = kDefaultPipelineDepth;
  // The receiver's read share: it reads this percentage of a granted message of at least
  // min_read_split bytes itself (RDMA reads of the RTS's buffer) while the sender writes the
  // rest. 0: the sender writes everything. Where the CPU is the NIC (rxe, siw) the reads run in
  // the receiver's context and the writes in the sender's, so the two halves move in parallel.
  // From 8 KiB (measured on rxe, osu_bw: 16 KiB 59-61 MB/s with it, 38 without).
  std::uint32_t read_percent = 0;
  std::uint64_t min_read_split = 8 * 1024;
  // State transitions and protocol errors; verbose >= 1 also reports copy-path fallbacks.
  TransitionLog log;
};

struct EngineStats {
  std::uint64_t sends = 0;            // rendezvous sends begun (RTS posted)
  std::uint64_t recvs = 0;            // rendezvous receives matched
  std::uint64_t zero_copy_bytes = 0;  // bytes sent by RDMA write straight from the user's buffer
  std::uint64_t copied_bytes = 0;     // bytes sent through the copy path (kRndvData)
  std::uint64_t writes = 0;           // RDMA writes posted
  std::uint64_t reads = 0;            // RDMA reads posted (the receiver's read share)
  std::uint64_t read_bytes = 0;       // bytes the receiver read (part of zero_copy_bytes)
  std::uint64_t copy_sends = 0;       // sends that took the copy path
  std::uint64_t reg_failures = 0;     // registrations refused (either side): copy path
  std::uint64_t truncated = 0;        // receives completed with RDMX_ERR_TRUNCATED
  std::uint64_t failed = 0;           // transfers failed (either side)
  std::uint64_t stale = 0;            // CTS/FIN/imm/fragments/completions for no live transfer
  std::uint64_t send_active = 0;      // transfers in flight now
  std::uint64_t recv_active = 0;
};

class Engine {
 public:
  // `transport` and `cache` must outlive the engine.
  Engine(Transport& transport, RegCache& cache, const EngineConfig& config);
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  ~Engine();

  // --- sender
  // A send of `length` bytes (>= the threshold) is about to post its RTS. Fills *rts; returns
  // the transfer's word (rts->sender_slot), or kNoTransfer when the table is full (then nothing
  // was taken: the transport reports RDMX_ERR_NO_RESOURCE or retries later).
  std::uint32_t begin_send(PeerIndex peer, void* request, const void* buffer, std::uint64_t length,
                           protocol::RtsBody* rts);
  // The RTS could not be posted after all (no resource): forget the transfer, untouched request.
  void abort_send(std::uint32_t sender);
  // kCts from `peer`.
  void on_cts(PeerIndex peer, const protocol::CtsBody& cts);
  // Completion of a posted write: the token of its WriteRequest and whether it succeeded.
  void on_write_completion(std::uint64_t token, bool ok);
  // The RC connection to `peer` is up / could not be made.
  void on_connection_ready(PeerIndex peer);
  void on_connection_failed(PeerIndex peer);

  // --- receiver
  // An RTS matched the receive `request` (buffer, capacity): grant, register, post the CTS.
  void on_rts_matched(PeerIndex peer, void* request, void* buffer, std::size_t capacity,
                      const protocol::RtsBody& rts);
  // Completion of a posted read: the token of its ReadRequest and whether it succeeded.
  void on_read_completion(std::uint64_t token, bool ok);
  // A write-with-imm consumed a receive: `imm` in host order (from_imm(wc.imm_data)).
  void on_imm(std::uint32_t imm);
  // kRndvData from `peer`.
  void on_fragment(PeerIndex peer, const protocol::DataBody& body, const void* data,
                   std::size_t length);

  // --- both sides
  void on_fin(PeerIndex peer, const protocol::FinBody& fin);
  // Fails every transfer with `peer` (the peer is unreachable) with `code`.
  void on_peer_failed(PeerIndex peer, int code);
  // Retries what waited for resources (CTS, writes, fragments, FINs). Returns the work done.
  int progress();
  bool has_pending() const noexcept { return !pending_.empty() || !fins_.empty(); }
  // Transfers in flight with `peer` (either side).
  std::uint32_t active_with(PeerIndex peer) const noexcept;

  // Teardown, before the QPs are destroyed: completes every request with `code` now (the
  // registrations of writes still in flight are kept until release_all()).
  void cancel_all(int code);
  // Teardown, after the QPs are destroyed and drained: drops every registration and transfer.
  void release_all() noexcept;

  const EngineStats& stats() const noexcept { return stats_; }
  const EngineConfig& config() const noexcept { return config_; }

  // The token of write (read) `index` of sender (receiver) transfer `word`: tests, logs.
  static constexpr std::uint64_t write_token(std::uint32_t word, std::uint32_t index) noexcept {
    return std::uint64_t{word} << 32 | index;
  }

 private:
  struct Send;
  struct Recv;
  template <class T>
  class Table;

  // sender
  void start_data(Send& t);
  void start_writes(Send& t);
  void start_copy(Send& t, const char* why);
  void pump_writes(Send& t);
  void pump_copy(Send& t);
  // A write's or fragment's post result: true when posted; else the send waits for resources
  // (listed) or has failed (RDMX_ERR_IO, the receiver told).
  bool sent(Send& t, PostResult r);
  void fail_send(Send& t, int code, bool tell_receiver);
  void finish_send(Send& t, int code);
  void finish_send_if_read(Send& t);  // writes done: complete unless a read share is pending
  void release_send(Send& t);  // drop the registration and the slot (from done, failed or wait_cts)
  // receiver
  bool post_cts(Recv& t);
  void pump_reads(Recv& t);
  void reads_done(Recv& t);
  void fail_recv(Recv& t, int code, bool tell_sender);
  void finish_recv(Recv& t, int code);
  // both
  void queue_fin(PeerIndex peer, const protocol::FinBody& fin);
  void list_send(Send& t);
  void list_recv(Recv& t);
  void note_active(PeerIndex peer, int delta);
  // A try_acquire() result: true when registered; else counts the failure and says why at
  // RDMX_VERBOSE >= 1, and the caller takes the copy path (`side`: "send" or "receive").
  bool registered(int error, const char* side);
  void log_line(const char* fmt, ...) const __attribute__((format(printf, 2, 3)));

  Transport& transport_;
  RegCache& cache_;
  EngineConfig config_;
  std::unique_ptr<Table<Send>> sends_;
  std::unique_ptr<Table<Recv>> recvs_;
  // Transfers waiting for resources: (true = send, word).
  std::vector<std::pair<bool, std::uint32_t>> pending_;
  std::vector<std::pair<PeerIndex, protocol::FinBody>> fins_;
  std::vector<std::uint32_t> active_by_peer_;
  EngineStats stats_;
};

}  // namespace rdmx::rendezvous
