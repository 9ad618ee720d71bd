#include "tests/transport/support/procs.h"

#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "transport/debug.h"

namespace rdmx::test {

namespace {

bool write_all(int fd, const void* data, std::size_t n) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) {
      continue;
    }
    if (w <= 0) {
      return false;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

bool read_all(int fd, void* data, std::size_t n) {
  auto* p = static_cast<std::uint8_t*>(data);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) {
      continue;
    }
    if (r <= 0) {
      return false;
    }
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

bool send_blob(int fd, const void* data, std::size_t n) {
  const auto len = static_cast<std::uint32_t>(n);
  return write_all(fd, &len, sizeof(len)) && (n == 0 || write_all(fd, data, n));
}

bool recv_blob(int fd, Blob* out) {
  std::uint32_t len = 0;
  if (!read_all(fd, &len, sizeof(len))) {
    return false;
  }
  out->resize(len);
  return len == 0 || read_all(fd, out->data(), len);
}

}  // namespace

std::vector<Blob> Rank::allgather(const void* data, std::size_t length) {
  if (!send_blob(fd_, data, length)) {
    fail(__FILE__, __LINE__, "allgather: parent gone");
  }
  std::vector<Blob> all(static_cast<std::size_t>(size_));
  for (auto& b : all) {
    if (!recv_blob(fd_, &b)) {
      fail(__FILE__, __LINE__, "allgather: parent gone");
    }
  }
  return all;
}

void Rank::fail(const char* file, int line, const std::string& message) const {
  std::fprintf(stderr, "rank %d: %s:%d: %s\n", rank_, file, line, message.c_str());
  std::fflush(stderr);
  _exit(1);
}

::testing::AssertionResult run_ranks(int n, const std::function<void(Rank&)>& fn,
                                     RunOptions options) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  std::vector<int> fds;
  for (int r = 0; r < n; ++r) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
      return ::testing::AssertionFailure() << "socketpair: " << std::strerror(errno);
    }
    const pid_t pid = fork();
    if (pid == 0) {
      for (int fd : fds) {
        close(fd);
      }
      close(sv[0]);
      Rank rank(r, n, sv[1]);
      fn(rank);
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(0);
    }
    close(sv[1]);
    pids.push_back(pid);
    fds.push_back(sv[0]);
  }

  // Serve allgather rounds until every rank has closed its socket.
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  std::vector<Blob> round(static_cast<std::size_t>(n));
  std::vector<bool> have(static_cast<std::size_t>(n), false);
  std::vector<bool> open(static_cast<std::size_t>(n), true);
  int open_count = n;
  bool timed_out = false;
  while (open_count > 0) {
    std::vector<pollfd> pfds;
    for (int r = 0; r < n; ++r) {
      if (open[static_cast<std::size_t>(r)] && !have[static_cast<std::size_t>(r)]) {
        pfds.push_back(
            pollfd{.fd = fds[static_cast<std::size_t>(r)], .events = POLLIN, .revents = 0});
      }
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    if (pfds.empty()) {
      break;  // ranks wait in a round that closed ranks will never join
    }
    const int rc =
        poll(pfds.data(), pfds.size(), static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (rc < 0 && errno != EINTR) {
      break;
    }
    for (const pollfd& p : pfds) {
      if ((p.revents & (POLLIN | POLLHUP | POLLERR)) == 0) {
        continue;
      }
      int r = 0;
      while (fds[static_cast<std::size_t>(r)] != p.fd) {
        ++r;
      }
      const auto ur = static_cast<std::size_t>(r);
      if (recv_blob(p.fd, &round[ur])) {
        have[ur] = true;
      } else {
        open[ur] = false;
        --open_count;
      }
    }
    bool complete = true;
    for (int r = 0; r < n; ++r) {
      complete &= have[static_cast<std::size_t>(r)];
    }
    if (complete) {
      for (int r = 0; r < n; ++r) {
        for (const Blob& b : round) {
          (void)send_blob(fds[static_cast<std::size_t>(r)], b.data(), b.size());
        }
      }
      std::fill(have.begin(), have.end(), false);
    }
  }
  if (timed_out) {
    for (pid_t pid : pids) {
      kill(pid, SIGKILL);
    }
  }
  // Ranks still waiting for a round that can never complete read EOF and fail.
  for (int fd : fds) {
    close(fd);
  }
  std::ostringstream failures;
  bool ok = !timed_out;
  if (timed_out) {
    failures << "timed out after " << options.timeout.count() << " s; ";
  }
  for (int r = 0; r < n; ++r) {
    int status = 0;
    while (waitpid(pids[static_cast<std::size_t>(r)], &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      continue;
    }
    ok = false;
    if (WIFSIGNALED(status)) {
      failures << "rank " << r << " killed by signal " << WTERMSIG(status) << "; ";
    } else {
      failures << "rank " << r << " exited with " << WEXITSTATUS(status) << "; ";
    }
  }
  if (ok) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << failures.str();
}

std::vector<std::string> devices() {
  std::vector<std::string> out;
  const char* env = std::getenv("RDMX_TEST_DEVICES");
  if (env == nullptr) {
    return out;
  }
  std::istringstream in(env);
  for (std::string d; in >> d;) {
    out.push_back(d);
  }
  return out;
}

rdmx_config_t test_config(const std::string& device, rdmx_transport_t transport) {
  static thread_local std::string name;  // the config points at it
  name = device;
  rdmx_config_t c;
  rdmx_config_init(&c);
  (void)rdmx_config_from_env(&c);
  c.device = name.empty() ? nullptr : name.c_str();
  c.transport = transport;
  return c;
}

int wait_request(Rank& rank, rdmx_worker_t* worker, rdmx_request_t* request, rdmx_status_t* status,
                 const char* what, std::chrono::milliseconds timeout) {
  const int rc = rdmx_request_wait(worker, request, status, static_cast<int>(timeout.count()));
  if (rc == RDMX_ERR_TIMED_OUT) {
    rdmx::transport::debug::dump(worker);
    rank.fail(
        __FILE__, __LINE__,
        std::string(what) + " did not complete in " + std::to_string(timeout.count()) + " ms");
  }
  return rc;
}

rdmx_status_t probe_until(Rank& rank, Session& s, std::uint64_t src, std::uint64_t tag,
                          std::uint64_t mask, std::chrono::milliseconds timeout,
                          rdmx_message_t** msg) {
  rdmx_status_t st{};
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (rdmx_tag_probe(s.worker, src, tag, mask, &st, msg) != 1) {
    RDMX_CHECK(rank, rdmx_worker_progress(s.worker) >= 0);
    if (std::chrono::steady_clock::now() > deadline) {
      rank.fail(__FILE__, __LINE__,
                "probe found nothing in " + std::to_string(timeout.count()) + " ms");
    }
  }
  return st;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool readable(int fd, int ms) {
  pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
  return poll(&p, 1, ms) == 1 && (p.revents & POLLIN) != 0;
}

bool limit_pinning(std::size_t bytes) {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (syscall(SYS_capget, &hdr, data) != 0) {
    return false;
  }
  data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
  data[CAP_IPC_LOCK / 32].permitted &= ~(1u << (CAP_IPC_LOCK % 32));
  const rlimit lim{bytes, bytes};
  return syscall(SYS_capset, &hdr, data) == 0 && setrlimit(RLIMIT_MEMLOCK, &lim) == 0;
}

}  // namespace rdmx::test

namespace rdmx::test {

Session open_session(Rank& rank, const std::string& device, rdmx_transport_t transport,
                     const std::function<void(rdmx_config_t&)>& tweak,
                     const std::vector<int>& peers) {
  Session s;
  rdmx_config_t cfg = test_config(device, transport);
  if (tweak) {
    tweak(cfg);
  }
  RDMX_CHECK_OK(rank, rdmx_worker_create(&cfg, &s.worker));
  const void* addr = nullptr;
  std::size_t len = 0;
  RDMX_CHECK_OK(rank, rdmx_worker_address(s.worker, &addr, &len));
  const auto blobs = rank.allgather(addr, len);
  const std::uint64_t uid = rdmx_worker_uid(s.worker);
  const auto uid_blobs = rank.allgather(&uid, sizeof(uid));
  s.uids.resize(static_cast<std::size_t>(rank.size()));
  s.eps.assign(static_cast<std::size_t>(rank.size()), nullptr);
  for (int r = 0; r < rank.size(); ++r) {
    std::memcpy(&s.uids[static_cast<std::size_t>(r)], uid_blobs[static_cast<std::size_t>(r)].data(),
                sizeof(std::uint64_t));
  }
  std::vector<int> targets = peers;
  if (targets.empty()) {
    for (int r = 0; r < rank.size(); ++r) {
      if (r != rank.rank()) {
        targets.push_back(r);
      }
    }
  }
  for (const int r : targets) {
    const Blob& b = blobs[static_cast<std::size_t>(r)];
    RDMX_CHECK_OK(
        rank, rdmx_ep_create(s.worker, b.data(), b.size(), &s.eps[static_cast<std::size_t>(r)]));
  }
  // Connecting needs both sides to progress (each waits for the other's reply): finish it here,
  // so a test body may block out of band (rank.barrier()) without starving a peer's connect.
  quiesce(rank, s);
  return s;
}

Pair open_pair(Rank& rank, rdmx_config_t cfg) {
  Pair p;
  RDMX_CHECK_OK(rank, rdmx_worker_create(&cfg, &p.worker));
  const void* addr = nullptr;
  std::size_t len = 0;
  RDMX_CHECK_OK(rank, rdmx_worker_address(p.worker, &addr, &len));
  const auto blobs = rank.allgather(addr, len);
  const Blob& b = blobs[static_cast<std::size_t>(1 - rank.rank())];
  RDMX_CHECK_OK(rank, rdmx_ep_create(p.worker, b.data(), b.size(), &p.ep));
  return p;
}

void quiesce(Rank& rank, Session& s, std::chrono::milliseconds timeout) {
  constexpr std::uint64_t kFinTag = 0xf1f1f1f1f1f1f1f1ull;
  std::vector<rdmx_request_t> reqs;
  reqs.reserve(2 * s.eps.size());
  for (std::size_t r = 0; r < s.eps.size(); ++r) {
    if (s.eps[r] == nullptr) {
      continue;
    }
    reqs.emplace_back();
    RDMX_CHECK_OK(rank, rdmx_tag_recv(s.worker, nullptr, 0, s.uids[r], kFinTag, ~0ull, &reqs.back(),
                                      nullptr, nullptr));
    reqs.emplace_back();
    RDMX_CHECK_OK(rank, rdmx_tag_send(s.eps[r], nullptr, 0, kFinTag, RDMX_SEND_SYNC, &reqs.back(),
                                      nullptr, nullptr));
  }
  for (auto& r : reqs) {
    RDMX_CHECK_OK(rank, wait_request(rank, s.worker, &r, nullptr, "quiesce fin", timeout));
  }
}

void close_session(Rank& rank, Session& s) {
  for (rdmx_ep_t* ep : s.eps) {
    if (ep != nullptr) {
      rdmx_ep_destroy(ep);
    }
  }
  rdmx_worker_destroy(s.worker);
  s.worker = nullptr;
  const auto report = rdmx::transport::debug::last_destroy_report();
  RDMX_CHECK(rank, report.valid);
  RDMX_CHECK_EQ(rank, report.wr_ids.outstanding(), 0u);
  RDMX_CHECK_EQ(rank, report.destroy_errors, 0u);
  RDMX_CHECK_EQ(rank, report.refused_moves, 0u);
}

std::string device_for(int rank, bool two_devices) {
  const auto devs = devices();
  if (devs.empty()) {
    return "";
  }
  return two_devices && devs.size() > 1 ? devs[static_cast<std::size_t>(rank) % 2] : devs[0];
}

}  // namespace rdmx::test
