// The per-transfer state machines of RDMA-write rendezvous, one for each side. Every change of
// state goes through transition(), which checks the move against the table below, logs it at
// verbose >= 2 with the state it leaves, and refuses (and always logs) a move the table does
// not allow, leaving the state as it was.
//
// Sender (one per large send):
//
//   kFree ──begin_send──> kWaitCts ──CTS──┬──> kWriting ──last write done──> kDone ──> kFree
//     ^        (RTS)         │   │        │      │   ^
//     └──── abort (RTS ──────┘   │        │      │   └── connection up ──┐
//           not posted)          │        │      │                       │
//                                │        ├──> kWaitConnection ──────────┘ (UD: on-demand RC)
//                                │        │      │
//                                │        └──> kCopying ──last fragment posted──> kDone
//                                │    (copy-mode CTS, no registration, no RC connection)
//                                │
//              peer failed, FIN, teardown: kFailed ──> kFree; from kWriting with writes still
//              in flight: kDraining (the registration is held until they retire) ──> kFailed
//
// Receiver (one per matched large receive):
//
//   kFree ──matched──> kWaitData ──write-with-imm (and, with a read share, ──> kDone ──> kFree
//     │  (CTS posted)    │    ^                     the reads' completions)
//     │                  │    └── CTS posted ──┐
//     └──matched, CTS ───┼──> kCtsPending ─────┘
//        not postable    │
//                        └──first of several fragments──> kCopying ──last fragment──> kDone
//
//              peer failed, FIN with an error, teardown: kFailed ──> kFree; from kWaitData
//              with reads still in flight: kDraining (the registration is held until they
//              retire) ──> kFailed
#pragma once

#include <cstdint>
#include <string_view>

namespace rdmx::rendezvous {

enum class SendState : std::uint8_t {
  kFree = 0,        // slot unused
  kWaitCts,         // RTS handed to the transport; waiting for the receiver's CTS
  kWaitConnection,  // CTS in hand, zero copy, the RC connection for writes is being set up
  kWriting,         // RDMA writes from the user's buffer posted or waiting for send-queue room
  kCopying,         // copy path: fragments through the eager channel
  kDraining,        // failed while writes were in flight: waits for them before releasing
  kDone,            // completed successfully (the request's completion has been queued)
  kFailed,          // completed with an error
};
inline constexpr int kSendStateCount = 8;

enum class RecvState : std::uint8_t {
  kFree = 0,    // slot unused
  kCtsPending,  // matched and registered; the CTS waits for send resources
  kWaitData,    // CTS sent; waiting for the write-with-imm (or the first fragment)
  kCopying,     // copy path: some fragments arrived, more to come
  kDraining,    // failed while its reads were in flight: waits for them before releasing
  kDone,        // completed (OK or truncated)
  kFailed,      // completed with an error
};
inline constexpr int kRecvStateCount = 7;

std::string_view to_string(SendState state) noexcept;
std::string_view to_string(RecvState state) noexcept;

// The transition tables.
bool allowed(SendState from, SendState to) noexcept;
bool allowed(RecvState from, RecvState to) noexcept;

// Where transitions are logged. The default sink writes "rdmx: <line>\n" to stderr.
struct TransitionLog {
  int verbose = 0;  // >= 2: every transition; refused ones are always logged
  void (*sink)(void* user, std::string_view line) = nullptr;
  void* user = nullptr;

  void write(std::string_view line) const noexcept;
};

// The one way a transfer changes state. `id` (the transfer's 32-bit name) and `peer` only label
// the log line. Returns false, and leaves `state` unchanged, when the move is not allowed.
bool transition(SendState& state, SendState to, std::uint32_t id, std::uint32_t peer,
                const TransitionLog& log) noexcept;
bool transition(RecvState& state, RecvState to, std::uint32_t id, std::uint32_t peer,
                const TransitionLog& log) noexcept;

}  // namespace rdmx::rendezvous
