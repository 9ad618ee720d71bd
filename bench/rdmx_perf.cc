// rdmx_perf: point-to-point benchmarks of rdmx over its public C API only (include/rdmx/rdmx.h),
// in the manner of ucx_perftest and the OSU micro-benchmarks.
//
//   rdmx_perf [options] [lat] [bw] [rate]      fork a server, run the tests against it
//   rdmx_perf -s [-p PORT] [-d DEV]            server: serve one client, then exit
//   rdmx_perf -c HOST [-p PORT] [options] ...  client of a server started with -s
//
// Tests (the client drives; the server follows its commands over a TCP control channel, which
// also carries the worker address blobs and is never on the measured path):
//   lat   ping-pong; prints the half round trip averaged over the iterations (osu_latency)
//   bw    the client posts a window of non-blocking sends, waits for them and for the
//         receiver's 4-byte ack of the window; MB/s with MB = 10^6 bytes (osu_bw)
//   rate  as bw, in messages per second; 8-byte messages unless -m says otherwise
//   -P N  memory: the client's registered receive memory (rdmx_stats_t.recv_mem_bytes, and
//         ring_mem_bytes for the RC eager rings) and QP count with 0, 1, 2, 4 ... N connected
//         peers (N server workers in one process); each peer's wire-up is kWireupRounds round
//         trips, enough for the client to give it an eager ring (RC)
//
// Sizes are powers of two from -m MIN up to MAX (default: the eager limit). Above the eager limit
// (or from RDMX_RNDV_THRESH) messages go by rendezvous. The eager limit is the config's
// (RDMX_EAGER_LIMIT) capped by the transport (RC: large buffer; UD: one packet); the client
// finds it right after wire-up with probe messages (binary search), a probe that went by
// rendezvous counting in rdmx_stats_t.rndv_sends. Above 64 KiB the default iterations, warm-up
// and window shrink with the size (a byte budget per size, see iterations()).
//
// Every wait is bounded (-W): a lost message ends the run with a message, never a hang.
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "bench/ctrl_channel.h"
#include "rdmx/rdmx.h"

namespace {

using rdmx::bench::Channel;
using rdmx::bench::Msg;
using rdmx::bench::Op;
using Clock = std::chrono::steady_clock;

enum class Test : std::uint8_t { kLat = 0, kBw = 1, kRate = 2, kMem = 3 };

const char* test_name(Test t) {
  switch (t) {
    case Test::kLat:
      return "lat";
    case Test::kBw:
      return "bw";
    case Test::kRate:
      return "rate";
    case Test::kMem:
      return "peers";
  }
  return "?";
}

// Tags, matched with a full mask. The low bits of kTagConn carry the server worker's index.
constexpr std::uint64_t kTagConn = 0x52444d5800000000ull;
// Round trips of a worker's wire-up: more than the messages after which an RC receiver gives a
// peer an eager ring (transport's kRingOfferAfter, 16), so -P shows the rings' memory too.
constexpr int kWireupRounds = 20;
constexpr std::uint64_t kTagProbe = 0x52444d5900000000ull;
constexpr std::uint64_t kTagLat = 0x52444d5a00000001ull;
constexpr std::uint64_t kTagBw = 0x52444d5a00000002ull;
constexpr std::uint64_t kTagAck = 0x52444d5a00000003ull;
constexpr std::uint64_t kFullMask = ~0ull;
constexpr std::size_t kAckBytes = 4;

// Iteration defaults (osu_latency: 10000, 1000 above 8 KiB; warm-up 100).
constexpr long kDefaultIters = 10000;
constexpr long kDefaultItersLarge = 1000;
constexpr std::size_t kLargeAbove = 8192;
// Above this size (rendezvous territory) the defaults are byte budgets, so that a sweep to
// 64 MiB stays short on a slow (emulated) device: kSizeBudget bytes measured per size, at most
// kWindowBudget bytes in flight per bw window.
constexpr std::size_t kBudgetAbove = 64 * 1024;
constexpr std::size_t kSizeBudget = std::size_t{256} << 20;
constexpr std::size_t kWindowBudget = std::size_t{16} << 20;
constexpr long kDefaultWarmup = 100;
constexpr unsigned kDefaultWindow = 64;
constexpr std::size_t kDefaultRateSize = 8;
constexpr std::uint16_t kDefaultPort = 13337;
constexpr int kCtrlTimeoutMs = 120000;  // a command may include a whole test on the peer
constexpr unsigned kMaxPeers = 256;

struct Options {
  enum class Role : std::uint8_t { kFork, kServer, kClient } role = Role::kFork;
  std::string host;
  std::uint16_t port = kDefaultPort;
  rdmx_transport_t transport = RDMX_TRANSPORT_RC;
  std::vector<Test> tests;
  bool sizes_given = false;
  std::size_t min_size = 1;
  std::size_t max_size = 0;               // 0: the eager limit
  std::vector<std::size_t> size_list;     // -m A,B,C: exactly these sizes (else MIN..MAX doubling)
  std::size_t size_budget = kSizeBudget;  // -b: bytes measured per size above kBudgetAbove
  long iters = -1;                        // -1: by size
  long warmup = kDefaultWarmup;
  bool warmup_given = false;
  unsigned window = kDefaultWindow;
  bool window_given = false;
  unsigned peers = 0;
  std::string server_dev;  // fork mode: the server's; -s: ours
  std::string client_dev;
  bool full = false;       // extra columns
  bool spin = false;       // own progress loop instead of rdmx_request_wait
  bool phases = false;     // bw/rate: time the phases of each window on both sides
  unsigned nap_after = 0;  // -S: nanosleep after this many idle progress calls (0: never)
  int wait_ms = 30000;
  int watchdog_s = 900;
};

[[noreturn]] void die(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void die(const char* fmt, ...) {
  std::fflush(stdout);
  std::fprintf(stderr, "rdmx_perf: ");
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "\n");
  std::exit(2);
}

void check(int rc, const char* what) {
  if (rc != RDMX_OK) {
    die("%s: %s (%d)", what, rdmx_strerror(rc), rc);
  }
}

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Per-iteration timestamps come from the TSC, as perftest's do: in an emulated guest whose
// clocksource is not the TSC every clock_gettime is a system call (about 1 us), which would
// weigh on every sample. Ticks are converted with the rate measured over the whole run.
std::uint64_t ticks() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return static_cast<std::uint64_t>(Clock::now().time_since_epoch().count());
#endif
}

// Waits for requests: with rdmx_request_wait (what an application does), or with the
// benchmark's own loop of rdmx_worker_progress + rdmx_request_test (-S), which counts the
// progress calls.
class Waiter {
 public:
  Waiter(rdmx_worker_t* worker, const Options& o)
      : worker_(worker), timeout_ms_(o.wait_ms), spin_(o.spin), nap_after_(o.nap_after) {}

  void wait(rdmx_request_t* r, const char* what) {
    rdmx_status_t st{};
    int rc = RDMX_OK;
    if (spin_) {
      // The clock is read only once a wait has lasted 4096 progress calls: in an emulated
      // guest without a stable TSC every clock_gettime is a system call.
      Clock::time_point deadline{};
      std::uint64_t n = 0;
      while ((rc = rdmx_request_test(r, &st)) == RDMX_INPROGRESS) {
        const int p = rdmx_worker_progress(worker_);
        if (p < 0) {
          die("rdmx_worker_progress while waiting for %s: %s", what, rdmx_strerror(p));
        }
        ++progress_calls_;
        // -y: give the CPU away for real (a nanosleep, unlike sched_yield, lets any other
        // runnable thread run, e.g. the kernel's deferred network work).
        if (p == 0 && nap_after_ != 0 && ++idle_ >= nap_after_) {
          idle_ = 0;
          const timespec ts{0, 1000};
          nanosleep(&ts, nullptr);
        }
        if ((++n & 4095) == 0) {
          const Clock::time_point now = Clock::now();
          if (deadline == Clock::time_point{}) {
            deadline = now + std::chrono::milliseconds(timeout_ms_);
          } else if (now > deadline) {
            rc = RDMX_ERR_TIMED_OUT;
            break;
          }
        }
      }
    } else {
      rc = rdmx_request_wait(worker_, r, &st, timeout_ms_);
    }
    if (rc == RDMX_ERR_TIMED_OUT) {
      die("%s did not complete within %d ms (-W)", what, timeout_ms_);
    }
    if (rc != RDMX_OK) {
      die("%s completed with %s (%d)", what, rdmx_strerror(rc), rc);
    }
  }
  void wait_all(std::vector<rdmx_request_t>& rs, std::size_t n, const char* what) {
    for (std::size_t i = 0; i < n; ++i) {
      wait(&rs[i], what);
    }
  }
  std::uint64_t progress_calls() const { return progress_calls_; }

 private:
  rdmx_worker_t* worker_;
  int timeout_ms_;
  bool spin_;
  unsigned nap_after_;
  unsigned idle_ = 0;
  std::uint64_t progress_calls_ = 0;
};

rdmx_worker_t* make_worker(const std::string& device, rdmx_transport_t transport) {
  rdmx_config_t c;
  rdmx_config_init(&c);
  check(rdmx_config_from_env(&c), "rdmx_config_from_env");
  if (!device.empty()) {
    c.device = device.c_str();
  }
  c.transport = transport;
  rdmx_worker_t* w = nullptr;
  check(rdmx_worker_create(&c, &w), "rdmx_worker_create");
  return w;
}

std::vector<std::uint8_t> address_of(rdmx_worker_t* w) {
  const void* a = nullptr;
  std::size_t n = 0;
  check(rdmx_worker_address(w, &a, &n), "rdmx_worker_address");
  const auto* p = static_cast<const std::uint8_t*>(a);
  return {p, p + n};
}

void post_send(rdmx_ep_t* ep, const void* buf, std::size_t n, std::uint64_t tag, unsigned flags,
               rdmx_request_t* r) {
  check(rdmx_tag_send(ep, buf, n, tag, flags, r, nullptr, nullptr), "rdmx_tag_send");
}

void post_recv(rdmx_worker_t* w, void* buf, std::size_t n, std::uint64_t tag, rdmx_request_t* r) {
  check(rdmx_tag_recv(w, buf, n, RDMX_ANY_SOURCE, tag, kFullMask, r, nullptr, nullptr),
        "rdmx_tag_recv");
}

// The payload pattern both sides expect for a size.
void fill_pattern(std::vector<char>& buf, std::size_t size) {
  for (std::size_t i = 0; i < buf.size(); ++i) {
    buf[i] = static_cast<char>((i * 7 + size) & 0xff);
  }
}
bool has_pattern(const std::vector<char>& buf, std::size_t size) {
  for (std::size_t i = 0; i < size; ++i) {
    if (buf[i] != static_cast<char>((i * 7 + size) & 0xff)) {
      return false;
    }
  }
  return true;
}

std::uint64_t rss_kib() {
  std::ifstream in("/proc/self/statm");
  std::uint64_t size = 0;
  std::uint64_t resident = 0;
  in >> size >> resident;
  return resident * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE)) / 1024;
}

std::string loadavg() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

// ------------------------------------------------------------------------------------------
// Server: follows the client's commands.

class Server {
 public:
  Server(const Options& o, Channel& ch) : o_(o), ch_(ch) {}

  int run() {
    const Msg hello = ch_.recv(kCtrlTimeoutMs, Op::kHello);
    const auto transport = static_cast<rdmx_transport_t>(hello.arg[0]);
    const auto n = static_cast<std::size_t>(hello.arg[1]);
    if (n == 0 || n > kMaxPeers) {
      die("server: %zu workers requested", n);
    }
    for (std::size_t i = 0; i < n; ++i) {
      workers_.push_back(make_worker(o_.server_dev, transport));
    }
    for (rdmx_worker_t* w : workers_) {
      const auto blob = address_of(w);
      ch_.send_blob(blob.data(), blob.size());
    }
    client_blob_ = ch_.recv_blob(kCtrlTimeoutMs);
    eps_.assign(n, nullptr);
    waiter_.emplace_back(workers_[0], o_);
    for (;;) {
      idle_until_command();
      const Msg m = ch_.recv_any(kCtrlTimeoutMs);
      Msg done{.op = Op::kDone};
      switch (m.op) {
        case Op::kConnect:
          connect(static_cast<std::size_t>(m.arg[0]), static_cast<std::size_t>(m.arg[1]));
          break;
        case Op::kProbe:
          probe(static_cast<std::size_t>(m.arg[0]), static_cast<std::size_t>(m.arg[1]));
          break;
        case Op::kRun:
          done.arg[0] =
              run_test(static_cast<Test>(m.arg[0]), static_cast<std::size_t>(m.arg[1]),
                       static_cast<long>(m.arg[2]), static_cast<unsigned>(m.arg[3] & 0xffffffffu),
                       (m.arg[3] >> 32) != 0, &done.arg[1]);
          break;
        case Op::kQuit:
          // Answer first, so that both sides tear down together: a UD worker's destroy waits
          // (bounded, 2 s) for the acks of its last messages, which the client sends only
          // from a progress call, i.e. from its own destroy.
          ch_.send(done);
          for (rdmx_ep_t* ep : eps_) {
            if (ep != nullptr) {
              rdmx_ep_destroy(ep);
            }
          }
          for (rdmx_worker_t* w : workers_) {
            rdmx_worker_destroy(w);
          }
          return 0;
        default:
          die("server: unexpected command %u", static_cast<unsigned>(m.op));
      }
      ch_.send(done);
    }
  }

 private:
  // Between commands the workers keep progressing, as an application's would: UD peers are
  // acknowledged and their retransmission timers do not fire because the server looks away.
  void idle_until_command() {
    for (std::uint64_t n = 0;; ++n) {
      for (rdmx_worker_t* w : workers_) {
        (void)rdmx_worker_progress(w);
      }
      // poll(2) costs as much as many progress calls in an emulated guest: look every 16th.
      if ((n & 15) == 0 && ch_.readable()) {
        return;
      }
      if ((n & 1023) == 1023) {
        sched_yield();  // the client may share this CPU
      }
    }
  }

  rdmx_ep_t* ep(std::size_t i) {
    if (eps_[i] == nullptr) {
      check(rdmx_ep_create(workers_[i], client_blob_.data(), client_blob_.size(), &eps_[i]),
            "rdmx_ep_create (server)");
    }
    return eps_[i];
  }

  // Workers [first, first + count) each receive one message from the client and send one.
  void connect(std::size_t first, std::size_t count) {
    if (first + count > workers_.size()) {
      die("server: connect %zu+%zu of %zu workers", first, count, workers_.size());
    }
    for (int round = 0; round < kWireupRounds; ++round) {
      wire_up_round(first, count);
    }
  }

  void wire_up_round(std::size_t first, std::size_t count) {
    std::vector<rdmx_request_t> r(count), s(count);
    std::vector<char> in(8), out(8);
    for (std::size_t j = 0; j < count; ++j) {
      const std::size_t i = first + j;
      post_recv(workers_[i], in.data(), in.size(), kTagConn | i, &r[j]);
      post_send(ep(i), out.data(), out.size(), kTagConn | i, 0, &s[j]);
    }
    // One thread progresses every worker being wired up: each must answer its handshake.
    const auto deadline = Clock::now() + std::chrono::milliseconds(o_.wait_ms);
    for (;;) {
      bool all = true;
      for (std::size_t j = 0; j < count; ++j) {
        (void)rdmx_worker_progress(workers_[first + j]);
        for (rdmx_request_t* q : {&r[j], &s[j]}) {
          const int rc = rdmx_request_test(q, nullptr);
          if (rc == RDMX_INPROGRESS) {
            all = false;
          } else if (rc != RDMX_OK) {
            die("server: wire-up of worker %zu: %s", first + j, rdmx_strerror(rc));
          }
        }
      }
      if (all) {
        return;
      }
      if (Clock::now() > deadline) {
        die("server: wire-up of workers %zu..%zu did not finish within %d ms", first,
            first + count - 1, o_.wait_ms);
      }
    }
  }

  void probe(std::size_t count, std::size_t max_len) {
    std::vector<char> buf(std::max<std::size_t>(max_len, 1));
    rdmx_request_t r;
    for (std::size_t i = 0; i < count; ++i) {
      post_recv(workers_[0], buf.data(), buf.size(), kTagProbe, &r);
      waiter_[0].wait(&r, "probe receive");
    }
  }

  // 0, or 1 when the data received was not what the client sent. With `phases`, phase[0..2]
  // receive the nanoseconds spent waiting for each window's first message, draining the rest of
  // the window, and reposting the receives plus sending the ack.
  std::uint64_t run_test(Test t, std::size_t size, long messages, unsigned window, bool phases,
                         std::uint64_t* phase) {
    rdmx_worker_t* w = workers_[0];
    Waiter& wt = waiter_[0];
    std::vector<char> buf(std::max<std::size_t>(size, 1));
    std::uint64_t bad = 0;
    if (t == Test::kLat) {
      rdmx_request_t r[2];
      rdmx_request_t s;
      post_recv(w, buf.data(), size, kTagLat, &r[0]);
      ch_.send(Msg{.op = Op::kReady});
      for (long i = 0; i < messages; ++i) {
        wt.wait(&r[i & 1], "ping receive");
        // The next ping can only come after our pong: post its receive first, so that it is
        // matched on arrival (never unexpected), and echo the bytes received.
        if (i + 1 < messages) {
          post_recv(w, buf.data(), size, kTagLat, &r[(i + 1) & 1]);
        }
        post_send(ep(0), buf.data(), size, kTagLat, 0, &s);
        wt.wait(&s, "pong send");
      }
      return 0;
    }
    // bw / rate: receive windows, ack each.
    if (window == 0 || messages % window != 0) {
      die("server: %ld messages in windows of %u", messages, window);
    }
    const long windows = messages / static_cast<long>(window);
    std::vector<rdmx_request_t> r(window);
    rdmx_request_t s;
    char ack[kAckBytes] = {};
    auto post_window = [&] {
      for (unsigned k = 0; k < window; ++k) {
        post_recv(w, buf.data(), size, kTagBw, &r[k]);
      }
    };
    post_window();
    ch_.send(Msg{.op = Op::kReady});
    Clock::duration idle{}, drain{}, repost{};
    for (long i = 0; i < windows; ++i) {
      const Clock::time_point ta = phases ? Clock::now() : Clock::time_point{};
      wt.wait(&r[0], "window receive");
      const Clock::time_point tb = phases ? Clock::now() : Clock::time_point{};
      wt.wait_all(r, window, "window receive");
      const Clock::time_point tc = phases ? Clock::now() : Clock::time_point{};
      // The next window's receives go up before the ack releases the sender.
      if (i + 1 < windows) {
        post_window();
      }
      post_send(ep(0), ack, sizeof(ack), kTagAck, 0, &s);
      wt.wait(&s, "ack send");
      if (phases) {
        const Clock::time_point td = Clock::now();
        idle += tb - ta;
        drain += tc - tb;
        repost += td - tc;
      }
    }
    const auto ns = [](Clock::duration d) {
      return static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
    };
    // Checked after the last ack, outside the client's timing: reading 64 MiB back costs
    // ~0.2 s in the emulated guest, 3 % of a 64 MiB run (ib_write_bw checks nothing).
    bad = has_pattern(buf, size) ? 0 : 1;
    phase[0] = ns(idle);
    phase[1] = ns(drain);
    phase[2] = ns(repost);
    return bad;
  }

  const Options& o_;
  Channel& ch_;
  std::vector<rdmx_worker_t*> workers_;
  std::vector<rdmx_ep_t*> eps_;
  std::vector<Waiter> waiter_;
  std::vector<std::uint8_t> client_blob_;
};

// ------------------------------------------------------------------------------------------
// Client: drives the tests and prints the results.

struct StatsRow {
  unsigned peers = 0;
  rdmx_stats_t stats{};
  std::uint64_t rss = 0;
};

class Client {
 public:
  Client(const Options& o, Channel& ch) : o_(o), ch_(ch) {}

  int run() {
    workers_needed_ = 1;
    for (Test t : o_.tests) {
      if (t == Test::kMem) {
        workers_needed_ = std::max(workers_needed_, o_.peers);
      }
    }
    ch_.send(Msg{.op = Op::kHello,
                 .arg = {static_cast<std::uint64_t>(o_.transport), workers_needed_, 0, 0}});
    for (unsigned i = 0; i < workers_needed_; ++i) {
      blobs_.push_back(ch_.recv_blob(kCtrlTimeoutMs));
    }
    worker_ = make_worker(o_.client_dev, o_.transport);
    const auto blob = address_of(worker_);
    ch_.send_blob(blob.data(), blob.size());
    eps_.assign(workers_needed_, nullptr);
    waiter_.emplace_back(worker_, o_);

    StatsRow base;
    check(rdmx_worker_stats(worker_, &base.stats), "rdmx_worker_stats");
    base.rss = rss_kib();
    const auto t0 = Clock::now();
    connect(0, 1);
    const double wireup_ms = seconds(Clock::now() - t0) * 1e3;
    rdmx_config_t cfg;
    rdmx_config_init(&cfg);
    (void)rdmx_config_from_env(&cfg);
    config_limit_ = cfg.eager_limit;
    eager_limit_ = probe_eager_limit(std::min<std::size_t>(config_limit_, 1u << 20));

    rdmx_stats_t st{};
    check(rdmx_worker_stats(worker_, &st), "rdmx_worker_stats");
    std::printf(
        "# rdmx_perf: transport %s, device %s -> %s, eager limit %zu B (probed; config "
        "%zu), wire-up %.1f ms, wait %s, load %s\n",
        st.transport == RDMX_TRANSPORT_UD ? "ud" : "rc",
        o_.client_dev.empty() ? "(default)" : o_.client_dev.c_str(),
        o_.server_dev.empty() ? "(default)" : o_.server_dev.c_str(), eager_limit_, config_limit_,
        wireup_ms, o_.spin ? "spin (-S)" : "rdmx_request_wait", loadavg().c_str());
    std::fflush(stdout);

    for (Test t : o_.tests) {
      if (t == Test::kMem) {
        run_peers(base);
      } else {
        run_sweep(t);
      }
    }
    ch_.send(Msg{.op = Op::kQuit});
    (void)ch_.recv(kCtrlTimeoutMs, Op::kDone);
    for (rdmx_ep_t* ep : eps_) {
      if (ep != nullptr) {
        rdmx_ep_destroy(ep);
      }
    }
    rdmx_worker_destroy(worker_);
    return failures_ == 0 ? 0 : 1;
  }

 private:
  Waiter& waiter() { return waiter_[0]; }

  void connect(std::size_t first, std::size_t count) {
    ch_.send(Msg{.op = Op::kConnect, .arg = {first, count, 0, 0}});
    std::vector<rdmx_request_t> r(count), s(count);
    std::vector<char> in(8), out(8);
    for (int round = 0; round < kWireupRounds; ++round) {
      for (std::size_t j = 0; j < count; ++j) {
        const std::size_t i = first + j;
        if (eps_[i] == nullptr) {
          check(rdmx_ep_create(worker_, blobs_[i].data(), blobs_[i].size(), &eps_[i]),
                "rdmx_ep_create");
        }
        post_recv(worker_, in.data(), in.size(), kTagConn | i, &r[j]);
        // Synchronous: completes once the server worker has matched it, so both directions of
        // the connection are up.
        post_send(eps_[i], out.data(), out.size(), kTagConn | i, RDMX_SEND_SYNC, &s[j]);
      }
      waiter().wait_all(s, count, "wire-up send");
      waiter().wait_all(r, count, "wire-up receive");
    }
    (void)ch_.recv(kCtrlTimeoutMs, Op::kDone);
  }

  // The largest size sent eagerly: the configured limit if it goes eagerly, else a binary
  // search below it. A probe that went by rendezvous counts in rndv_sends (with an rdmx without
  // rendezvous it is refused with RDMX_ERR_UNSUPPORTED and accepts nothing). The probes are real
  // messages the server receives afterwards; a rendezvous one completes only then.
  std::size_t probe_eager_limit(std::size_t cap) {
    std::vector<char> buf(std::max<std::size_t>(cap, 1));
    std::vector<rdmx_request_t> sent;
    sent.reserve(64);  // requests must not move while rdmx owns them
    auto rndv_sends = [&] {
      rdmx_stats_t st{};
      check(rdmx_worker_stats(worker_, &st), "rdmx_worker_stats");
      return st.rndv_sends;
    };
    auto fits = [&](std::size_t n) {
      const std::uint64_t before = rndv_sends();
      sent.emplace_back();
      const int rc =
          rdmx_tag_send(eps_[0], buf.data(), n, kTagProbe, 0, &sent.back(), nullptr, nullptr);
      if (rc == RDMX_ERR_UNSUPPORTED) {
        sent.pop_back();
        return false;
      }
      check(rc, "rdmx_tag_send (eager limit probe)");
      // A send queued for resources (UD's congestion window) has not chosen yet: progress
      // until it posts its RTS or completes (eager; a rendezvous probe cannot complete before
      // the server receives it, after probing). The server progresses between commands.
      const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(o_.wait_ms);
      for (;;) {
        if (rndv_sends() != before) {
          return false;
        }
        if (rdmx_request_test(&sent.back(), nullptr) != RDMX_INPROGRESS) {
          return true;
        }
        if (rdmx_worker_progress(worker_) < 0 || Clock::now() > deadline) {
          die("eager limit probe: a %zu-byte send neither completed nor went by rendezvous", n);
        }
      }
    };
    std::size_t limit = cap;
    if (!fits(cap)) {
      std::size_t lo = 0;    // eager (a zero-byte message always is)
      std::size_t hi = cap;  // not eager
      while (hi - lo > 1) {
        const std::size_t mid = lo + (hi - lo) / 2;
        (fits(mid) ? lo : hi) = mid;
      }
      limit = lo;
    }
    ch_.send(Msg{.op = Op::kProbe, .arg = {sent.size(), cap, 0, 0}});
    waiter().wait_all(sent, sent.size(), "probe send");
    (void)ch_.recv(kCtrlTimeoutMs, Op::kDone);
    return limit;
  }

  std::vector<std::size_t> sizes(Test t) const {
    std::size_t lo = o_.min_size;
    std::size_t hi = o_.size_list.empty() ? o_.max_size : o_.size_list.back();
    if (!o_.sizes_given && t == Test::kRate) {
      lo = hi = kDefaultRateSize;
    }
    if (hi == 0) {
      hi = eager_limit_;
    } else if (hi > eager_limit_) {
      std::printf("# note: sizes above the eager limit (%zu B) go by rendezvous\n", eager_limit_);
    }
    if (!o_.size_list.empty()) {
      return o_.size_list;
    }
    std::vector<std::size_t> out;
    if (lo == 0) {
      out.push_back(0);
      lo = 1;
    }
    for (std::size_t s = lo; s <= hi; s *= 2) {
      out.push_back(s);
    }
    return out;
  }

  long iterations(std::size_t size) const {
    if (o_.iters > 0) {
      return o_.iters;
    }
    if (size > kBudgetAbove) {
      return std::clamp<long>(static_cast<long>(o_.size_budget / size), 4, kDefaultItersLarge);
    }
    return size > kLargeAbove ? kDefaultItersLarge : kDefaultIters;
  }
  long warmup(std::size_t size) const {
    if (o_.warmup_given || size <= kBudgetAbove) {
      return o_.warmup;
    }
    return std::min(o_.warmup, std::max<long>(1, iterations(size) / 10));
  }
  unsigned window(std::size_t size) const {
    if (o_.window_given || size <= kBudgetAbove) {
      return o_.window;
    }
    return static_cast<unsigned>(
        std::clamp<std::size_t>(kWindowBudget / size, 1, std::size_t{o_.window}));
  }

  void run_sweep(Test t) {
    const auto list = sizes(t);
    const std::string shape =
        t == Test::kLat ? "ping-pong, half round trip"
                        : "window " + std::to_string(o_.window) + ", receiver acks each window";
    const std::string iters = o_.iters > 0 ? std::to_string(o_.iters)
                                           : std::to_string(kDefaultIters) + " (" +
                                                 std::to_string(kDefaultItersLarge) +
                                                 " above 8 KiB, fewer above 64 KiB)";
    std::printf("# rdmx_perf %s: %s, %s %s, warm-up %ld\n", test_name(t), shape.c_str(),
                iters.c_str(), t == Test::kLat ? "iterations" : "messages", o_.warmup);
    switch (t) {
      case Test::kLat:
        std::printf("# Size          Latency (us)%s\n",
                    o_.full ? "     Median (us)        P99 (us)  Progress/msg" : "");
        break;
      case Test::kBw:
        std::printf("# Size      Bandwidth (MB/s)%s\n",
                    o_.full ? "      Messages/s  Progress/msg" : "");
        break;
      default:
        std::printf("# Size            Messages/s%s\n",
                    o_.full ? "  Bandwidth (MB/s)  Progress/msg" : "");
        break;
    }
    std::fflush(stdout);
    rdmx_stats_t before{};
    check(rdmx_worker_stats(worker_, &before), "rdmx_worker_stats");
    for (const std::size_t size : list) {
      if (t == Test::kLat) {
        run_lat(size);
      } else {
        run_window(t, size);
      }
      std::fflush(stdout);
    }
    rdmx_stats_t after{};
    check(rdmx_worker_stats(worker_, &after), "rdmx_worker_stats");
    std::printf("# client stats during %s: unexpected %" PRIu64 ", node_rnr_naks %" PRIu64
                ", ud_retransmits %" PRIu64 ", ud_duplicates %" PRIu64 ", srq_refills %" PRIu64
                ", srq_limit_events %" PRIu64 ", coalesced %" PRIu64 " in %" PRIu64 " packets\n",
                test_name(t), after.unexpected - before.unexpected,
                after.node_rnr_naks - before.node_rnr_naks,
                after.ud_retransmits - before.ud_retransmits,
                after.ud_duplicates - before.ud_duplicates, after.srq_refills - before.srq_refills,
                after.srq_limit_events - before.srq_limit_events,
                after.coalesced_msgs - before.coalesced_msgs,
                after.coalesced_batches - before.coalesced_batches);
    if (after.rndv_sends != before.rndv_sends) {
      const std::uint64_t hits = after.rndv_reg_hits - before.rndv_reg_hits;
      const std::uint64_t lookups = hits + after.rndv_reg_misses - before.rndv_reg_misses;
      std::printf(
          "# client rendezvous during %s: sends %" PRIu64
          ", zero-copy %.1f MB, copied "
          "%.1f MB, registration cache hits %" PRIu64 "/%" PRIu64 " (%.1f%%)\n",
          test_name(t), after.rndv_sends - before.rndv_sends,
          static_cast<double>(after.rndv_zero_copy_bytes - before.rndv_zero_copy_bytes) / 1e6,
          static_cast<double>(after.rndv_copied_bytes - before.rndv_copied_bytes) / 1e6, hits,
          lookups,
          lookups != 0 ? 100.0 * static_cast<double>(hits) / static_cast<double>(lookups) : 0.0);
    }
    std::fflush(stdout);
  }

  void start(Test t, std::size_t size, long messages, unsigned window) {
    const std::uint64_t flags = o_.phases ? 1ull << 32 : 0;
    ch_.send(Msg{.op = Op::kRun,
                 .arg = {static_cast<std::uint64_t>(t), size, static_cast<std::uint64_t>(messages),
                         window | flags}});
    (void)ch_.recv(kCtrlTimeoutMs, Op::kReady);
  }

  Msg finish(std::size_t size) {
    const Msg done = ch_.recv(kCtrlTimeoutMs, Op::kDone);
    if (done.arg[0] != 0) {
      std::printf("# ERROR: the server received corrupted data at %zu B\n", size);
      ++failures_;
    }
    return done;
  }

  void run_lat(std::size_t size) {
    const long iters = iterations(size);
    const long warm = warmup(size);
    const long total = warm + iters;
    std::vector<char> sbuf(std::max<std::size_t>(size, 1));
    std::vector<char> rbuf(sbuf.size());
    fill_pattern(sbuf, size);
    std::vector<double> samples;
    if (o_.full) {
      samples.reserve(static_cast<std::size_t>(iters));
    }
    rdmx_request_t s;
    rdmx_request_t r;
    const std::uint64_t polls0 = waiter().progress_calls();
    start(Test::kLat, size, total, 0);
    Clock::time_point t0 = Clock::now();
    std::uint64_t k0 = ticks();
    for (long i = 0; i < total; ++i) {
      if (i == warm) {
        t0 = Clock::now();
        k0 = ticks();
      }
      const std::uint64_t ki = ticks();
      post_recv(worker_, rbuf.data(), size, kTagLat, &r);
      post_send(eps_[0], sbuf.data(), size, kTagLat, 0, &s);
      waiter().wait(&s, "ping send");
      waiter().wait(&r, "pong receive");
      if (o_.full && i >= warm) {
        // Signed: a migration between CPUs whose TSCs disagree could go backwards.
        samples.push_back(static_cast<double>(static_cast<std::int64_t>(ticks() - ki)));
      }
    }
    const double elapsed_us = seconds(Clock::now() - t0) * 1e6;
    const double us_per_tick =
        elapsed_us / static_cast<double>(std::max<std::uint64_t>(1, ticks() - k0));
    const double us = elapsed_us / (2.0 * static_cast<double>(iters));
    finish(size);
    if (!has_pattern(rbuf, size)) {
      std::printf("# ERROR: the echo of %zu B differs from what was sent\n", size);
      ++failures_;
    }
    std::printf("%-10zu%18.2f", size, us);
    if (o_.full) {
      std::sort(samples.begin(), samples.end());
      const double polls =
          static_cast<double>(waiter().progress_calls() - polls0) / static_cast<double>(total);
      const auto half_rtt = [&](std::size_t k) { return samples[k] * us_per_tick / 2; };
      std::printf("%16.2f%16.2f%14.1f", half_rtt(samples.size() / 2),
                  half_rtt(std::min(samples.size() - 1, samples.size() * 99 / 100)), polls);
    }
    std::printf("\n");
  }

  void run_window(Test t, std::size_t size) {
    const unsigned window = this->window(size);
    const long warm_windows = (warmup(size) + window - 1) / window;
    const long windows = std::max<long>(1, (iterations(size) + window - 1) / window);
    const long total_windows = warm_windows + windows;
    std::vector<char> sbuf(std::max<std::size_t>(size, 1));
    fill_pattern(sbuf, size);
    std::vector<rdmx_request_t> s(window);
    rdmx_request_t r;
    char ack[kAckBytes];
    const std::uint64_t polls0 = waiter().progress_calls();
    start(t, size, total_windows * static_cast<long>(window), window);
    Clock::time_point t0 = Clock::now();
    Clock::duration posting{}, completing{}, acking{};
    for (long i = 0; i < total_windows; ++i) {
      if (i == warm_windows) {
        t0 = Clock::now();
      }
      const Clock::time_point ta = o_.phases ? Clock::now() : Clock::time_point{};
      post_recv(worker_, ack, sizeof(ack), kTagAck, &r);
      for (unsigned k = 0; k < window; ++k) {
        post_send(eps_[0], sbuf.data(), size, kTagBw, 0, &s[k]);
      }
      const Clock::time_point tb = o_.phases ? Clock::now() : Clock::time_point{};
      waiter().wait_all(s, window, "window send");
      const Clock::time_point tc = o_.phases ? Clock::now() : Clock::time_point{};
      waiter().wait(&r, "window ack");
      if (o_.phases) {
        const Clock::time_point td = Clock::now();
        posting += tb - ta;
        completing += tc - tb;
        acking += td - tc;
      }
    }
    const double secs = seconds(Clock::now() - t0);
    const Msg done = finish(size);
    if (o_.phases) {
      const double n = static_cast<double>(total_windows);
      const double per_msg = n * window;
      std::printf(
          "# phases at %zu B (us): client posts %.2f/msg, send completions %.1f/window, "
          "ack wait %.1f/window; server waits for a window's first message "
          "%.1f/window, drains the rest %.2f/msg, reposts+acks %.1f/window\n",
          size, seconds(posting) * 1e6 / per_msg, seconds(completing) * 1e6 / n,
          seconds(acking) * 1e6 / n, static_cast<double>(done.arg[1]) / 1e3 / n,
          static_cast<double>(done.arg[2]) / 1e3 / per_msg,
          static_cast<double>(done.arg[3]) / 1e3 / n);
    }
    const double msgs = static_cast<double>(windows) * window;
    const double mbps = msgs * static_cast<double>(size) / secs / 1e6;
    const double rate = msgs / secs;
    const double polls = static_cast<double>(waiter().progress_calls() - polls0) /
                         (static_cast<double>(total_windows) * window);
    if (t == Test::kBw) {
      std::printf("%-10zu%18.2f", size, mbps);
      if (o_.full) {
        std::printf("%16.0f%14.2f", rate, polls);
      }
    } else {
      std::printf("%-10zu%20.0f", size, rate);
      if (o_.full) {
        std::printf("%18.2f%14.2f", mbps, polls);
      }
    }
    std::printf("\n");
  }

  StatsRow row(unsigned peers) {
    StatsRow r;
    r.peers = peers;
    check(rdmx_worker_stats(worker_, &r.stats), "rdmx_worker_stats");
    r.rss = rss_kib();
    return r;
  }

  void run_peers(const StatsRow& base) {
    std::vector<StatsRow> rows{base};
    std::vector<unsigned> counts;
    for (unsigned n = 1; n < o_.peers; n *= 2) {
      counts.push_back(n);
    }
    counts.push_back(o_.peers);
    std::size_t connected = 1;  // the first server worker is wired up at start
    for (const unsigned n : counts) {
      if (n > connected) {
        connect(connected, n - connected);
        connected = n;
      }
      rows.push_back(row(n));
    }
    const bool ud = rows.back().stats.transport == RDMX_TRANSPORT_UD;
    std::printf(
        "# rdmx_perf peers: client worker with N connected peers (%u server workers in one "
        "process), transport %s\n",
        o_.peers, ud ? "ud" : "rc");
    std::printf("# Peers    recv_mem_bytes  ring_mem_bytes   num_qps     RSS (KiB)\n");
    for (const StatsRow& r : rows) {
      std::printf("%-8u%16" PRIu64 "%16" PRIu64 "%10" PRIu64 "%14" PRIu64 "\n", r.peers,
                  r.stats.recv_mem_bytes, r.stats.ring_mem_bytes, r.stats.num_qps, r.rss);
    }
    const StatsRow& one = rows[1];
    const StatsRow& last = rows.back();
    const auto extra_peers = static_cast<std::int64_t>(last.peers - one.peers);
    const auto registered = [](const StatsRow& r) {
      return static_cast<std::int64_t>(r.stats.recv_mem_bytes + r.stats.ring_mem_bytes);
    };
    const auto mem_growth = registered(last) - registered(one);
    const auto qp_growth = static_cast<std::int64_t>(last.stats.num_qps) -
                           static_cast<std::int64_t>(one.stats.num_qps);
    const bool mem_ok = mem_growth == 0;
    const bool qp_ok = ud ? qp_growth == 0 : true;
    std::printf(
        "# from 1 to %u peers: registered receive memory (SRQs + rings) %+" PRId64
        " B, num_qps %+" PRId64 " (%.1f per added peer)%s\n",
        last.peers, mem_growth, qp_growth,
        extra_peers > 0 ? static_cast<double>(qp_growth) / static_cast<double>(extra_peers) : 0.0,
        ud ? "" : ": RC grows by QP state only");
    std::printf("# check peers %s: recv memory constant %s, QPs %s\n", ud ? "ud" : "rc",
                mem_ok ? "PASS" : "FAIL",
                ud ? (qp_ok ? "constant PASS" : "grow FAIL") : "per peer (RC, expected)");
    if (!mem_ok || !qp_ok) {
      ++failures_;
    }
    std::fflush(stdout);
  }

  const Options& o_;
  Channel& ch_;
  unsigned workers_needed_ = 1;
  std::vector<std::vector<std::uint8_t>> blobs_;
  rdmx_worker_t* worker_ = nullptr;
  std::vector<rdmx_ep_t*> eps_;
  std::vector<Waiter> waiter_;
  std::size_t eager_limit_ = 0;
  std::size_t config_limit_ = 0;
  int failures_ = 0;
};

// ------------------------------------------------------------------------------------------

void usage(FILE* f) {
  std::fprintf(f,
               "usage: rdmx_perf [options] [lat] [bw] [rate]   (default: lat)\n"
               "  -s               server: serve one client (listens on -p), then exit\n"
               "  -c HOST          client of a server at HOST (e.g. 127.0.0.1 or $RDMX_TEST_IPS)\n"
               "                   (neither: fork a server and run both over 127.0.0.1)\n"
               "  -p PORT          TCP port of the control channel (default %u)\n"
               "  -t rc|ud         transport (default rc)\n"
               "  -m MIN[:MAX]     sizes, powers of two (default 1:eager limit; rate: 8);\n"
               "                   above the eager limit by rendezvous (e.g. -m 64k:64m bw);\n"
               "                   or a list A,B,C (e.g. -m 4k,8k,8193,16k lat)\n"
               "  -i N             measured iterations/messages (default %ld, %ld above 8 KiB,\n"
               "                   above 64 KiB -b MiB worth, at least 4)\n"
               "  -b MIB           bytes per size above 64 KiB, in MiB (default %zu)\n"
               "  -x N             warm-up iterations/messages (default %ld; above 64 KiB a\n"
               "                   tenth of the iterations)\n"
               "  -w N             window of bw/rate (default %u; above 64 KiB 16 MiB worth)\n"
               "  -P N             memory and QPs with 1, 2, 4 ... N peers (N server workers)\n"
               "  -d DEV[,DEV2]    device; fork mode: server on DEV, client on DEV2 (default DEV)\n"
               "  -f               extra columns: median, p99, progress calls per message\n"
               "  -S               spin on rdmx_worker_progress instead of rdmx_request_wait\n"
               "  -v               bw/rate: print where each window's time goes on both sides\n"
               "  -y N             spin (-S), sleeping 1 us after every N idle progress calls\n"
               "  -W MS            bound of every wait (default 30000)\n"
               "  -T S             watchdog: exit 124 after S seconds (default 900)\n",
               kDefaultPort, kDefaultIters, kDefaultItersLarge, kSizeBudget >> 20, kDefaultWarmup,
               kDefaultWindow);
}

bool parse_size(const char* s, std::size_t* out) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (end == s) {
    return false;
  }
  std::size_t scale = 1;
  if (*end == 'k' || *end == 'K') {
    scale = 1024;
    ++end;
  } else if (*end == 'm' || *end == 'M') {
    scale = 1024 * 1024;
    ++end;
  }
  if (*end != '\0' && *end != ':' && *end != ',') {
    return false;
  }
  *out = static_cast<std::size_t>(v) * scale;
  return true;
}

long parse_long(const char* s, const char* what) {
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < 0) {
    die("%s: '%s' is not a non-negative number", what, s);
  }
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  int c = 0;
  while ((c = getopt(argc, argv, "sc:p:t:m:i:x:w:P:d:fSvy:W:T:b:h")) != -1) {
    switch (c) {
      case 's':
        o.role = Options::Role::kServer;
        break;
      case 'c':
        o.role = Options::Role::kClient;
        o.host = optarg;
        break;
      case 'p':
        o.port = static_cast<std::uint16_t>(parse_long(optarg, "-p"));
        break;
      case 't':
        if (std::strcmp(optarg, "rc") == 0) {
          o.transport = RDMX_TRANSPORT_RC;
        } else if (std::strcmp(optarg, "ud") == 0) {
          o.transport = RDMX_TRANSPORT_UD;
        } else {
          die("-t: '%s' is not rc or ud", optarg);
        }
        break;
      case 'm': {
        if (std::strchr(optarg, ',') != nullptr) {
          // A list: exactly these sizes, in this order (e.g. around the rendezvous threshold).
          for (const char* p = optarg; p != nullptr; p = std::strchr(p, ',')) {
            p += *p == ',' ? 1 : 0;
            std::size_t v = 0;
            if (!parse_size(p, &v) || (!o.size_list.empty() && v <= o.size_list.back())) {
              die("-m: '%s' is not an increasing list of sizes A,B,C", optarg);
            }
            o.size_list.push_back(v);
          }
          o.min_size = o.size_list.front();
          o.max_size = o.size_list.back();
          o.sizes_given = true;
          break;
        }
        const char* colon = std::strchr(optarg, ':');
        if (!parse_size(optarg, &o.min_size) ||
            (colon != nullptr && !parse_size(colon + 1, &o.max_size))) {
          die("-m: '%s' is not MIN[:MAX]", optarg);
        }
        if (colon == nullptr) {
          o.max_size = o.min_size;
        }
        if (o.max_size != 0 && o.max_size < o.min_size) {
          die("-m: MAX below MIN");
        }
        o.sizes_given = true;
        break;
      }
      case 'i':
        o.iters = parse_long(optarg, "-i");
        if (o.iters == 0) {
          die("-i: at least 1");
        }
        break;
      case 'x':
        o.warmup = parse_long(optarg, "-x");
        o.warmup_given = true;
        break;
      case 'w':
        o.window = static_cast<unsigned>(parse_long(optarg, "-w"));
        o.window_given = true;
        if (o.window == 0 || o.window > 4096) {
          die("-w: 1..4096");
        }
        break;
      case 'P':
        o.peers = static_cast<unsigned>(parse_long(optarg, "-P"));
        if (o.peers == 0 || o.peers > kMaxPeers) {
          die("-P: 1..%u", kMaxPeers);
        }
        break;
      case 'd': {
        const std::string d = optarg;
        const auto comma = d.find(',');
        o.server_dev = d.substr(0, comma);
        o.client_dev = comma == std::string::npos ? o.server_dev : d.substr(comma + 1);
        break;
      }
      case 'f':
        o.full = true;
        break;
      case 'S':
        o.spin = true;
        break;
      case 'v':
        o.phases = true;
        break;
      case 'y':
        o.nap_after = static_cast<unsigned>(parse_long(optarg, "-y"));
        o.spin = true;
        break;
      case 'W':
        o.wait_ms = static_cast<int>(parse_long(optarg, "-W"));
        break;
      case 'b':
        o.size_budget = static_cast<std::size_t>(parse_long(optarg, "-b")) << 20;
        if (o.size_budget == 0) {
          die("-b: at least 1 (MiB)");
        }
        break;
      case 'T':
        o.watchdog_s = static_cast<int>(parse_long(optarg, "-T"));
        break;
      case 'h':
        usage(stdout);
        std::exit(0);
      default:
        usage(stderr);
        std::exit(1);
    }
  }
  for (int i = optind; i < argc; ++i) {
    const std::string t = argv[i];
    if (t == "lat") {
      o.tests.push_back(Test::kLat);
    } else if (t == "bw") {
      o.tests.push_back(Test::kBw);
    } else if (t == "rate") {
      o.tests.push_back(Test::kRate);
    } else {
      die("unknown test '%s' (lat, bw, rate; -P N for peers)", t.c_str());
    }
  }
  if (o.peers != 0) {
    o.tests.push_back(Test::kMem);
  }
  if (o.tests.empty()) {
    o.tests.push_back(Test::kLat);
  }
  return o;
}

void on_watchdog(int) {
  static const char msg[] = "rdmx_perf: watchdog (-T) expired\n";
  (void)!write(2, msg, sizeof(msg) - 1);
  _exit(124);
}

void arm_watchdog(int seconds) {
  if (seconds > 0) {
    (void)signal(SIGALRM, on_watchdog);
    alarm(static_cast<unsigned>(seconds));
  }
}

int serve(const Options& o, int fd) {
  Channel ch(fd);
  return Server(o, ch).run();
}

int drive(const Options& o, int fd) {
  Channel ch(fd);
  return Client(o, ch).run();
}

int run(const Options& o) {
  switch (o.role) {
    case Options::Role::kServer: {
      arm_watchdog(o.watchdog_s);
      const int lfd = rdmx::bench::tcp_listen("", o.port, nullptr);
      const int fd = rdmx::bench::tcp_accept(lfd, o.watchdog_s * 1000);
      close(lfd);
      return serve(o, fd);
    }
    case Options::Role::kClient:
      arm_watchdog(o.watchdog_s);
      return drive(o, rdmx::bench::tcp_connect(o.host, o.port, 30000));
    case Options::Role::kFork:
      break;
  }
  // Both processes create their workers after the fork: verbs resources must not cross it.
  std::uint16_t port = 0;
  const int lfd = rdmx::bench::tcp_listen("127.0.0.1", 0, &port);
  std::fflush(stdout);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    die("fork: %s", std::strerror(errno));
  }
  if (pid == 0) {
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) {
      _exit(1);
    }
    arm_watchdog(o.watchdog_s);
    int rc = 1;
    try {
      const int fd = rdmx::bench::tcp_accept(lfd, 60000);
      close(lfd);
      rc = serve(o, fd);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rdmx_perf server: %s\n", e.what());
    }
    std::fflush(stdout);
    _exit(rc);
  }
  close(lfd);
  arm_watchdog(o.watchdog_s);
  int rc = 1;
  try {
    rc = drive(o, rdmx::bench::tcp_connect("127.0.0.1", port, 30000));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rdmx_perf: %s\n", e.what());
    rc = 1;
  }
  // Reap the server, bounded.
  int status = 0;
  for (int i = 0; i < 200; ++i) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "rdmx_perf: the server exited with status %d\n", status);
        rc = rc == 0 ? 1 : rc;
      }
      return rc;
    }
    usleep(50000);
  }
  std::fprintf(stderr, "rdmx_perf: the server did not exit; killing it\n");
  kill(pid, SIGKILL);
  (void)waitpid(pid, &status, 0);
  return rc == 0 ? 1 : rc;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const Options o = parse(argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rdmx_perf: %s\n", e.what());
    return 1;
  }
}
