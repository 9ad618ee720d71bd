// The shared-memory segment and its rings (transport/channel/shm_segment.h), on the host: a
// forked producer against this process's consumer, full rings, claims, the name's removal once
// every expected peer attached, and the removal of a dead owner's file.
#include "transport/channel/shm_segment.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

using rdmx::transport::shm::Consumer;
using rdmx::transport::shm::Geometry;
using rdmx::transport::shm::Producer;
using rdmx::transport::shm::Segment;

std::uint64_t unique_instance() {
  static std::mt19937_64 rng{std::random_device{}()};
  return rng() | 1;
}

bool name_exists(std::uint32_t pid, std::uint64_t instance) {
  const std::string name = rdmx::transport::shm::segment_name(pid, instance);
  const int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) {
    return false;
  }
  close(fd);
  return true;
}

const auto kPid = static_cast<std::uint32_t>(getpid());

// The owner's segment of this process; false (and why) when it cannot be made.
bool create(Segment& owner, const Geometry& g, std::uint64_t instance, std::uint32_t expected) {
  std::string error;
  const bool ok = owner.create(g, kPid, instance, expected, &error);
  EXPECT_TRUE(ok) << error;
  return ok;
}

TEST(ShmSegment, NodeIdentityIsStableAndNotZero) {
  const std::uint64_t a = rdmx::transport::shm::node_identity();
  EXPECT_NE(a, 0u);
  EXPECT_EQ(a, rdmx::transport::shm::node_identity());
}

TEST(ShmSegment, SlotSizeHoldsTheMessageAndItsPrefix) {
  EXPECT_EQ(rdmx::transport::shm::slot_size_for(1), 64u);
  EXPECT_EQ(rdmx::transport::shm::slot_size_for(56), 64u);
  EXPECT_EQ(rdmx::transport::shm::slot_size_for(57), 128u);
}

// A forked process attaches and writes 10,000 messages of varying length through a 4-slot ring
// (many laps, the producer often finding it full); this process reads them in order.
TEST(ShmSegment, ForkedProducerMessagesArriveWholeAndInOrder) {
  const std::uint64_t instance = unique_instance();
  Segment owner;
  ASSERT_TRUE(create(owner, Geometry{.rings = 4, .slots = 4, .slot_size = 256}, instance, 0));
  constexpr int kMessages = 10000;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Segment peer;
    std::string e;
    if (!peer.attach(kPid, instance, 0x1234, &e)) {
      _exit(2);
    }
    Producer tx = peer.producer(peer.ring());
    for (int i = 0; i < kMessages; ++i) {
      while (tx.full()) {
      }
      std::uint8_t body[200];
      const std::size_t n = 4 + static_cast<std::size_t>(i) % 190;
      for (std::size_t j = 0; j < n; ++j) {
        body[j] = static_cast<std::uint8_t>(i + static_cast<int>(j));
      }
      const std::uint32_t seq = static_cast<std::uint32_t>(i);
      tx.push(&seq, sizeof(seq), body, n - 4, nullptr, 0);
    }
    _exit(0);
  }
  // Bounded: a ring that never gives slots back must fail the test, not hang it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  const auto late = [&] { return std::chrono::steady_clock::now() > deadline; };
  while (owner.claimed() == 0 && !late()) {
  }
  ASSERT_EQ(owner.claimed(), 1u);
  Consumer rx = owner.consumer(0);
  int got = 0;
  bool ok = true;
  while (got < kMessages && ok && !late()) {
    std::uint32_t length = 0;
    const std::byte* m = rx.peek(&length);
    if (m == nullptr) {
      continue;
    }
    std::uint32_t seq = 0;
    std::memcpy(&seq, m, sizeof(seq));
    const std::size_t n = 4 + static_cast<std::size_t>(got) % 190;
    ok = seq == static_cast<std::uint32_t>(got) && length == n;
    for (std::size_t j = 0; ok && j + 4 < n; ++j) {
      ok = static_cast<std::uint8_t>(m[4 + j]) ==
           static_cast<std::uint8_t>(got + static_cast<int>(j));
    }
    EXPECT_TRUE(ok) << "message " << got << ": seq " << seq << ", " << length << " bytes";
    rx.pop();
    ++got;
  }
  if (got < kMessages) {
    kill(child, SIGKILL);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(got, kMessages);
  // Written by the claim before its first message (claimed() can be seen before it).
  EXPECT_EQ(rx.control().sender_uid, 0x1234u);
  std::uint32_t length = 0;
  EXPECT_EQ(rx.peek(&length), nullptr);
}

TEST(ShmSegment, ProducerStopsAtAFullRingUntilTheConsumerPops) {
  Segment owner;
  ASSERT_TRUE(
      create(owner, Geometry{.rings = 1, .slots = 3, .slot_size = 64}, unique_instance(), 0));
  std::string error;
  const std::uint32_t ring = owner.claim(7, &error);
  ASSERT_EQ(ring, 0u) << error;
  Producer tx = owner.producer(ring);
  Consumer rx = owner.consumer(ring);
  EXPECT_EQ(tx.max_message(), 56u);
  const char m[] = "abc";
  for (int i = 0; i < 3; ++i) {
    ASSERT_FALSE(tx.full());
    tx.push(m, 3, nullptr, 0, nullptr, 0);
  }
  EXPECT_TRUE(tx.full());
  std::uint32_t length = 0;
  ASSERT_NE(rx.peek(&length), nullptr);
  EXPECT_EQ(length, 3u);
  EXPECT_TRUE(tx.full());  // peeked, not taken
  rx.pop();
  EXPECT_FALSE(tx.full());
}

TEST(ShmSegment, AnOversizedLengthReadsAsNothingWhole) {
  Segment owner;
  ASSERT_TRUE(
      create(owner, Geometry{.rings = 1, .slots = 2, .slot_size = 64}, unique_instance(), 0));
  std::string error;
  ASSERT_EQ(owner.claim(1, &error), 0u) << error;
  Producer tx = owner.producer(0);
  Consumer rx = owner.consumer(0);
  const char m[8] = {};
  tx.push(m, 8, nullptr, 0, nullptr, 0);
  // A peer that wrote a length past its slot: the slot's first word, after the control lines.
  auto* slot = reinterpret_cast<std::uint32_t*>(&rx.control() + 1);
  *slot = 4096;
  std::uint32_t length = 1;
  ASSERT_NE(rx.peek(&length), nullptr);
  EXPECT_EQ(length, 0u);
}

TEST(ShmSegment, TheNameGoesOnceEveryExpectedPeerAttached) {
  const std::uint64_t instance = unique_instance();
  Segment owner;
  std::string error;
  ASSERT_TRUE(create(owner, Geometry{.rings = 4, .slots = 2, .slot_size = 64}, instance, 2));
  EXPECT_TRUE(name_exists(kPid, instance));
  Segment a;
  ASSERT_TRUE(a.attach(kPid, instance, 1, &error)) << error;
  EXPECT_TRUE(name_exists(kPid, instance));  // one of two
  Segment b;
  ASSERT_TRUE(b.attach(kPid, instance, 2, &error)) << error;
  EXPECT_FALSE(name_exists(kPid, instance));  // both in: gone, the mappings stay
  EXPECT_EQ(a.ring(), 0u);
  EXPECT_EQ(b.ring(), 1u);
  Producer tx = b.producer(b.ring());
  tx.push("x", 1, nullptr, 0, nullptr, 0);
  Consumer rx = owner.consumer(1);
  std::uint32_t length = 0;
  ASSERT_NE(rx.peek(&length), nullptr);
  EXPECT_EQ(length, 1u);
}

TEST(ShmSegment, WithoutAnExpectedCountTheOwnerRemovesTheNameAtDestroy) {
  const std::uint64_t instance = unique_instance();
  {
    Segment owner;
    std::string error;
    ASSERT_TRUE(create(owner, Geometry{.rings = 2, .slots = 2, .slot_size = 64}, instance, 0));
    Segment a;
    ASSERT_TRUE(a.attach(kPid, instance, 1, &error)) << error;
    EXPECT_TRUE(name_exists(kPid, instance));
  }
  EXPECT_FALSE(name_exists(kPid, instance));
}

TEST(ShmSegment, AFullSegmentRefusesWithTheSettingToRaise) {
  const std::uint64_t instance = unique_instance();
  Segment owner;
  std::string error;
  ASSERT_TRUE(create(owner, Geometry{.rings = 1, .slots = 2, .slot_size = 64}, instance, 0));
  Segment a;
  ASSERT_TRUE(a.attach(kPid, instance, 1, &error)) << error;
  Segment b;
  EXPECT_FALSE(b.attach(kPid, instance, 2, &error));
  EXPECT_NE(error.find("RDMX_SHM_RINGS"), std::string::npos) << error;
}

TEST(ShmSegment, AttachToNoSegmentSaysWhy) {
  Segment a;
  std::string error;
  EXPECT_FALSE(a.attach(kPid, unique_instance(), 1, &error));
  EXPECT_NE(error.find("cannot open /dev/shm/rdmx-"), std::string::npos) << error;
}

TEST(ShmSegment, ADeadOwnersFileIsRemovedALiveOnesIsNot) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    _exit(0);
  }
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  const std::uint64_t instance = unique_instance();
  const auto dead = static_cast<std::uint32_t>(child);
  for (const std::uint32_t pid : {dead, kPid}) {
    const int fd = shm_open(rdmx::transport::shm::segment_name(pid, instance).c_str(),
                            O_RDWR | O_CREAT | O_EXCL, 0600);
    ASSERT_GE(fd, 0);
    close(fd);
  }
  EXPECT_GE(rdmx::transport::shm::remove_stale_segments(), 1);
  EXPECT_FALSE(name_exists(dead, instance));
  EXPECT_TRUE(name_exists(kPid, instance));
  shm_unlink(rdmx::transport::shm::segment_name(kPid, instance).c_str());
}

TEST(ShmSegment, CrossMemoryAttachReachesAnAttachedPeer) {
  const std::uint64_t instance = unique_instance();
  Segment owner;
  std::string error;
  ASSERT_TRUE(create(owner, Geometry{.rings = 1, .slots = 2, .slot_size = 64}, instance, 0));
  Segment a;
  ASSERT_TRUE(a.attach(kPid, instance, 1, &error)) << error;
  EXPECT_TRUE(a.cma_works(static_cast<pid_t>(kPid)));
}

}  // namespace
