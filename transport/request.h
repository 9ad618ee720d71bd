// The private layout of rdmx_request_t: caller-owned storage, so posting never allocates.
//
// One Request type for sends and receives. The receive side embeds the tag matcher's
// PostedRecv node; the send side carries what a queued send still needs (it reads the caller's
// buffer only when it is posted, so nothing is copied while it waits).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "protocol/tag_match.h"
#include "rdmx/rdmx.h"
#include "transport/state_moves.h"

namespace rdmx::transport {

struct Peer;
struct MsgDesc;
struct Request;

// The matcher's node inside a receive request, with the way back to the request.
struct RecvNode : protocol::PostedRecv {
  Request* owner = nullptr;
};

// kRma: a put or get (rma.cc) or a zero-copy send (rdmx_tag_send_zcopy), done when its work
// request completes.
enum class ReqType : std::uint8_t { kNone = 0, kSend = 1, kRecv = 2, kRma = 3 };

// A request's life. Every change goes through move_to() below, checked against kReqMoves, but
// one: an eager send without callback that leaves inside rdmx_tag_send is written straight as
// kDone (Worker::init_done_send), as init_request writes a new request straight as kIdle.
//
//   kIdle ──posted──> kActive ──────────────────────────┬──> kCompleting ──callbacks run──> kDone
//     ^                 │  ^                             │   (on the worker's completion list,
//     └──refused────────┤  │ its turn (sync send:        │    status final)
//      (never posted)   │  │ waits for its match-ack)    └──> kDone (no callback: at once)
//                       v  │                                  rdmx_request_test reports it
//                    kQueued ──failed (peer, teardown)──> kCompleting / kDone
//           (send waiting for its connection or for resources)
//
// kActive: a receive posted in the matcher or matched and receiving (rendezvous), a sync send
// waiting for its match-ack, a rendezvous send. A request in kDone is posted again through
// init_request, which starts it from kIdle.
enum class ReqState : std::uint8_t {
  kIdle = 0,  // never posted (zeroed storage)
  kQueued = 1,
  kActive = 2,
  kCompleting = 3,
  kDone = 4,
};

inline constexpr StateMoves<ReqState, 5> kReqMoves = {
    .machine = "request",
    .names = {"idle", "queued", "active", "completing", "done"},
    .next = {
        /* idle */ state_bit(ReqState::kActive),
        /* queued */ state_bit(ReqState::kActive) | state_bit(ReqState::kCompleting) |
            state_bit(ReqState::kDone),
        /* active */ state_bit(ReqState::kIdle) | state_bit(ReqState::kQueued) |
            state_bit(ReqState::kCompleting) | state_bit(ReqState::kDone),
        /* completing */ state_bit(ReqState::kDone),
        /* done */ 0,
    }};

inline constexpr std::uint32_t kRequestMagic = 0x52514d58;  // marks storage rdmx initialised

// Request::send_flags bit (above the public RDMX_SEND_* flags): the send goes by rendezvous.
inline constexpr std::uint16_t kSendRendezvous = 1u << 15;

struct Request {
  std::uint32_t magic;
  ReqType type;
  ReqState state;
  std::uint16_t send_flags;
  rdmx_status_t status;
  rdmx_callback_t callback;
  void* user_data;
  Request* next;  // completion list, or the peer's queue of pending sends
  // Every request rdmx still owns that is not on the completion list (posted receives, queued
  // sends, sync sends waiting for their match-ack): teardown fails them all.
  Request* active_prev;
  Request* active_next;
  // Receive.
  RecvNode recv;
  void* buffer;
  std::size_t capacity;
  // Send.
  Peer* peer;
  const void* send_buffer;
  std::uint32_t sync_slot;  // RDMX_SEND_SYNC: index into the thread's sync slots
  std::uint32_t rndv;       // rendezvous send: the engine's transfer word (0: none)
  std::uint32_t rma_desc;   // put, get, zero-copy send: the send descriptor of its WR
  std::uint16_t thread;
  bool active;  // linked in the worker's active list
};

static_assert(sizeof(Request) <= RDMX_REQUEST_SIZE, "Request must fit in rdmx_request_t");
static_assert(alignof(Request) <= alignof(rdmx_request_t));

// The one way a request changes state (a refused move is logged and changes nothing). The store
// releases: in MULTI mode another thread may read the state without the worker lock (state_of),
// and a request becomes done after its completion list was taken, outside the lock.
inline void move_to(Request* r, ReqState to) noexcept {
  ReqState now = std::atomic_ref<ReqState>(r->state).load(std::memory_order_relaxed);
  if (checked_move(now, to, kReqMoves, "request", reinterpret_cast<std::uintptr_t>(r))) {
    std::atomic_ref<ReqState>(r->state).store(to, std::memory_order_release);
  }
}

// A request's state as another thread may read it: rdmx_request_test, waits, cancel.
inline ReqState state_of(const Request* r) noexcept {
  return std::atomic_ref<ReqState>(const_cast<ReqState&>(r->state)).load(std::memory_order_acquire);
}

inline Request* to_request(rdmx_request_t* r) noexcept {
  return reinterpret_cast<Request*>(r);
}
inline const Request* to_request(const rdmx_request_t* r) noexcept {
  return reinterpret_cast<const Request*>(r);
}
inline rdmx_request_t* to_public(Request* r) noexcept {
  return reinterpret_cast<rdmx_request_t*>(r);
}

}  // namespace rdmx::transport
