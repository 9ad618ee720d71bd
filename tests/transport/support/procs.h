// Multi-process tests without a network: the test forks N children ("ranks"); each creates its
// own worker AFTER the fork (verbs resources must not cross a fork) and exchanges address blobs
// and barriers with the others through the parent over socketpairs.
//
// Children must not use gtest assertions (their failures would be lost in the child): they use
// RDMX_CHECK, which prints "rank R: file:line: message" and exits the child with status 1. The
// parent turns any non-zero exit, signal or timeout into a test failure.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "rdmx/rdmx.h"

namespace rdmx::test {

using Blob = std::vector<std::uint8_t>;

class Rank {
 public:
  Rank(int rank, int size, int fd) : rank_(rank), size_(size), fd_(fd) {}
  int rank() const { return rank_; }
  int size() const { return size_; }
  // Every rank contributes `data`; every rank gets all contributions in rank order.
  std::vector<Blob> allgather(const void* data, std::size_t length);
  void barrier() { (void)allgather(nullptr, 0); }
  [[noreturn]] void fail(const char* file, int line, const std::string& message) const;

 private:
  int rank_;
  int size_;
  int fd_;
};

struct RunOptions {
  std::chrono::seconds timeout{120};
};

// Forks `n` ranks running fn; waits for all. Fails when a rank fails, dies or times out (then
// every rank is killed).
::testing::AssertionResult run_ranks(int n, const std::function<void(Rank&)>& fn,
                                     RunOptions options = {});

// --- helpers for rank bodies

// "rxe1 rxe2" -> {"rxe1", "rxe2"}; empty without a device environment.
std::vector<std::string> devices();

// A config from the defaults and the RDMX_* environment, naming `device` (empty: the default,
// the first active device).
rdmx_config_t test_config(const std::string& device, rdmx_transport_t transport);

// Progresses until the request completes or `timeout` passes (then fails the rank).
// `what` names the request in the failure message.
int wait_request(Rank& rank, rdmx_worker_t* worker, rdmx_request_t* request, rdmx_status_t* status,
                 const char* what = "request",
                 std::chrono::milliseconds timeout = std::chrono::seconds(30));

double seconds_since(std::chrono::steady_clock::time_point t0);

// Whether `fd` becomes readable within `ms` (a sleeper's event fd: rdmx_worker_event_fd).
bool readable(int fd, int ms);

// Drops CAP_IPC_LOCK (root pins without limit otherwise) and lowers RLIMIT_MEMLOCK to `bytes`,
// so that registering memory beyond it fails as it does for a user with a small `ulimit -l`.
// Call it in a rank before its worker exists. false: the kernel refused.
bool limit_pinning(std::size_t bytes);

}  // namespace rdmx::test

#define RDMX_CHECK(rank, cond)                                 \
  do {                                                         \
    if (!(cond)) {                                             \
      (rank).fail(__FILE__, __LINE__, "check failed: " #cond); \
    }                                                          \
  } while (0)

#define RDMX_CHECK_EQ(rank, a, b)                                                                \
  do {                                                                                           \
    const auto _va = (a);                                                                        \
    const auto _vb = (b);                                                                        \
    if (!(_va == _vb)) {                                                                         \
      (rank).fail(__FILE__, __LINE__,                                                            \
                  std::string(#a " == " #b ": ") + std::to_string(static_cast<long long>(_va)) + \
                      " vs " + std::to_string(static_cast<long long>(_vb)));                     \
    }                                                                                            \
  } while (0)

#define RDMX_CHECK_OK(rank, expr)                                                              \
  do {                                                                                         \
    const int _rc = (expr);                                                                    \
    if (_rc != RDMX_OK) {                                                                      \
      (rank).fail(__FILE__, __LINE__,                                                          \
                  std::string(#expr " -> ") + std::to_string(_rc) + " " + rdmx_strerror(_rc)); \
    }                                                                                          \
  } while (0)

namespace rdmx::test {

// A worker with an endpoint to every other rank (all-to-all), set up inside a rank.
struct Session {
  rdmx_worker_t* worker = nullptr;
  std::vector<rdmx_ep_t*> eps;      // eps[r]: to rank r (nullptr for ourselves unless self)
  std::vector<std::uint64_t> uids;  // uids[r]: rank r's worker uid
};

// Creates the worker (config from test_config() and `tweak`), exchanges addresses and creates
// endpoints to `peers` (every other rank when empty). Fails the rank on any error.
Session open_session(Rank& rank, const std::string& device, rdmx_transport_t transport,
                     const std::function<void(rdmx_config_t&)>& tweak = {},
                     const std::vector<int>& peers = {});
// Two ranks: a worker with `cfg` and an endpoint to the other rank, with no traffic yet (the
// first messages make the connection). Fails the rank on any error.
struct Pair {
  rdmx_worker_t* worker = nullptr;
  rdmx_ep_t* ep = nullptr;
};
Pair open_pair(Rank& rank, rdmx_config_t cfg);
// Standard sends complete once buffered, so a rank must keep progressing until its peers have
// its messages (UD retransmits from the sender). quiesce() exchanges a synchronous "fin" with
// every endpoint's peer: once it returns, everything sent before it was received, both ways.
// `timeout` bounds the wait for the slowest peer to get there.
void quiesce(Rank& rank, Session& s, std::chrono::milliseconds timeout = std::chrono::seconds(30));
// Progresses until a probe finds a message matching (src, tag, mask), or fails the rank after
// `timeout`. With `msg`, a matched probe (the message is removed, for rdmx_tag_msg_recv).
rdmx_status_t probe_until(Rank& rank, Session& s, std::uint64_t src, std::uint64_t tag,
                          std::uint64_t mask, std::chrono::milliseconds timeout,
                          rdmx_message_t** msg = nullptr);
// Destroys endpoints and worker; fails the rank unless every wr_id was accounted for.
void close_session(Rank& rank, Session& s);

// The device for a rank: the first device, or (two_devices) rank r on device r % 2.
std::string device_for(int rank, bool two_devices);

}  // namespace rdmx::test
