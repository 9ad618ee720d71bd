// The pure parts of rendezvous: transfer ids (immediate data), the write planner and pipeline,
// the state machines and the RC connection cap.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "rendezvous/rc_lru.h"
#include "rendezvous/transfer_id.h"
#include "rendezvous/transfer_state.h"
#include "rendezvous/write_plan.h"

namespace rdmx::rendezvous {
namespace {

constexpr std::uint32_t kMiB = 1u << 20;
constexpr std::uint32_t kRxeMaxMsg = 8 * kMiB;  // rxe's max_msg_sz

// --- transfer ids ---------------------------------------------------------------------------

TEST(TransferId, RoundTripsEveryFieldAtItsLimits) {
  for (const std::uint32_t slot : {0u, 1u, 12345u, kTransferSlotMask}) {
    for (const std::uint16_t gen : {std::uint16_t{1}, std::uint16_t{77},
                                    static_cast<std::uint16_t>(kTransferGenerationMask)}) {
      const TransferId id{.slot = slot, .generation = gen};
      const std::uint32_t w = encode_transfer(id);
      EXPECT_TRUE(is_valid_transfer(w));
      EXPECT_EQ(decode_transfer(w), id);
    }
  }
}

TEST(TransferId, LayoutIsGenerationAboveSlot) {
  EXPECT_EQ(encode_transfer({.slot = 5, .generation = 3}), (3u << 20) | 5u);
  EXPECT_EQ(encode_transfer({.slot = kTransferSlotMask, .generation = 1}), (1u << 20) | 0xfffffu);
}

TEST(TransferId, ZeroNeverNamesATransfer) {
  EXPECT_FALSE(is_valid_transfer(kNoTransfer));
  EXPECT_FALSE(is_valid_transfer(0x000fffff));  // any slot with generation 0
  std::uint16_t g = 1;
  for (std::uint32_t i = 0; i < 3 * (kTransferGenerationMask + 1); ++i) {
    g = next_transfer_generation(g);
    ASSERT_NE(g, 0) << "after " << i << " steps";
    ASSERT_LE(g, kTransferGenerationMask);
  }
  EXPECT_EQ(next_transfer_generation(static_cast<std::uint16_t>(kTransferGenerationMask)), 1);
}

TEST(TransferId, ImmediateIsBigEndianOnTheWire) {
  const std::uint32_t w = 0x12345678;
  const std::uint32_t imm = to_imm(w);
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(&imm);
  EXPECT_EQ(bytes[0], 0x12);
  EXPECT_EQ(bytes[3], 0x78);
  EXPECT_EQ(from_imm(imm), w);
}

// --- write planner --------------------------------------------------------------------------

// Checks the invariants every plan must hold and returns it.
std::vector<PlannedWrite> checked_plan(std::uint64_t length, std::uint32_t max_write,
                                       std::uint32_t depth) {
  const auto plan = plan_writes(length, max_write, depth);
  EXPECT_FALSE(plan.empty());
  std::uint64_t next = 0;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    const PlannedWrite& w = plan[i];
    EXPECT_EQ(w.index, i);
    EXPECT_EQ(w.offset, next) << "writes must tile the buffer without gaps or overlaps";
    EXPECT_LE(w.length, max_write);
    if (length != 0) {
      EXPECT_GT(w.length, 0u) << "no empty write in a non-empty plan";
    }
    EXPECT_EQ(w.with_imm, i + 1 == plan.size()) << "exactly the last write carries the imm";
    if (i + 1 == plan.size()) {
      EXPECT_TRUE(w.signaled) << "the sender completes on the last write's completion";
    }
    next += w.length;
  }
  EXPECT_EQ(next, length);
  return plan;
}

TEST(WritePlan, SizesAroundTheDeviceLimit) {
  struct Case {
    std::uint64_t length;
    std::size_t writes;
    std::uint32_t last;
  };
  const std::vector<Case> cases = {
      {8193, 1, 8193},
      {kMiB, 1, kMiB},
      {kRxeMaxMsg - 1, 1, kRxeMaxMsg - 1},
      {kRxeMaxMsg, 1, kRxeMaxMsg},
      {kRxeMaxMsg + 1, 2, 1},
      {64ull * kMiB, 8, kRxeMaxMsg},
      {1ull << 30, 128, kRxeMaxMsg},
      {(1ull << 30) + 3, 129, 3},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("length " + std::to_string(c.length));
    const auto plan = checked_plan(c.length, kRxeMaxMsg, kDefaultPipelineDepth);
    EXPECT_EQ(plan.size(), c.writes);
    EXPECT_EQ(plan.back().length, c.last);
  }
}

TEST(WritePlan, ZeroBytesIsOneEmptyWriteWithImm) {
  const auto plan = checked_plan(0, kRxeMaxMsg, 4);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].length, 0u);
  EXPECT_TRUE(plan[0].with_imm);
}

TEST(WritePlan, SignalsEveryHalfWindow) {
  // depth 4: signal period 2; writes 1, 3, 5 and the last (6) are signalled.
  const auto plan = checked_plan(7 * 100, 100, 4);
  std::vector<bool> sig;
  for (const auto& w : plan) {
    sig.push_back(w.signaled);
  }
  EXPECT_EQ(sig, (std::vector<bool>{false, true, false, true, false, true, true}));
  // depth 1 or 2: every write is signalled (a window of one must hear of every write).
  for (const std::uint32_t depth : {1u, 2u, 3u}) {
    for (const auto& w : checked_plan(5 * 100, 100, depth)) {
      EXPECT_TRUE(w.signaled) << "depth " << depth;
    }
  }
}

TEST(WritePlan, DegenerateParametersAreClamped) {
  const WritePlan p(10, 0, 0);
  EXPECT_EQ(p.max_write(), 1u);
  EXPECT_EQ(p.depth(), 1u);
  EXPECT_EQ(p.count(), 10u);
  // More than 2^32 - 1 writes would not fit the write index: max_write grows instead.
  const WritePlan huge(std::uint64_t{1} << 40, 1, 4);
  EXPECT_GE(huge.max_write(), 256u);
  EXPECT_LE(std::uint64_t{huge.count()} * huge.max_write(),
            (std::uint64_t{1} << 40) + huge.max_write());
  EXPECT_EQ(huge.at(huge.count() - 1).offset + huge.at(huge.count() - 1).length,
            std::uint64_t{1} << 40);
}

TEST(WritePipeline, KeepsAtMostDepthInFlightAndRefillsOnCompletions) {
  WritePipeline pipe(WritePlan(10 * 100, 100, 4));
  std::vector<std::uint32_t> posted;
  while (pipe.can_post()) {
    posted.push_back(pipe.next().index);
    pipe.on_posted();
  }
  EXPECT_EQ(posted, (std::vector<std::uint32_t>{0, 1, 2, 3}));
  EXPECT_EQ(pipe.in_flight(), 4u);
  // Write 1 is signalled: its completion retires 0 and 1.
  EXPECT_TRUE(pipe.on_completion(1));
  EXPECT_EQ(pipe.acked(), 2u);
  EXPECT_EQ(pipe.acked_bytes(), 200u);
  EXPECT_TRUE(pipe.can_post());
  // A completion for a write never posted is refused and changes nothing.
  EXPECT_FALSE(pipe.on_completion(7));
  EXPECT_EQ(pipe.acked(), 2u);
  // A stale (older) completion is harmless.
  EXPECT_TRUE(pipe.on_completion(0));
  EXPECT_EQ(pipe.acked(), 2u);
  while (!pipe.done()) {
    while (pipe.can_post()) {
      pipe.on_posted();
    }
    ASSERT_LE(pipe.in_flight(), 4u);
    ASSERT_TRUE(pipe.on_completion(pipe.posted() - 1));
  }
  EXPECT_TRUE(pipe.all_posted());
  EXPECT_EQ(pipe.acked_bytes(), 1000u);
}

// --- state machines -------------------------------------------------------------------------

struct Captured {
  std::vector<std::string> lines;
  TransitionLog log(int verbose) {
    return TransitionLog{
        .verbose = verbose,
        .sink = [](void* u,
                   std::string_view l) { static_cast<Captured*>(u)->lines.emplace_back(l); },
        .user = this};
  }
};

TEST(TransferState, NamesAreDistinct) {
  for (int a = 0; a < kSendStateCount; ++a) {
    EXPECT_NE(to_string(static_cast<SendState>(a)), "unknown");
    for (int b = 0; b < a; ++b) {
      EXPECT_NE(to_string(static_cast<SendState>(a)), to_string(static_cast<SendState>(b)));
    }
  }
  for (int a = 0; a < kRecvStateCount; ++a) {
    EXPECT_NE(to_string(static_cast<RecvState>(a)), "unknown");
    for (int b = 0; b < a; ++b) {
      EXPECT_NE(to_string(static_cast<RecvState>(a)), to_string(static_cast<RecvState>(b)));
    }
  }
  EXPECT_EQ(to_string(static_cast<SendState>(99)), "unknown");
}

TEST(TransferState, SenderHappyPathsAreAllowed) {
  using S = SendState;
  const std::vector<std::vector<S>> paths = {
      {S::kFree, S::kWaitCts, S::kWriting, S::kDone, S::kFree},
      {S::kFree, S::kWaitCts, S::kWaitConnection, S::kWriting, S::kDone, S::kFree},
      {S::kFree, S::kWaitCts, S::kCopying, S::kDone, S::kFree},
      {S::kFree, S::kWaitCts, S::kWaitConnection, S::kCopying, S::kDone, S::kFree},
      {S::kFree, S::kWaitCts, S::kFree},  // RTS never posted
      {S::kFree, S::kWaitCts, S::kWriting, S::kDraining, S::kFailed, S::kFree},
      {S::kFree, S::kWaitCts, S::kFailed, S::kFree},
  };
  for (const auto& path : paths) {
    S s = path.front();
    for (std::size_t i = 1; i < path.size(); ++i) {
      EXPECT_TRUE(transition(s, path[i], 1, 0, TransitionLog{}))
          << to_string(path[i - 1]) << " -> " << to_string(path[i]);
    }
  }
}

TEST(TransferState, ReceiverHappyPathsAreAllowed) {
  using R = RecvState;
  const std::vector<std::vector<R>> paths = {
      {R::kFree, R::kWaitData, R::kDone, R::kFree},
      {R::kFree, R::kCtsPending, R::kWaitData, R::kDone, R::kFree},
      {R::kFree, R::kWaitData, R::kCopying, R::kDone, R::kFree},
      {R::kFree, R::kWaitData, R::kFailed, R::kFree},
      {R::kFree, R::kCtsPending, R::kFailed, R::kFree},
  };
  for (const auto& path : paths) {
    R s = path.front();
    for (std::size_t i = 1; i < path.size(); ++i) {
      EXPECT_TRUE(transition(s, path[i], 1, 0, TransitionLog{}));
    }
  }
}

TEST(TransferState, ForbiddenMovesAreRefusedLoggedAndLeaveTheState) {
  Captured cap;
  SendState s = SendState::kWaitCts;
  EXPECT_FALSE(transition(s, SendState::kDone, 0x00100007, 3, cap.log(0)));
  EXPECT_EQ(s, SendState::kWaitCts);
  ASSERT_EQ(cap.lines.size(), 1u) << "refusals are logged even when quiet";
  EXPECT_NE(cap.lines[0].find("refused transition wait_cts -> done"), std::string::npos)
      << cap.lines[0];
  EXPECT_NE(cap.lines[0].find("00100007"), std::string::npos);
  EXPECT_NE(cap.lines[0].find("peer 3"), std::string::npos);
  // Terminal states only go back to free; a draining sender can only fail.
  EXPECT_FALSE(allowed(SendState::kDone, SendState::kWriting));
  EXPECT_FALSE(allowed(SendState::kDraining, SendState::kDone));
  EXPECT_FALSE(allowed(SendState::kFree, SendState::kWriting));
  EXPECT_FALSE(allowed(SendState::kCopying, SendState::kWriting));
  RecvState r = RecvState::kFree;
  EXPECT_FALSE(transition(r, RecvState::kDone, 1, 0, cap.log(0)));
  EXPECT_EQ(r, RecvState::kFree);
  EXPECT_FALSE(allowed(RecvState::kCopying, RecvState::kWaitData));
  EXPECT_FALSE(allowed(static_cast<RecvState>(40), RecvState::kFree));
  EXPECT_FALSE(allowed(RecvState::kFree, static_cast<RecvState>(40)));
}

TEST(TransferState, VerboseLogsEveryMoveWithThePreviousState) {
  Captured cap;
  SendState s = SendState::kFree;
  ASSERT_TRUE(transition(s, SendState::kWaitCts, 0x00100001, 0, cap.log(2)));
  ASSERT_TRUE(transition(s, SendState::kWriting, 0x00100001, 0, cap.log(2)));
  ASSERT_TRUE(transition(s, SendState::kWriting, 0x00100001, 0, cap.log(1)) == false);
  ASSERT_EQ(cap.lines.size(), 3u);
  EXPECT_NE(cap.lines[0].find("send 00100001 (peer 0): free -> wait_cts"), std::string::npos)
      << cap.lines[0];
  EXPECT_NE(cap.lines[1].find("wait_cts -> writing"), std::string::npos) << cap.lines[1];
  EXPECT_NE(cap.lines[2].find("refused transition writing -> writing"), std::string::npos);
}

// --- RC connection cap ----------------------------------------------------------------------

TEST(RcLru, AdmitsBelowTheCapThenEvictsTheLeastRecentlyUsedIdle) {
  RcLru lru(3);
  auto idle = [](std::uint32_t) { return false; };
  for (const std::uint32_t p : {10u, 11u, 12u}) {
    EXPECT_EQ(lru.admit(p, idle).admit, RcLru::Admit::kRoom);
    lru.insert(p);
  }
  EXPECT_EQ(lru.size(), 3u);
  EXPECT_EQ(lru.order(), (std::vector<std::uint32_t>{10, 11, 12}));
  // Using 10 makes 11 the least recently used.
  EXPECT_EQ(lru.admit(10, idle).admit, RcLru::Admit::kConnected);
  EXPECT_EQ(lru.order(), (std::vector<std::uint32_t>{11, 12, 10}));
  const auto d = lru.admit(13, idle);
  EXPECT_EQ(d.admit, RcLru::Admit::kEvict);
  EXPECT_EQ(d.victim, 11u);
  lru.remove(d.victim);
  lru.insert(13);
  EXPECT_EQ(lru.order(), (std::vector<std::uint32_t>{12, 10, 13}));
  EXPECT_FALSE(lru.contains(11));
  EXPECT_EQ(lru.size(), 3u);
}

TEST(RcLru, BusyConnectionsAreNeverRetired) {
  RcLru lru(2);
  lru.insert(0);
  lru.insert(1);
  std::vector<bool> busy = {true, false};
  auto is_busy = [&](std::uint32_t p) { return busy[p]; };
  auto d = lru.admit(5, is_busy);
  EXPECT_EQ(d.admit, RcLru::Admit::kEvict);
  EXPECT_EQ(d.victim, 1u) << "0 is older but busy";
  busy[1] = true;
  EXPECT_EQ(lru.admit(5, is_busy).admit, RcLru::Admit::kFull);
  EXPECT_EQ(lru.size(), 2u) << "the cap holds when everything is busy";
  busy[0] = false;
  d = lru.admit(5, is_busy);
  EXPECT_EQ(d.admit, RcLru::Admit::kEvict);
  EXPECT_EQ(d.victim, 0u);
}

TEST(RcLru, RemoveInsertTouchEdgeCases) {
  RcLru lru(0);  // taken as 1
  EXPECT_EQ(lru.capacity(), 1u);
  lru.remove(7);  // absent: nothing
  lru.touch(7);
  lru.insert(7);
  lru.insert(7);  // present: only a touch
  EXPECT_EQ(lru.size(), 1u);
  lru.remove(7);
  EXPECT_EQ(lru.size(), 0u);
  EXPECT_TRUE(lru.order().empty());
  lru.insert(1000);  // sparse index
  EXPECT_TRUE(lru.contains(1000));
  EXPECT_FALSE(lru.contains(999));
}

TEST(RcLru, ManyPeersStayWithinTheCap) {
  RcLru lru(kDefaultMaxRcPeers);
  auto idle = [](std::uint32_t) { return false; };
  std::uint32_t evictions = 0;
  for (std::uint32_t round = 0; round < 3; ++round) {
    for (std::uint32_t p = 0; p < 200; ++p) {
      const auto d = lru.admit(p, idle);
      if (d.admit == RcLru::Admit::kEvict) {
        lru.remove(d.victim);
        ++evictions;
      }
      if (d.admit != RcLru::Admit::kConnected) {
        lru.insert(p);
      }
      ASSERT_LE(lru.size(), kDefaultMaxRcPeers);
    }
  }
  EXPECT_EQ(lru.size(), kDefaultMaxRcPeers);
  EXPECT_EQ(evictions, 3 * 200 - kDefaultMaxRcPeers);
}

}  // namespace
}  // namespace rdmx::rendezvous
