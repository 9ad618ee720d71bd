// IdleBackoff (transport/idle_backoff.h), the idle policy of rdmx_request_wait and
// rdmx_worker_idle, driven with made-up times: when it spins, yields, naps or reports the
// deadline. And SpinPolls, rdmx_worker_poll's budget of polls per call.
// Its yields and naps are real (a nap here is at most 1 ms).
#include <gtest/gtest.h>

#include <cstdint>

#include "transport/idle_backoff.h"

namespace rdmx::transport {
namespace {

using Action = IdleBackoff::Action;

TEST(IdleBackoff, SpinsThenYieldsThenNaps) {
  IdleBackoff b{100, 2000};
  const std::uint64_t t0 = 1'000'000;
  EXPECT_EQ(b.turn(false, t0), Action::kSpin);  // the first idle turn starts the count
  EXPECT_EQ(b.turn(false, t0 + 99), Action::kSpin);
  EXPECT_EQ(b.turn(false, t0 + 100), Action::kYield);
  EXPECT_EQ(b.turn(false, t0 + 1999), Action::kYield);
  EXPECT_EQ(b.turn(false, t0 + 2000), Action::kNap);
}

TEST(IdleBackoff, AnEventStartsTheCountAgain) {
  IdleBackoff b{100, 2000};
  const std::uint64_t t0 = 1'000'000;
  EXPECT_EQ(b.turn(false, t0), Action::kSpin);
  EXPECT_EQ(b.turn(false, t0 + 500), Action::kYield);
  EXPECT_EQ(b.turn(true, t0 + 501), Action::kSpin);
  EXPECT_EQ(b.turn(false, t0 + 502), Action::kSpin);
  EXPECT_EQ(b.turn(false, t0 + 601), Action::kSpin);  // idle 99 us since the event
  EXPECT_EQ(b.turn(false, t0 + 602), Action::kYield);
}

TEST(IdleBackoff, NapsGrowWithTheIdleTimeWithinBoundsAndStopAtTheDeadline) {
  const std::uint64_t never = IdleBackoff::kNever;
  EXPECT_EQ(IdleBackoff::nap_us(1000, 0, never), IdleBackoff::kNapMinUs);  // 1000/32 = 31
  EXPECT_EQ(IdleBackoff::nap_us(2000, 0, never), 62u);
  EXPECT_EQ(IdleBackoff::nap_us(3200, 0, never), 100u);
  EXPECT_EQ(IdleBackoff::nap_us(1'000'000, 0, never), IdleBackoff::kNapMaxUs);
  EXPECT_EQ(IdleBackoff::nap_us(1'000'000, 5000, 5030), 30u);  // never past the deadline
  IdleBackoff b{100, 2000};
  const std::uint64_t t0 = 1'000'000;
  EXPECT_EQ(b.turn(false, t0, t0 + 3000), Action::kSpin);
  EXPECT_EQ(b.turn(false, t0 + 2500, t0 + 3000), Action::kNap);
  EXPECT_EQ(b.turn(false, t0 + 3000, t0 + 3000), Action::kDeadline);
}

TEST(IdleBackoff, NeverMeansNever) {
  IdleBackoff b{100, IdleBackoff::kNever};
  const std::uint64_t t0 = 1'000'000;
  EXPECT_EQ(b.turn(false, t0), Action::kSpin);
  EXPECT_EQ(b.turn(false, t0 + 10'000'000), Action::kYield);  // no nap, however long
}

// rdmx_worker_idle's loop gap: a turn long after the last idle one ended (a test between compute
// steps) starts the count again, so that no test sleeps through the compute before it; the time
// a yield or nap gave away (resumed()) is not such a gap.
TEST(IdleBackoff, ATurnAfterAGapInTheLoopStartsTheCountAgain) {
  IdleBackoff b{20, 1000, 50};
  const std::uint64_t t0 = 1'000'000;
  EXPECT_EQ(b.turn(false, t0), Action::kSpin);
  EXPECT_EQ(b.turn(false, t0 + 40), Action::kYield);
  b.resumed(t0 + 45);
  // 10 ms of compute, then a test: a new count, not a 10 ms wait.
  EXPECT_EQ(b.turn(false, t0 + 10'045), Action::kSpin);
  EXPECT_EQ(b.turn(false, t0 + 10'060), Action::kSpin);  // 15 us into the new count
  EXPECT_EQ(b.turn(false, t0 + 10'065), Action::kYield);
  // The yield gave the CPU away for 5 ms: the wait goes on, and naps.
  b.resumed(t0 + 15'065);
  EXPECT_EQ(b.turn(false, t0 + 15'070), Action::kNap);
  b.resumed(t0 + 15'300);
  EXPECT_EQ(b.turn(false, t0 + 15'310), Action::kNap);
  // A gap after a spin turn: 51 us, past the loop gap.
  EXPECT_EQ(b.turn(true, t0 + 15'400), Action::kSpin);
  EXPECT_EQ(b.turn(false, t0 + 15'401), Action::kSpin);
  EXPECT_EQ(b.turn(false, t0 + 15'452), Action::kSpin);
  EXPECT_EQ(b.turn(false, t0 + 15'471), Action::kSpin);  // 19 us into the count from 15'452
  EXPECT_EQ(b.turn(false, t0 + 15'472), Action::kYield);
}

TEST(SpinPolls, OnlyACallRightAfterAnIdleOneGetsTheBudget) {
  SpinPolls s;
  const std::uint64_t t0 = 1'000'000;
  EXPECT_EQ(s.budget(t0, 32, 10), 1u);  // no call before
  s.end(true, t0);
  EXPECT_EQ(s.budget(t0 + 9, 32, 10), 32u);  // a wait loop's next turn
  EXPECT_EQ(s.budget(t0 + 10, 32, 10), 1u);  // a test after compute
  s.end(false, t0 + 20);                     // a call that found something
  EXPECT_EQ(s.budget(t0 + 21, 32, 10), 1u);
  s.end(true, t0 + 30);
  EXPECT_EQ(s.budget(t0 + 30, 0, 10), 1u);  // at least one poll
  EXPECT_EQ(s.budget(t0 + 30, 5, 0), 1u);   // gap 0: never spins
}

}  // namespace
}  // namespace rdmx::transport
