// The checked state machines of transport/state_moves.h: the request's (transport/request.h) and
// the UD write connection's (transport/peer.h). Each table is compared, move by move, with the
// moves its drawing shows; a refused move must leave the state alone and say so on stderr.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>

#include "transport/peer.h"
#include "transport/request.h"

namespace rdmx::transport {
namespace {

template <class State, std::size_t N>
void expect_exactly(const StateMoves<State, N>& moves, const std::set<std::pair<int, int>>& want) {
  for (int from = 0; from < static_cast<int>(N); ++from) {
    for (int to = 0; to < static_cast<int>(N); ++to) {
      EXPECT_EQ(moves.allowed(static_cast<State>(from), static_cast<State>(to)),
                want.count({from, to}) == 1)
          << moves.machine << ": " << moves.names[from] << " -> " << moves.names[to];
    }
  }
  // Out of range, either way: refused, and named "unknown".
  EXPECT_FALSE(moves.allowed(static_cast<State>(N), static_cast<State>(0)));
  EXPECT_FALSE(moves.allowed(static_cast<State>(0), static_cast<State>(N)));
  EXPECT_EQ(moves.name(static_cast<State>(N)), "unknown");
  std::set<std::string_view> names(moves.names.begin(), moves.names.end());
  EXPECT_EQ(names.size(), N) << "names must differ";
}

TEST(StateMoves, RequestTableIsTheDrawing) {
  using S = ReqState;
  auto m = [](S a, S b) { return std::pair{static_cast<int>(a), static_cast<int>(b)}; };
  expect_exactly(
      kReqMoves,
      {m(S::kIdle, S::kActive), m(S::kActive, S::kIdle), m(S::kActive, S::kQueued),
       m(S::kActive, S::kCompleting), m(S::kActive, S::kDone), m(S::kQueued, S::kActive),
       m(S::kQueued, S::kCompleting), m(S::kQueued, S::kDone), m(S::kCompleting, S::kDone)});
  EXPECT_EQ(kReqMoves.name(S::kCompleting), "completing");
}

TEST(StateMoves, WriteConnectionTableIsTheDrawing) {
  using S = WriteQpState;
  auto m = [](S a, S b) { return std::pair{static_cast<int>(a), static_cast<int>(b)}; };
  expect_exactly(kWriteQpMoves,
                 {m(S::kNone, S::kConnecting), m(S::kNone, S::kReady), m(S::kConnecting, S::kNone),
                  m(S::kConnecting, S::kReady), m(S::kReady, S::kNone)});
}

TEST(StateMoves, ARequestFollowsItsLife) {
  Request r{};
  EXPECT_EQ(r.state, ReqState::kIdle);
  testing::internal::CaptureStderr();
  move_to(&r, ReqState::kActive);
  move_to(&r, ReqState::kQueued);
  move_to(&r, ReqState::kActive);
  move_to(&r, ReqState::kCompleting);
  move_to(&r, ReqState::kDone);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(r.state, ReqState::kDone);
}

TEST(StateMoves, ARefusedMoveChangesNothingAndSaysSo) {
  const std::uint64_t refused_before = refused_moves();
  Request r{};
  move_to(&r, ReqState::kActive);
  move_to(&r, ReqState::kDone);
  testing::internal::CaptureStderr();
  move_to(&r, ReqState::kQueued);  // a completed request cannot be queued
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(r.state, ReqState::kDone);
  EXPECT_NE(log.find("rdmx: refused request state move done -> queued (request 0x"),
            std::string::npos)
      << log;

  Peer p;
  p.uid = 0xabc;
  testing::internal::CaptureStderr();
  move_to(p, WriteQpState::kReady);
  move_to(p, WriteQpState::kConnecting);  // ready -> connecting: refused
  const std::string plog = testing::internal::GetCapturedStderr();
  EXPECT_EQ(p.ud.wqp_state, WriteQpState::kReady);
  EXPECT_EQ(plog, "rdmx: refused write connection state move ready -> connecting (peer 0xabc)\n");
  EXPECT_EQ(refused_moves(), refused_before + 2);  // what worker teardown reports to tests
}

}  // namespace
}  // namespace rdmx::transport
