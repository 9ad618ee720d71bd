// Thread mode multi (rdmx.h, "Threads"; transport/threads.cc): each thread posts through its own
// send context, whose index is in the wr_id and routes the completions back to it whichever
// thread polls them; waits from a thread other than the poster; the bound on threads and the
// reuse of an exited thread's context; destroy while threads wait; the calls that need only the
// shared side of the worker lock, and the match-ack such a receive owes when it finds no room.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "rdmx/rdmx.h"
#include "tests/guest/support/guest_env.h"
#include "tests/transport/support/procs.h"
#include "transport/debug.h"

namespace rdmx::test {
namespace {

constexpr int kThreads = 4;
constexpr int kMsgs = 400;

std::uint8_t pattern(int thread, int i, std::size_t at) {
  return static_cast<std::uint8_t>(thread * 31 + i * 7 + at * 13 + (at >> 9));
}

// Mostly eager sizes of both classes, a rendezvous one every 64th, an Ssend every 16th.
std::size_t size_of(int thread, int i) {
  return i % 64 == 63 ? 70000 : static_cast<std::size_t>((i * 37 + thread * 101) % 3000);
}

std::uint64_t tag_of(int thread, int i) {
  return (std::uint64_t(thread + 1) << 32) | static_cast<std::uint32_t>(i);
}
constexpr std::uint64_t kExact = ~std::uint64_t{0};
// Messages rank 1's main thread posts receives for, waited on by its worker threads.
std::uint64_t handoff_tag(int thread) {
  return (std::uint64_t{0xff} << 32) | static_cast<std::uint32_t>(thread);
}

// Through the device (both ranks are on one node), and without coalescing: a packed message
// leaves in the WR of whichever thread's send or progress flushes the batch, which would blur
// whose context posted what.
void multi(rdmx_config_t& c) {
  c.thread_mode = RDMX_THREAD_MODE_MULTI;
  c.coalesce = 0;
  c.shm = 0;
}

void sender(Rank& rank, Session& s, int t, int* context) {
  rdmx_worker_t* const w = s.worker;
  *context = transport::debug::caller_send_context(w);
  std::vector<std::uint8_t> buf(70000);
  for (int i = 0; i <= kMsgs; ++i) {
    const bool last = i == kMsgs;  // the hand-off message
    const std::size_t n = last ? 8 : size_of(t, i);
    for (std::size_t k = 0; k < n; ++k) {
      buf[k] = pattern(t, i, k);
    }
    rdmx_request_t req;
    const unsigned flags = i % 16 == 5 ? unsigned{RDMX_SEND_SYNC} : 0u;
    RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[1], buf.data(), n, last ? handoff_tag(t) : tag_of(t, i),
                                      flags, &req, nullptr, nullptr));
    RDMX_CHECK_OK(rank, wait_request(rank, w, &req, nullptr, "threaded send"));
  }
}

void receiver(Rank& rank, Session& s, int t, rdmx_request_t* handed, std::uint8_t* handed_buf) {
  rdmx_worker_t* const w = s.worker;
  std::vector<std::uint8_t> buf(70000);
  for (int i = 0; i < kMsgs; ++i) {
    rdmx_request_t req;
    rdmx_status_t st{};
    RDMX_CHECK_OK(rank, rdmx_tag_recv(w, buf.data(), buf.size(), s.uids[0], tag_of(t, i), kExact,
                                      &req, nullptr, nullptr));
    RDMX_CHECK_OK(rank, wait_request(rank, w, &req, &st, "threaded receive"));
    RDMX_CHECK_EQ(rank, st.length, size_of(t, i));
    RDMX_CHECK_EQ(rank, st.source, s.uids[0]);
    for (std::size_t k = 0; k < st.length; ++k) {
      if (buf[k] != pattern(t, i, k)) {
        rank.fail(__FILE__, __LINE__,
                  "thread " + std::to_string(t) + " message " + std::to_string(i) + " byte " +
                      std::to_string(k) + " differs");
      }
    }
  }
  // A receive the main thread posted, waited for here.
  rdmx_status_t st{};
  RDMX_CHECK_OK(rank, wait_request(rank, w, handed, &st, "handed-off receive"));
  RDMX_CHECK_EQ(rank, st.length, 8u);
  for (std::size_t k = 0; k < 8; ++k) {
    RDMX_CHECK_EQ(rank, handed_buf[k], pattern(t, kMsgs, k));
  }
}

// A lone worker (no peer) in `mode`.
rdmx_worker_t* lone_worker(Rank& rank, rdmx_thread_mode_t mode, std::uint32_t max_threads = 32) {
  rdmx_config_t cfg = test_config(devices()[0], RDMX_TRANSPORT_RC);
  cfg.thread_mode = mode;
  cfg.max_threads = max_threads;
  rdmx_worker_t* w = nullptr;
  RDMX_CHECK_OK(rank, rdmx_worker_create(&cfg, &w));
  return w;
}

// A thread that makes its send context first (under the whole lock: a thread without one takes
// it), waits for `go`, then runs `body`. Returns once the context is made.
template <class Body>
std::thread start_with_context(Rank& rank, rdmx_worker_t* w, const std::atomic<bool>& go,
                               Body body) {
  std::atomic<bool> ready{false};
  std::thread t([&rank, w, &go, &ready, body] {
    RDMX_CHECK(rank, transport::debug::caller_send_context(w) >= 1);
    ready = true;  // the last touch of `ready`, which dies when this returns
    while (!go.load()) {
      std::this_thread::yield();
    }
    body();
  });
  while (!ready.load()) {
    std::this_thread::yield();
  }
  return t;
}

// Holds the shared side of w's lock, lets the other thread go and waits (20 s at most) until it
// counted `want` calls that returned: calls that need no more than the shared side. The caller
// checks more while it still holds the returned lock.
std::shared_lock<transport::WorkerLock> go_beside_shared_side(Rank& rank, rdmx_worker_t* w,
                                                              std::atomic<bool>& go,
                                                              const std::atomic<int>& count,
                                                              int want) {
  auto shared = transport::debug::hold_worker_lock_shared(w);
  go = true;
  const auto t0 = std::chrono::steady_clock::now();
  while (count.load() < want && seconds_since(t0) < 20.0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  RDMX_CHECK_EQ(rank, count.load(), want);  // none waited for the whole lock
  return shared;
}

// Waits (20 s at most) until one call waits for the whole worker lock, and checks it is one.
void await_lock_waiter(Rank& rank, rdmx_worker_t* w) {
  const auto t0 = std::chrono::steady_clock::now();
  while (transport::debug::lock_waiters(w) == 0 && seconds_since(t0) < 20.0) {
    std::this_thread::yield();
  }
  RDMX_CHECK_EQ(rank, transport::debug::lock_waiters(w), 1);
}

// A multi-mode session whose set-up messages are all acknowledged (UD's window empty), so that
// the window's room counts from here; both ranks leave together.
Session open_settled(Rank& rank, rdmx_transport_t transport) {
  Session s = open_session(rank, device_for(rank.rank(), false), transport, multi);
  quiesce(rank, s);
  const auto settle = std::chrono::steady_clock::now();
  while (seconds_since(settle) < 0.3) {
    (void)rdmx_worker_progress(s.worker);
  }
  rank.barrier();
  return s;
}

// A receive on rank 1 done beside the shared side: its status, and the bytes of the message
// handoff_tag(t) (pattern t) that rank 0 sent.
void check_handoff(Rank& rank, const Session& s, const rdmx_request_t* req,
                   const std::vector<std::uint8_t>& bytes, std::size_t length, int t) {
  rdmx_status_t st{};
  RDMX_CHECK_OK(rank, rdmx_request_test(req, &st));
  RDMX_CHECK_EQ(rank, st.length, length);
  RDMX_CHECK_EQ(rank, st.source, s.uids[0]);
  RDMX_CHECK_EQ(rank, st.tag, handoff_tag(t));
  for (std::size_t k = 0; k < length; ++k) {
    RDMX_CHECK_EQ(rank, bytes[k], pattern(t, 0, k));
  }
}

class ThreadsTest : public ::testing::TestWithParam<rdmx_transport_t> {};

TEST_P(ThreadsTest, EachThreadPostsThroughItsOwnContext) {
  RDMX_REQUIRE_DEVICE();
  const rdmx_transport_t transport = GetParam();
  ASSERT_TRUE(run_ranks(
      2,
      [&](Rank& rank) {
        Session s = open_session(rank, device_for(rank.rank(), false), transport, multi);
        quiesce(rank, s);  // connected: no send queues behind the handshake (progress posts those)
        std::vector<std::thread> threads;
        if (rank.rank() == 0) {
          std::vector<int> contexts(kThreads, -1);
          for (int t = 0; t < kThreads; ++t) {
            threads.emplace_back(sender, std::ref(rank), std::ref(s), t, &contexts[t]);
          }
          for (auto& th : threads) {
            th.join();
          }
          quiesce(rank, s);
          // Four threads, four contexts besides the main thread's (0), each its own.
          const std::set<int> distinct(contexts.begin(), contexts.end());
          RDMX_CHECK_EQ(rank, distinct.size(), static_cast<std::size_t>(kThreads));
          RDMX_CHECK(rank, *distinct.begin() >= 1);
          const auto counts = transport::debug::send_context_counts(s.worker);
          RDMX_CHECK(rank, counts.size() >= static_cast<std::size_t>(kThreads) + 1);
          for (const int c : contexts) {
            const auto& k = counts[static_cast<std::size_t>(c)];
            std::fprintf(stderr, "context %d: posted %llu retired %llu routed %llu\n", c,
                         static_cast<unsigned long long>(k.posted),
                         static_cast<unsigned long long>(k.retired),
                         static_cast<unsigned long long>(k.routed));
            // The thread's messages went out with its index (small standard sends posted back to
            // back may share a packet: coalescing). With the thread field always 0 every count
            // would be context 0's.
            RDMX_CHECK(rank, k.posted >= static_cast<std::uint64_t>(kMsgs / 16));
            // Its signalled completions came back to it (at least every 32nd WR, every Ssend and
            // rendezvous write), and its descriptors were retired into its own pool, but for
            // unsignalled ones a later completion will retire.
            RDMX_CHECK(rank, k.routed >= k.posted / 32);
            RDMX_CHECK(rank, k.retired + 4 * 32 >= k.posted);
          }
          rdmx_stats_t st{};
          RDMX_CHECK_OK(rank, rdmx_worker_stats(s.worker, &st));
          RDMX_CHECK_EQ(rank, st.send_contexts, counts.size());
        } else {
          std::vector<rdmx_request_t> handed(kThreads);
          std::vector<std::array<std::uint8_t, 64>> bufs(kThreads);
          for (int t = 0; t < kThreads; ++t) {
            RDMX_CHECK_OK(rank,
                          rdmx_tag_recv(s.worker, bufs[t].data(), bufs[t].size(), s.uids[0],
                                        handoff_tag(t), kExact, &handed[t], nullptr, nullptr));
          }
          for (int t = 0; t < kThreads; ++t) {
            threads.emplace_back(receiver, std::ref(rank), std::ref(s), t, &handed[t],
                                 bufs[t].data());
          }
          for (auto& th : threads) {
            th.join();
          }
          quiesce(rank, s);
        }
        close_session(rank, s);
      },
      RunOptions{.timeout = std::chrono::seconds(240)}));
}

// An eager send that leaves at once takes only the shared side of the worker lock (and its
// peer's and UD's post locks), and so do a receive that nothing unexpected or an unexpected
// eager message matches (a synchronous one's match-ack posted there too), a probe, an mprobe
// and the receive of the message it took, and a cancel: they go through while another thread
// holds that side, where progress and every other call wait. A synchronous send, and a receive
// that an unexpected rendezvous matches, take the whole lock.
TEST_P(ThreadsTest, EagerSendsAndReceivesTakeOnlyTheSharedSideOfTheLock) {
  RDMX_REQUIRE_DEVICE();
  const rdmx_transport_t transport = GetParam();
  // Within RC's credits, and over UD within the smallest congestion window (kUdCwndMin): on a
  // slow host (ThreadSanitizer) timeouts during set-up may have shrunk it that far.
  const int kEager = transport == RDMX_TRANSPORT_UD ? 2 : 8;
  constexpr std::array<std::size_t, 4> kSizes = {8, 64, 200, 512};
  constexpr std::size_t kAfterLength = 40;
  constexpr std::size_t kMprobedLength = 24;
  constexpr std::size_t kRndvLength = 70000;
  ASSERT_TRUE(run_ranks(
      2,
      [&](Rank& rank) {
        Session s = open_settled(rank, transport);
        rdmx_worker_t* const w = s.worker;
        if (rank.rank() == 0) {
          std::atomic<int> sent{0};
          std::atomic<bool> sync_posted{false};
          rdmx_request_t sync_req;
          std::vector<std::uint8_t> sync_buf(16, 0x5a);
          rdmx_request_t after_req;
          std::vector<std::uint8_t> after_buf(kAfterLength);
          for (std::size_t k = 0; k < after_buf.size(); ++k) {
            after_buf[k] = pattern(8, 0, k);
          }
          rdmx_request_t mprobed_req;
          std::vector<std::uint8_t> mprobed_buf(kMprobedLength);
          for (std::size_t k = 0; k < mprobed_buf.size(); ++k) {
            mprobed_buf[k] = pattern(9, 0, k);
          }
          rdmx_request_t rndv_req;
          std::vector<std::uint8_t> rndv_buf(kRndvLength);
          for (std::size_t k = 0; k < rndv_buf.size(); ++k) {
            rndv_buf[k] = pattern(11, 0, k);
          }
          std::atomic<bool> go{false};
          std::thread poster = start_with_context(rank, w, go, [&] {
            std::vector<std::uint8_t> buf(512);
            for (int i = 0; i < kEager; ++i) {
              const std::size_t n = kSizes[i % kSizes.size()];
              for (std::size_t k = 0; k < n; ++k) {
                buf[k] = pattern(7, i, k);
              }
              rdmx_request_t req;
              RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[1], buf.data(), n, tag_of(7, i), 0, &req,
                                                nullptr, nullptr));
              // Done on return: it left without progress.
              RDMX_CHECK_OK(rank, rdmx_request_test(&req, nullptr));
              sent.fetch_add(1);
            }
            RDMX_CHECK_OK(rank,
                          rdmx_tag_send(s.eps[1], sync_buf.data(), sync_buf.size(), handoff_tag(7),
                                        RDMX_SEND_SYNC, &sync_req, nullptr, nullptr));
            sync_posted = true;
            // Standard ones behind it, which the peer's receive and mprobe take unexpected.
            RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[1], after_buf.data(), after_buf.size(),
                                              handoff_tag(8), 0, &after_req, nullptr, nullptr));
            RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[1], mprobed_buf.data(), mprobed_buf.size(),
                                              handoff_tag(9), 0, &mprobed_req, nullptr, nullptr));
            // And a rendezvous one, whose receive waits for the whole lock.
            RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[1], rndv_buf.data(), rndv_buf.size(),
                                              handoff_tag(11), 0, &rndv_req, nullptr, nullptr));
          });
          {
            const auto shared = go_beside_shared_side(rank, w, go, sent, kEager);
            // Progress cannot take the lock: it returns at once.
            int progress_rc = -1;
            std::thread([&] { progress_rc = rdmx_worker_progress(w); }).join();
            RDMX_CHECK_EQ(rank, progress_rc, 0);
            // The synchronous send waits for the whole lock.
            await_lock_waiter(rank, w);
            RDMX_CHECK(rank, !sync_posted.load());
          }
          poster.join();
          RDMX_CHECK(rank, sync_posted.load());
          // Its match-ack comes while the peer holds the shared side: posted by the receive.
          RDMX_CHECK_OK(rank, wait_request(rank, w, &sync_req, nullptr, "synchronous send",
                                           std::chrono::seconds(60)));
          rank.barrier();
          // Sent after the peer cancelled the receive of its tag: unexpected there.
          const std::uint64_t after_cancel = 0x0123456789abcdef;
          rdmx_request_t after_cancel_req;
          RDMX_CHECK_OK(
              rank, rdmx_tag_send(s.eps[1], &after_cancel, sizeof(after_cancel), handoff_tag(10), 0,
                                  &after_cancel_req, nullptr, nullptr));
          RDMX_CHECK_OK(rank,
                        wait_request(rank, w, &after_cancel_req, nullptr, "send after the cancel"));
          RDMX_CHECK_OK(rank, wait_request(rank, w, &after_req, nullptr, "standard send"));
          RDMX_CHECK_OK(rank, wait_request(rank, w, &mprobed_req, nullptr, "mprobed send"));
          RDMX_CHECK_OK(rank, wait_request(rank, w, &rndv_req, nullptr, "rendezvous send"));
        } else {
          // The receives, posted while another thread holds the shared side: nothing unexpected
          // matches them (no progress has run since quiesce), so they post at once.
          std::vector<std::vector<std::uint8_t>> bufs(kEager, std::vector<std::uint8_t>(512));
          std::vector<rdmx_request_t> reqs(kEager);
          std::atomic<bool> go{false};
          std::atomic<int> posted{0};
          std::thread receiver = start_with_context(rank, w, go, [&] {
            for (int i = 0; i < kEager; ++i) {
              RDMX_CHECK_OK(rank, rdmx_tag_recv(w, bufs[i].data(), bufs[i].size(), s.uids[0],
                                                tag_of(7, i), kExact, &reqs[i], nullptr, nullptr));
              posted.fetch_add(1);
            }
          });
          (void)go_beside_shared_side(rank, w, go, posted, kEager);
          receiver.join();
          for (int i = 0; i < kEager; ++i) {
            rdmx_status_t st{};
            RDMX_CHECK_OK(rank, wait_request(rank, w, &reqs[i], &st, "eager receive"));
            RDMX_CHECK_EQ(rank, st.length, kSizes[i % kSizes.size()]);
            for (std::size_t k = 0; k < st.length; ++k) {
              RDMX_CHECK_EQ(rank, bufs[i][k], pattern(7, i, k));
            }
          }
          // Progress until the message of `tag` is unexpected here; its length.
          const auto await_unexpected = [&](std::uint64_t tag) {
            return probe_until(rank, s, s.uids[0], tag, kExact, std::chrono::seconds(20), nullptr)
                .length;
          };
          // The synchronous message, received last.
          RDMX_CHECK_EQ(rank, await_unexpected(handoff_tag(7)), 16u);
          // A probe runs beside the shared side (under the matcher's lock).
          {
            std::atomic<int> found{-1};
            std::thread prober;
            {
              auto shared = transport::debug::hold_worker_lock_shared(w);
              prober = std::thread([&] {
                rdmx_status_t st{};
                found = rdmx_tag_probe(w, s.uids[0], handoff_tag(7), kExact, &st, nullptr);
                RDMX_CHECK_EQ(rank, st.length, 16u);
              });
              const auto t1 = std::chrono::steady_clock::now();
              while (found.load() < 0 && seconds_since(t1) < 20.0) {
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
              }
              RDMX_CHECK_EQ(rank, found.load(), 1);
            }
            prober.join();  // after the lock is let go: a probe that waited for it ends now
          }
          // A receive that an unexpected standard message matches takes it beside the shared
          // side: done on return, with its bytes.
          RDMX_CHECK_EQ(rank, await_unexpected(handoff_tag(8)), kAfterLength);
          {
            std::vector<std::uint8_t> after(64);
            rdmx_request_t after_req;
            std::atomic<bool> taker_go{false};
            std::atomic<int> taken{0};
            std::thread taker = start_with_context(rank, w, taker_go, [&] {
              RDMX_CHECK_OK(rank,
                            rdmx_tag_recv(w, after.data(), after.size(), s.uids[0], handoff_tag(8),
                                          kExact, &after_req, nullptr, nullptr));
              RDMX_CHECK_OK(rank, rdmx_request_test(&after_req, nullptr));  // done on return
              taken.fetch_add(1);
            });
            (void)go_beside_shared_side(rank, w, taker_go, taken, 1);
            taker.join();
            check_handoff(rank, s, &after_req, after, kAfterLength, 8);
          }
          // An mprobe takes a message out beside the shared side, and the receive of a standard
          // one completes there too.
          RDMX_CHECK_EQ(rank, await_unexpected(handoff_tag(9)), kMprobedLength);
          {
            std::vector<std::uint8_t> got(64);
            rdmx_request_t got_req;
            std::atomic<bool> mgo{false};
            std::atomic<int> received{0};
            std::thread mreceiver = start_with_context(rank, w, mgo, [&] {
              rdmx_message_t* m = nullptr;
              rdmx_status_t st{};
              RDMX_CHECK_EQ(rank, rdmx_tag_probe(w, s.uids[0], handoff_tag(9), kExact, &st, &m), 1);
              RDMX_CHECK_EQ(rank, st.length, kMprobedLength);
              // Out of matching: not found again.
              RDMX_CHECK_EQ(
                  rank, rdmx_tag_probe(w, s.uids[0], handoff_tag(9), kExact, nullptr, nullptr), 0);
              RDMX_CHECK_OK(rank, rdmx_tag_msg_recv(w, m, got.data(), got.size(), &got_req, nullptr,
                                                    nullptr));
              RDMX_CHECK_OK(rank, rdmx_request_test(&got_req, nullptr));  // done on return
              received.fetch_add(1);
            });
            (void)go_beside_shared_side(rank, w, mgo, received, 1);
            mreceiver.join();
            check_handoff(rank, s, &got_req, got, kMprobedLength, 9);
          }
          // A cancel of a posted receive, beside the shared side: done on return, and once only.
          {
            std::vector<std::uint8_t> never(8);
            rdmx_request_t never_req;
            RDMX_CHECK_OK(rank,
                          rdmx_tag_recv(w, never.data(), never.size(), s.uids[0], handoff_tag(10),
                                        kExact, &never_req, nullptr, nullptr));
            std::atomic<bool> cgo{false};
            std::atomic<int> cancelled{0};
            std::thread canceller([&] {
              while (!cgo.load()) {
                std::this_thread::yield();
              }
              RDMX_CHECK_OK(rank, rdmx_request_cancel(w, &never_req));
              RDMX_CHECK_EQ(rank, rdmx_request_test(&never_req, nullptr), RDMX_ERR_CANCELED);
              RDMX_CHECK_EQ(rank, rdmx_request_cancel(w, &never_req), RDMX_ERR_BUSY);
              cancelled.fetch_add(1);
            });
            (void)go_beside_shared_side(rank, w, cgo, cancelled, 1);
            canceller.join();
          }
          // A receive that an unexpected synchronous message matches takes it beside the shared
          // side too, and posts its match-ack there: the sender's synchronous send completes
          // while the shared side is still held (no progress here).
          {
            std::vector<std::uint8_t> buf(64);
            rdmx_request_t req;
            std::atomic<bool> sgo{false};
            std::atomic<int> received{0};
            std::thread sync_receiver = start_with_context(rank, w, sgo, [&] {
              RDMX_CHECK_OK(rank, rdmx_tag_recv(w, buf.data(), buf.size(), s.uids[0],
                                                handoff_tag(7), kExact, &req, nullptr, nullptr));
              RDMX_CHECK_OK(rank, rdmx_request_test(&req, nullptr));  // done on return
              received.fetch_add(1);
            });
            {
              const auto shared = go_beside_shared_side(rank, w, sgo, received, 1);
              rank.barrier();  // the sender saw its synchronous send complete
            }
            sync_receiver.join();
            rdmx_status_t st{};
            RDMX_CHECK_OK(rank, rdmx_request_test(&req, &st));
            RDMX_CHECK_EQ(rank, st.length, 16u);
            for (std::size_t k = 0; k < 16; ++k) {
              RDMX_CHECK_EQ(rank, buf[k], 0x5a);
            }
          }
          // The cancelled receive left the matcher: the message of its tag is unexpected.
          RDMX_CHECK_EQ(rank, await_unexpected(handoff_tag(10)), 8u);
          {
            std::uint64_t got = 0;
            rdmx_request_t req;
            RDMX_CHECK_OK(rank, rdmx_tag_recv(w, &got, sizeof(got), s.uids[0], handoff_tag(10),
                                              kExact, &req, nullptr, nullptr));
            RDMX_CHECK_OK(rank, wait_request(rank, w, &req, nullptr, "receive after the cancel"));
            RDMX_CHECK_EQ(rank, got, 0x0123456789abcdefu);
          }
          // A receive that an unexpected rendezvous matches waits for the whole lock (its
          // clear-to-send is progress's to post).
          RDMX_CHECK_EQ(rank, await_unexpected(handoff_tag(11)), kRndvLength);
          std::vector<std::uint8_t> rbuf(kRndvLength);
          rdmx_request_t rreq;
          std::atomic<bool> rndv_posted{false};
          std::atomic<bool> late_go{false};
          std::thread late = start_with_context(rank, w, late_go, [&] {
            RDMX_CHECK_OK(rank, rdmx_tag_recv(w, rbuf.data(), rbuf.size(), s.uids[0],
                                              handoff_tag(11), kExact, &rreq, nullptr, nullptr));
            rndv_posted = true;
          });
          {
            auto shared = transport::debug::hold_worker_lock_shared(w);
            late_go = true;
            await_lock_waiter(rank, w);
            RDMX_CHECK(rank, !rndv_posted.load());
          }
          late.join();
          rdmx_status_t st{};
          RDMX_CHECK_OK(rank, wait_request(rank, w, &rreq, &st, "rendezvous receive"));
          RDMX_CHECK_EQ(rank, st.length, kRndvLength);
          for (std::size_t k = 0; k < kRndvLength; ++k) {
            if (rbuf[k] != pattern(11, 0, k)) {
              rank.fail(__FILE__, __LINE__, "rendezvous byte " + std::to_string(k) + " differs");
            }
          }
        }
        quiesce(rank, s);
        close_session(rank, s);
      },
      RunOptions{.timeout = std::chrono::seconds(120)}));
}

// The match-ack of a synchronous message received beside the shared side: posted there when it
// can leave (here after an mprobe, by its mrecv), and owed to the next progress call when it
// cannot: the receiver has used up its RC credits (or UD window) to the sender, which does not
// progress meanwhile. Either way the sender's synchronous send completes, and the owed ack leaves
// before the sends that were queued before it was owed.
TEST_P(ThreadsTest, AMatchAckWithNoRoomBesideTheSharedSideIsOwedToTheNextProgress) {
  RDMX_REQUIRE_DEVICE();
  const rdmx_transport_t transport = GetParam();
  // 8-byte sends, far past RC's credits (64 at most) or UD's window.
  constexpr int kMaxFlood = 4096;
  constexpr std::uint64_t kFlood = std::uint64_t{0xfe} << 32;
  constexpr std::uint64_t kFloodMask = ~std::uint64_t{0xffffffff};
  constexpr std::uint64_t kFloodEnd = kFlood | 0xffffffff;  // carries the count
  constexpr std::size_t kLength = 16;
  const auto flood_value = [](int i) { return 0x1000000000000000u + std::uint64_t(i) * 977; };
  ASSERT_TRUE(run_ranks(
      2,
      [&](Rank& rank) {
        Session s = open_settled(rank, transport);
        rdmx_worker_t* const w = s.worker;
        if (rank.rank() == 0) {
          std::vector<std::uint8_t> mprobed(kLength);
          std::vector<std::uint8_t> owed(kLength);
          for (std::size_t k = 0; k < kLength; ++k) {
            mprobed[k] = pattern(12, 0, k);
            owed[k] = pattern(13, 0, k);
          }
          rdmx_request_t mprobed_req;
          RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[1], mprobed.data(), kLength, handoff_tag(12),
                                            RDMX_SEND_SYNC, &mprobed_req, nullptr, nullptr));
          // Its match-ack comes while the peer holds the shared side: posted by the mrecv.
          RDMX_CHECK_OK(rank, wait_request(rank, w, &mprobed_req, nullptr,
                                           "mprobed synchronous send", std::chrono::seconds(60)));
          rank.barrier();
          rdmx_request_t owed_req;
          RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[1], owed.data(), kLength, handoff_tag(13),
                                            RDMX_SEND_SYNC, &owed_req, nullptr, nullptr));
          rank.barrier();  // the peer has it unexpected
          // No progress here while the peer uses up its credits to us and receives it.
          rank.barrier();
          // The peer's flood, in order, then its end with the count.
          for (int i = 0;; ++i) {
            std::uint64_t v = 0;
            rdmx_request_t req;
            rdmx_status_t st{};
            RDMX_CHECK_OK(rank, rdmx_tag_recv(w, &v, sizeof(v), s.uids[1], kFlood, kFloodMask, &req,
                                              nullptr, nullptr));
            RDMX_CHECK_OK(rank, wait_request(rank, w, &req, &st, "flood receive"));
            if (st.tag == kFloodEnd) {
              RDMX_CHECK_EQ(rank, v, static_cast<std::uint64_t>(i));
              // The ack was posted (or flushed) before the queued sends, this one among them.
              RDMX_CHECK_OK(rank, rdmx_request_test(&owed_req, nullptr));
              break;
            }
            RDMX_CHECK_EQ(rank, st.tag, kFlood | static_cast<std::uint32_t>(i));
            RDMX_CHECK_EQ(rank, v, flood_value(i));
          }
        } else {
          // The mprobe and mrecv of a synchronous message beside the shared side: the mrecv
          // posts the match-ack, and the sender's send completes before the side is let go.
          rdmx_message_t* m = nullptr;
          (void)probe_until(rank, s, s.uids[0], handoff_tag(12), kExact, std::chrono::seconds(20),
                            &m);
          std::vector<std::uint8_t> got(64);
          rdmx_request_t got_req;
          {
            std::atomic<bool> go{false};
            std::atomic<int> received{0};
            std::thread mreceiver = start_with_context(rank, w, go, [&] {
              RDMX_CHECK_OK(rank, rdmx_tag_msg_recv(w, m, got.data(), got.size(), &got_req, nullptr,
                                                    nullptr));
              RDMX_CHECK_OK(rank, rdmx_request_test(&got_req, nullptr));  // done on return
              received.fetch_add(1);
            });
            {
              const auto shared = go_beside_shared_side(rank, w, go, received, 1);
              RDMX_CHECK_EQ(rank, transport::debug::owed_match_acks(w), 0);
              rank.barrier();  // the sender saw its synchronous send complete
            }
            mreceiver.join();
            check_handoff(rank, s, &got_req, got, kLength, 12);
          }
          (void)probe_until(rank, s, s.uids[0], handoff_tag(13), kExact, std::chrono::seconds(20),
                            nullptr);
          rank.barrier();
          // Sends to the peer, which does not progress, until one must wait: no credits (RC) or
          // no room in the window (UD) for the match-ack either.
          std::vector<rdmx_request_t> flood(kMaxFlood + 1);
          std::vector<std::uint64_t> values(kMaxFlood + 1);
          int n = 0;
          bool waits = false;
          while (!waits && n < kMaxFlood) {
            values[n] = flood_value(n);
            RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[0], &values[n], sizeof(std::uint64_t),
                                              kFlood | static_cast<std::uint32_t>(n), 0, &flood[n],
                                              nullptr, nullptr));
            waits = rdmx_request_test(&flood[n], nullptr) == RDMX_INPROGRESS;
            ++n;
          }
          RDMX_CHECK(rank, waits);
          values[n] = static_cast<std::uint64_t>(n);
          RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[0], &values[n], sizeof(std::uint64_t), kFloodEnd,
                                            0, &flood[n], nullptr, nullptr));
          // The receive takes the message beside the shared side, done on return; its ack is owed.
          got.assign(64, 0);
          {
            std::atomic<bool> go{false};
            std::atomic<int> received{0};
            std::thread receiver = start_with_context(rank, w, go, [&] {
              RDMX_CHECK_OK(
                  rank, rdmx_tag_recv(w, got.data(), got.size(), s.uids[0], handoff_tag(13), kExact,
                                      &got_req, nullptr, nullptr));
              RDMX_CHECK_OK(rank, rdmx_request_test(&got_req, nullptr));  // done on return
              received.fetch_add(1);
            });
            {
              const auto shared = go_beside_shared_side(rank, w, go, received, 1);
              RDMX_CHECK_EQ(rank, transport::debug::owed_match_acks(w), 1);
            }
            receiver.join();
            check_handoff(rank, s, &got_req, got, kLength, 13);
          }
          rank.barrier();
          // Progress sends the ack (first), then the flood as credits (window room) come back.
          for (int i = 0; i <= n; ++i) {
            RDMX_CHECK_OK(rank, wait_request(rank, w, &flood[i], nullptr, "flood send"));
          }
        }
        quiesce(rank, s);
        close_session(rank, s);
      },
      RunOptions{.timeout = std::chrono::seconds(120)}));
}

// A burst of standard sends with callbacks (a window of MPI_Isends) from a thread: the first
// leaves at once and the second opens the peer's batch (under the whole lock: it lists the peer
// for the next progress call); the rest join that batch under the shared side, beside another
// thread that holds it. Their callbacks run in the next progress call, and the receiver gets
// every message whole, in one packet. All carry one tag, and a blocking send (RDMX_SEND_FLUSH,
// never packed) follows them: the receives, matched in order, see the order they were sent in.
TEST_P(ThreadsTest, BurstSendsJoinTheOpenBatchUnderTheSharedSide) {
  RDMX_REQUIRE_DEVICE();
  const rdmx_transport_t transport = GetParam();
  constexpr int kBurst = 12;  // within the smallest batch (UD: 992 bytes) at 40 bytes each
  constexpr std::size_t kLen = 40;
  auto coalescing = [](rdmx_config_t& c) {
    multi(c);
    c.coalesce = 1;
  };
  ASSERT_TRUE(run_ranks(
      2,
      [&](Rank& rank) {
        Session s = open_session(rank, device_for(rank.rank(), false), transport, coalescing);
        quiesce(rank, s);
        rdmx_worker_t* const w = s.worker;
        rank.barrier();
        if (rank.rank() == 0) {
          std::vector<std::array<std::uint8_t, kLen>> bufs(kBurst);
          std::vector<rdmx_request_t> reqs(kBurst);
          std::atomic<int> called{0};
          std::atomic<int> sent{0};
          std::atomic<bool> opened{false};
          std::atomic<bool> go{false};
          std::atomic<bool> released{false};
          rdmx_request_t last_req;
          std::array<std::uint8_t, kLen> last{};
          auto on_done = [](rdmx_request_t*, const rdmx_status_t* st, void* arg) {
            if (st->error == RDMX_OK) {
              static_cast<std::atomic<int>*>(arg)->fetch_add(1);
            }
          };
          rdmx_stats_t before{};
          RDMX_CHECK_OK(rank, rdmx_worker_stats(w, &before));
          std::thread poster([&] {
            RDMX_CHECK(rank, transport::debug::caller_send_context(w) >= 1);
            for (int i = 0; i < kBurst; ++i) {
              for (std::size_t k = 0; k < kLen; ++k) {
                bufs[i][k] = pattern(9, i, k);
              }
              if (i == 2) {  // the first leaves, the second opens the batch: now the others
                opened = true;
                while (!go.load()) {
                  std::this_thread::yield();
                }
              }
              RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[1], bufs[i].data(), kLen, tag_of(9, 0), 0,
                                                &reqs[i], on_done, &called));
              sent.fetch_add(1);
            }
            // Sent after the burst (once the holder let go: it takes the whole lock, which
            // flushes the batch before it).
            while (!released.load()) {
              std::this_thread::yield();
            }
            for (std::size_t k = 0; k < kLen; ++k) {
              last[k] = pattern(9, kBurst, k);
            }
            RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[1], last.data(), kLen, tag_of(9, 0),
                                              RDMX_SEND_FLUSH, &last_req, nullptr, nullptr));
          });
          while (!opened.load()) {
            std::this_thread::yield();
          }
          {
            const auto shared = go_beside_shared_side(rank, w, go, sent, kBurst);
            RDMX_CHECK_EQ(rank, called.load(), 0);  // callbacks run in progress only
          }
          released = true;
          poster.join();  // after the lock is let go: a send that waited for it ends now
          const auto t0 = std::chrono::steady_clock::now();
          while (called.load() < kBurst && seconds_since(t0) < 20.0) {
            (void)rdmx_worker_progress(w);
          }
          RDMX_CHECK_EQ(rank, called.load(), kBurst);
          for (rdmx_request_t& r : reqs) {
            RDMX_CHECK_OK(rank, rdmx_request_test(&r, nullptr));
          }
          RDMX_CHECK_OK(rank, wait_request(rank, w, &last_req, nullptr, "send after the burst"));
          rdmx_stats_t after{};
          RDMX_CHECK_OK(rank, rdmx_worker_stats(w, &after));
          // All but the first left in one packet.
          RDMX_CHECK_EQ(rank, after.coalesced_msgs - before.coalesced_msgs,
                        static_cast<std::uint64_t>(kBurst - 1));
          RDMX_CHECK_EQ(rank, after.coalesced_batches - before.coalesced_batches, 1u);
        } else {
          std::vector<std::array<std::uint8_t, kLen + 8>> bufs(kBurst + 1);
          std::vector<rdmx_request_t> reqs(kBurst + 1);
          for (int i = 0; i <= kBurst; ++i) {
            RDMX_CHECK_OK(rank, rdmx_tag_recv(w, bufs[i].data(), bufs[i].size(), s.uids[0],
                                              tag_of(9, 0), kExact, &reqs[i], nullptr, nullptr));
          }
          for (int i = 0; i <= kBurst; ++i) {
            rdmx_status_t st{};
            RDMX_CHECK_OK(rank, wait_request(rank, w, &reqs[i], &st, "burst receive"));
            RDMX_CHECK_EQ(rank, st.length, kLen);
            for (std::size_t k = 0; k < kLen; ++k) {
              RDMX_CHECK_EQ(rank, bufs[i][k], pattern(9, i, k));
            }
          }
        }
        quiesce(rank, s);
        close_session(rank, s);
      },
      RunOptions{.timeout = std::chrono::seconds(120)}));
}

// The contention counters (mt_*, rdmx/stats.def) count what they say: sends under the shared side
// and under the whole lock, each once, and each kind of wait. Rank 0 sends 8-byte messages from a
// thread of its own: two alone (a send with a request, and an inject), one while this thread
// holds the peer's post lock, a synchronous one while this thread holds the shared side of the
// worker lock, and one while this thread holds the whole lock (it waits, then leaves under the
// shared side); then, from this thread, a rendezvous one, whose inject is refused first (counted
// on neither side). Rank 1 posts a receive from a thread while this thread holds the matcher's
// lock.
TEST_P(ThreadsTest, ContentionCountersCountSharedAndLockedSendsAndEachWait) {
  RDMX_REQUIRE_DEVICE();
  const rdmx_transport_t transport = GetParam();
  constexpr std::size_t kLen = 8;
  constexpr int kSends = 5;  // eager: the second injected, the fourth synchronous
  constexpr std::size_t kRndvLength = 70000;
  const auto counters = [](Rank& rank, rdmx_worker_t* w) {
    rdmx_stats_t st{};
    RDMX_CHECK_OK(rank, rdmx_worker_stats(w, &st));
    return st;
  };
  // Runs `call` on a thread with its own context while this thread holds the shared side and
  // `lock`, until the call waits for `lock` once (its waits() moves on by one), not done yet; then
  // lets both go and checks the call is done.
  const auto wait_once_for = [](Rank& rank, rdmx_worker_t* w, transport::ShortLock& lock,
                                const std::function<void()>& call) {
    const std::uint64_t before = lock.waits();
    std::atomic<bool> go{false};
    std::atomic<bool> done{false};
    std::thread caller = start_with_context(rank, w, go, [&] {
      call();
      done = true;
    });
    {
      const auto shared = transport::debug::hold_worker_lock_shared(w);
      const std::lock_guard<transport::ShortLock> held(lock);
      go = true;
      const auto t0 = std::chrono::steady_clock::now();
      while (lock.waits() == before && seconds_since(t0) < 20.0) {
        std::this_thread::yield();
      }
      RDMX_CHECK_EQ(rank, lock.waits(), before + 1);
      RDMX_CHECK(rank, !done.load());
    }
    caller.join();
    RDMX_CHECK(rank, done.load());
  };
  ASSERT_TRUE(run_ranks(
      2,
      [&](Rank& rank) {
        Session s = open_settled(rank, transport);
        rdmx_worker_t* const w = s.worker;
        // UD: each send within the smallest congestion window, acknowledged before the next.
        const auto settle = [&] {
          const auto t0 = std::chrono::steady_clock::now();
          while (seconds_since(t0) < 0.3) {
            (void)rdmx_worker_progress(w);
          }
        };
        if (rank.rank() == 0) {
          const rdmx_stats_t before = counters(rank, w);
          std::array<std::vector<std::uint8_t>, kSends> bufs;
          for (int i = 0; i < kSends; ++i) {
            bufs[i].resize(kLen);
            for (std::size_t k = 0; k < kLen; ++k) {
              bufs[i][k] = pattern(12, i, k);
            }
          }
          const auto send_eager = [&](int i) {
            rdmx_request_t req;
            RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[1], bufs[i].data(), kLen, tag_of(12, i), 0,
                                              &req, nullptr, nullptr));
            RDMX_CHECK_OK(rank, rdmx_request_test(&req, nullptr));  // left at once
          };
          // Alone: under the shared side, no wait.
          {
            std::atomic<bool> go{true};
            start_with_context(rank, w, go, [&] {
              send_eager(0);
              RDMX_CHECK_OK(rank,
                            rdmx_tag_inject(s.eps[1], bufs[1].data(), kLen, tag_of(12, 1), 0));
            }).join();
          }
          settle();
          // Beside this thread's hold of the peer's post lock: it waits for it once.
          wait_once_for(rank, w, transport::debug::post_lock(w, s.uids[1]), [&] { send_eager(2); });
          settle();
          // A synchronous send takes the whole lock: it waits for this thread's shared side.
          {
            rdmx_request_t sync_req;
            std::atomic<bool> go{false};
            std::thread sender = start_with_context(rank, w, go, [&] {
              RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[1], bufs[3].data(), kLen, tag_of(12, 3),
                                                RDMX_SEND_SYNC, &sync_req, nullptr, nullptr));
            });
            {
              const auto shared = transport::debug::hold_worker_lock_shared(w);
              go = true;
              await_lock_waiter(rank, w);
            }
            sender.join();
            RDMX_CHECK_OK(rank, wait_request(rank, w, &sync_req, nullptr, "synchronous send"));
          }
          settle();
          // An eager send that waits for the whole lock, which this thread holds, then leaves
          // under the shared side.
          {
            std::atomic<bool> go{false};
            std::atomic<bool> sent{false};
            std::thread sender = start_with_context(rank, w, go, [&] {
              send_eager(4);
              sent = true;
            });
            {
              const auto whole = transport::debug::hold_worker_lock(w);
              go = true;
              await_lock_waiter(rank, w);
              RDMX_CHECK(rank, !sent.load());
            }
            sender.join();
            RDMX_CHECK(rank, sent.load());
          }
          // A rendezvous one: never injected (refused under the shared side, then under the
          // whole lock), then sent under the whole lock.
          std::vector<std::uint8_t> rndv(kRndvLength);
          for (std::size_t k = 0; k < rndv.size(); ++k) {
            rndv[k] = pattern(12, kSends, k);
          }
          RDMX_CHECK_EQ(rank,
                        rdmx_tag_inject(s.eps[1], rndv.data(), rndv.size(), tag_of(12, kSends), 0),
                        RDMX_ERR_NO_RESOURCE);
          rdmx_request_t rndv_req;
          RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[1], rndv.data(), rndv.size(), tag_of(12, kSends),
                                            0, &rndv_req, nullptr, nullptr));
          RDMX_CHECK_OK(rank, wait_request(rank, w, &rndv_req, nullptr, "rendezvous send"));
          const rdmx_stats_t after = counters(rank, w);
          RDMX_CHECK_EQ(rank, after.mt_shared_sends - before.mt_shared_sends, 4u);
          RDMX_CHECK_EQ(rank, after.mt_locked_sends - before.mt_locked_sends, 2u);
          RDMX_CHECK_EQ(rank, after.mt_post_lock_waits - before.mt_post_lock_waits, 1u);
          RDMX_CHECK_EQ(rank, after.mt_lock_waits - before.mt_lock_waits, 2u);
          const std::uint64_t progress = after.mt_progress_takes - before.mt_progress_takes;
          RDMX_CHECK(rank, progress > 0);  // settle and the wait polled
          // Each progress take, locked send and refused inject is a whole take; so are the four
          // contexts' set-up and this read.
          RDMX_CHECK(rank,
                     after.mt_whole_takes - before.mt_whole_takes >= progress + 2 + 1 + 4 + 1);
        } else {
          const rdmx_stats_t before = counters(rank, w);
          std::array<std::vector<std::uint8_t>, kSends> bufs;
          std::array<rdmx_request_t, kSends> reqs;
          for (int i = 0; i < kSends; ++i) {
            bufs[i].resize(kLen + 8);
          }
          const auto post = [&](int i) {
            RDMX_CHECK_OK(rank, rdmx_tag_recv(w, bufs[i].data(), bufs[i].size(), s.uids[0],
                                              tag_of(12, i), kExact, &reqs[i], nullptr, nullptr));
          };
          post(0);
          post(1);
          // Beside this thread's hold of the matcher's lock: the receive waits for it once.
          wait_once_for(rank, w, transport::debug::match_lock(w), [&] { post(2); });
          post(3);
          post(4);
          std::vector<std::uint8_t> rndv(kRndvLength + 8);
          rdmx_request_t rndv_req;
          RDMX_CHECK_OK(rank,
                        rdmx_tag_recv(w, rndv.data(), rndv.size(), s.uids[0], tag_of(12, kSends),
                                      kExact, &rndv_req, nullptr, nullptr));
          for (int i = 0; i < kSends; ++i) {
            rdmx_status_t st{};
            RDMX_CHECK_OK(rank, wait_request(rank, w, &reqs[i], &st, "receive"));
            RDMX_CHECK_EQ(rank, st.length, kLen);
            for (std::size_t k = 0; k < kLen; ++k) {
              RDMX_CHECK_EQ(rank, bufs[i][k], pattern(12, i, k));
            }
          }
          rdmx_status_t rst{};
          RDMX_CHECK_OK(rank, wait_request(rank, w, &rndv_req, &rst, "rendezvous receive"));
          RDMX_CHECK_EQ(rank, rst.length, kRndvLength);
          for (std::size_t k = 0; k < kRndvLength; ++k) {
            if (rndv[k] != pattern(12, kSends, k)) {
              rank.fail(__FILE__, __LINE__, "rendezvous byte " + std::to_string(k) + " differs");
              break;
            }
          }
          const rdmx_stats_t after = counters(rank, w);
          RDMX_CHECK_EQ(rank, after.mt_match_lock_waits - before.mt_match_lock_waits, 1u);
          RDMX_CHECK_EQ(rank, after.mt_post_lock_waits - before.mt_post_lock_waits, 0u);
        }
        quiesce(rank, s);
        close_session(rank, s);
      },
      RunOptions{.timeout = std::chrono::seconds(120)}));
}

INSTANTIATE_TEST_SUITE_P(Transports, ThreadsTest,
                         ::testing::Values(RDMX_TRANSPORT_RC, RDMX_TRANSPORT_UD),
                         [](const ::testing::TestParamInfo<rdmx_transport_t>& p) {
                           return std::string(p.param == RDMX_TRANSPORT_RC ? "Rc" : "Ud");
                         });

// rdmx_worker_idle in thread mode multi (each thread its own count, outside the lock): a thread's
// idle turns nap once they have found nothing for nap_after_us, and never with RDMX_IDLE_NEVER.
TEST(Threads, IdleTurnsNapPastTheThreshold) {
  RDMX_REQUIRE_DEVICE();
  ASSERT_TRUE(run_ranks(1, [](Rank& rank) {
    rdmx_worker_t* w = lone_worker(rank, RDMX_THREAD_MODE_MULTI);
    const auto counts = [&] {
      rdmx_stats_t st{};
      RDMX_CHECK_OK(rank, rdmx_worker_stats(w, &st));
      return std::pair{st.idle_yields, st.idle_naps};
    };
    // Idle turns on a thread of its own (its clock steps until it has measured the TSC's rate:
    // kIdleLoopGapUs) for at least 100 ms, and until `done` or 3 s: a turn more than the loop
    // gap after the last starts the count again, and a loaded guest (ci/test at -j2) can
    // deschedule the thread for that long, so one 100-ms try was not always enough.
    const auto idle_until = [&](std::uint32_t nap_after_us, const auto& done) {
      std::thread([&] {
        const auto t0 = std::chrono::steady_clock::now();
        int turns = 0;
        int busy = 0;
        while (seconds_since(t0) < 0.1 || (!done() && seconds_since(t0) < 3.0)) {
          const int found = rdmx_worker_progress(w);
          RDMX_CHECK(rank, found >= 0);
          rdmx_worker_idle(w, found, 20, nap_after_us);
          ++turns;
          busy += found != 0 ? 1 : 0;
        }
        const auto [y, n] = counts();
        std::fprintf(stderr,
                     "nap_after_us %u: %d turns (%d busy) in %.3f s: %llu yields, %llu naps\n",
                     nap_after_us, turns, busy, seconds_since(t0),
                     static_cast<unsigned long long>(y), static_cast<unsigned long long>(n));
      }).join();
    };
    const std::uint64_t yields = counts().first;
    const std::uint64_t naps = counts().second;
    idle_until(RDMX_IDLE_NEVER, [&] { return counts().first > yields; });
    RDMX_CHECK(rank, counts().first > yields);
    RDMX_CHECK_EQ(rank, counts().second, naps);
    idle_until(1000, [&] { return counts().second > naps; });
    RDMX_CHECK(rank, counts().second > naps);
    rdmx_worker_destroy(w);
  }));
}

// Past max_threads a thread's sends fail, naming the cause, and its other calls work; a thread
// that has exited gives its context to the next new one.
TEST(Threads, BoundedContextsAreReusedAfterAThreadExits) {
  RDMX_REQUIRE_DEVICE();
  ASSERT_TRUE(run_ranks(1, [](Rank& rank) {
    // max_threads 3: the main thread's context and two more.
    rdmx_worker_t* w = lone_worker(rank, RDMX_THREAD_MODE_MULTI, 3);
    RDMX_CHECK_EQ(rank, transport::debug::caller_send_context(w), 0);
    std::atomic<int> release{0};
    std::atomic<int> a{-1}, b{-1};  // polled below while the threads write them
    std::thread ta([&] {
      a = transport::debug::caller_send_context(w);
      while (release.load() < 1) {
        std::this_thread::yield();
      }
    });
    std::thread tb([&] {
      b = transport::debug::caller_send_context(w);
      while (release.load() < 2) {
        std::this_thread::yield();
      }
    });
    while (a < 0 || b < 0) {
      std::this_thread::yield();
    }
    RDMX_CHECK(rank, a >= 1 && b >= 1 && a != b);
    // A third thread: its sends are refused, naming the cause; its other calls work (they
    // borrow context 0).
    const void* addr = nullptr;
    std::size_t addr_len = 0;
    rdmx_ep_t* self = nullptr;
    RDMX_CHECK_OK(rank, rdmx_worker_address(w, &addr, &addr_len));
    RDMX_CHECK_OK(rank, rdmx_ep_create(w, addr, addr_len, &self));
    int c = 0, send_rc = 0, recv_rc = 1, cancel_rc = 1, wait_rc = 0;
    std::thread([&] {
      c = transport::debug::caller_send_context(w);
      std::uint8_t byte = 0;
      rdmx_request_t sreq, rreq;
      send_rc = rdmx_tag_send(self, &byte, 1, 8, 0, &sreq, nullptr, nullptr);
      recv_rc = rdmx_tag_recv(w, &byte, 1, RDMX_ANY_SOURCE, 7, kExact, &rreq, nullptr, nullptr);
      cancel_rc = rdmx_request_cancel(w, &rreq);
      wait_rc = rdmx_request_wait(w, &rreq, nullptr, 10000);
    }).join();
    RDMX_CHECK_EQ(rank, c, RDMX_ERR_TOO_MANY_THREADS);
    RDMX_CHECK_EQ(rank, send_rc, RDMX_ERR_TOO_MANY_THREADS);
    RDMX_CHECK_EQ(rank, recv_rc, RDMX_OK);
    RDMX_CHECK_EQ(rank, cancel_rc, RDMX_OK);
    RDMX_CHECK_EQ(rank, wait_rc, RDMX_ERR_CANCELED);
    release.store(1);
    ta.join();  // a's context is free from now
    int d = -1;
    std::thread([&] { d = transport::debug::caller_send_context(w); }).join();
    RDMX_CHECK_EQ(rank, d, a.load());
    release.store(2);
    tb.join();
    rdmx_ep_destroy(self);
    rdmx_worker_destroy(w);
  }));
}

// Threads blocked in rdmx_request_wait when the worker is destroyed: their requests fail and they
// return; destroy frees the worker only once they have.
TEST(Threads, DestroyReleasesThreadsBlockedInWaits) {
  RDMX_REQUIRE_DEVICE();
  ASSERT_TRUE(run_ranks(1, [](Rank& rank) {
    rdmx_worker_t* w = lone_worker(rank, RDMX_THREAD_MODE_MULTI);
    std::vector<rdmx_request_t> reqs(kThreads);
    std::vector<std::uint8_t> bytes(kThreads);
    std::vector<int> rcs(kThreads, 1);
    std::vector<rdmx_status_t> sts(kThreads);
    std::atomic<int> posted{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        if (rdmx_tag_recv(w, &bytes[t], 1, RDMX_ANY_SOURCE, 1000 + t, kExact, &reqs[t], nullptr,
                          nullptr) != RDMX_OK) {
          rcs[t] = -100;
          posted.fetch_add(1);
          return;
        }
        posted.fetch_add(1);
        rcs[t] = rdmx_request_wait(w, &reqs[t], &sts[t], -1);  // nothing will ever match
      });
    }
    while (posted.load() < kThreads) {
      std::this_thread::yield();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // into their waits
    const auto t0 = std::chrono::steady_clock::now();
    rdmx_worker_destroy(w);
    for (auto& th : threads) {
      th.join();
    }
    for (int t = 0; t < kThreads; ++t) {
      RDMX_CHECK_EQ(rank, rcs[t], RDMX_ERR_CANCELED);
    }
    RDMX_CHECK(rank, seconds_since(t0) < 10.0);
  }));
}

// A progress call leaves the worker lock to a call waiting for it (here a receive): a thread that
// polls in a loop would otherwise take the lock back after each of its turns (the worker lock is
// not fair), and the waiting post would wait for the poller's idle yield.
TEST(Threads, ProgressDefersToACallWaitingForTheLock) {
  RDMX_REQUIRE_DEVICE();
  ASSERT_TRUE(run_ranks(1, [](Rank& rank) {
    rdmx_worker_t* w = lone_worker(rank, RDMX_THREAD_MODE_MULTI);
    auto held = transport::debug::hold_worker_lock(w);
    std::uint8_t byte = 0;
    rdmx_request_t req;
    std::atomic<int> recv_rc{1};
    std::thread receiver([&] {
      recv_rc = rdmx_tag_recv(w, &byte, 1, RDMX_ANY_SOURCE, 9, kExact, &req, nullptr, nullptr);
    });
    while (transport::debug::lock_waiters(w) == 0) {
      std::this_thread::yield();
    }
    // The receive waits for the lock: a poller returns at once, without trying it.
    int progress_rc = -1;
    std::thread([&] { progress_rc = rdmx_worker_progress(w); }).join();
    RDMX_CHECK_EQ(rank, progress_rc, 0);
    RDMX_CHECK_EQ(rank, transport::debug::progress_deferrals(w), 1u);
    held.unlock();
    receiver.join();
    RDMX_CHECK_EQ(rank, recv_rc.load(), RDMX_OK);
    // Nobody waits now: progress polls (it counts no deferral).
    RDMX_CHECK_EQ(rank, transport::debug::lock_waiters(w), 0);
    RDMX_CHECK(rank, rdmx_worker_progress(w) >= 0);
    RDMX_CHECK_EQ(rank, transport::debug::progress_deferrals(w), 1u);
    RDMX_CHECK_OK(rank, rdmx_request_cancel(w, &req));
    RDMX_CHECK_EQ(rank, rdmx_request_wait(w, &req, nullptr, 10000), RDMX_ERR_CANCELED);
    rdmx_worker_destroy(w);
  }));
}

// The other modes take no lock and keep one send context, whatever thread calls.
TEST(Threads, SerializedModeKeepsOneContext) {
  RDMX_REQUIRE_DEVICE();
  ASSERT_TRUE(run_ranks(1, [](Rank& rank) {
    rdmx_worker_t* w = lone_worker(rank, RDMX_THREAD_MODE_SERIALIZED);
    int other = -1;
    std::thread([&] { other = transport::debug::caller_send_context(w); }).join();
    RDMX_CHECK_EQ(rank, other, 0);
    RDMX_CHECK_EQ(rank, transport::debug::send_context_counts(w).size(), 1u);
    rdmx_worker_destroy(w);
  }));
}

}  // namespace
}  // namespace rdmx::test
