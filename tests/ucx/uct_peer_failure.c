/* Guest test of peer failure on the transports rdmx_rc and rdmx_ud through UCX's PUBLIC UCT API
 * only (libuct_rdmx.so preloaded), as UCP's UCP_ERR_HANDLING_MODE_PEER relies on it.
 *
 * For each transport: the interface reports UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE. A child
 * process opens an interface on the same device; the two exchange addresses through pipes, the
 * child sends an AM, and the parent's AM and flush to it complete (the path works). Then the
 * child is killed (SIGKILL: no goodbye), the parent sends an AM and flushes again, and:
 *   - the interface's error handler runs once, for that endpoint, with an error status, within
 *     30 s (RDMX_PEER_TIMEOUT_MS is set to 2000 here: RC detects in about that, UD within
 *     twice that);
 *   - a cancelling flush (UCT_FLUSH_FLAG_CANCEL) right after the kill is done at once;
 *   - the waiting flush completes with an error, and a later flush fails at once;
 *   - after the endpoint and interface are closed no verbs object of the process is left.
 * Prints what it sees; exits non-zero on the first failure. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <ucs/async/async_fwd.h>
#include <unistd.h>

#include "uct_test_util.h"

enum {
  kAmId = 9,
  kBoundSeconds = 30, /* detection must come well within it (peer timeout 2 s) */
};

static const char kHello[] = "hello from the child";
static const char kPing[] = "ping from the parent";

typedef struct {
  ucs_async_context_t* async;
  uct_worker_h worker;
  uct_md_h md;
  uct_iface_h iface;
  uct_iface_attr_t attr;
  uct_ep_h ep;
  unsigned received; /* AMs with the expected text */
  unsigned errors;   /* error handler calls */
  uct_ep_h error_ep;
  ucs_status_t error_status;
} side_t;

static ucs_status_t on_am(void* arg, void* data, size_t length, unsigned flags) {
  side_t* s = arg;
  (void)flags;
  if (length == 8 + sizeof(kHello) && memcmp((char*)data + 8, kHello, sizeof(kHello)) == 0) {
    ++s->received;
  } else if (length == 8 + sizeof(kPing) && memcmp((char*)data + 8, kPing, sizeof(kPing)) == 0) {
    ++s->received;
  } else {
    fprintf(stderr, "FAIL: an AM of %zu bytes with unexpected content\n", length);
    exit(1);
  }
  return UCS_OK;
}

static ucs_status_t on_error(void* arg, uct_ep_h ep, ucs_status_t status) {
  side_t* s = arg;
  ++s->errors;
  s->error_ep = ep;
  s->error_status = status;
  return UCS_OK;
}

static void open_side(side_t* s, uct_component_h component, const char* md_name, const char* tl,
                      const char* dev) {
  uct_md_config_t* md_config;
  memset(s, 0, sizeof(*s));
  CHECK_OK(uct_md_config_read(component, NULL, NULL, &md_config), "uct_md_config_read");
  CHECK_OK(uct_md_open(component, md_name, md_config, &s->md), "uct_md_open");
  uct_config_release(md_config);
  CHECK_OK(ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK, &s->async), "async_create");
  CHECK_OK(uct_worker_create(s->async, UCS_THREAD_MODE_SINGLE, &s->worker), "uct_worker_create");
  s->iface = open_iface(s->md, s->worker, tl, dev, kAmId, on_am, s, on_error, s, &s->attr);
}

static void close_side(side_t* s) {
  if (s->ep != NULL) {
    uct_ep_destroy(s->ep);
  }
  uct_iface_close(s->iface);
  uct_worker_destroy(s->worker);
  ucs_async_context_destroy(s->async);
  uct_md_close(s->md);
}

/* Device address then interface address, written to / read from a pipe. */
static void write_address(side_t* s, int fd) {
  unsigned char buf[256];
  const size_t dl = s->attr.device_addr_len, il = s->attr.iface_addr_len;
  CHECK(dl + il <= sizeof(buf), "addresses of %zu bytes", dl + il);
  CHECK_OK(uct_iface_get_device_address(s->iface, (uct_device_addr_t*)buf), "device address");
  CHECK_OK(uct_iface_get_address(s->iface, (uct_iface_addr_t*)(buf + dl)), "iface address");
  CHECK(write(fd, buf, dl + il) == (ssize_t)(dl + il), "write to pipe");
}

static void connect_from_pipe(side_t* s, int fd) {
  unsigned char buf[256];
  const size_t dl = s->attr.device_addr_len, il = s->attr.iface_addr_len;
  size_t got = 0;
  while (got < dl + il) {
    const ssize_t n = read(fd, buf + got, dl + il - got);
    CHECK(n > 0, "read from pipe (the other process ended?)");
    got += (size_t)n;
  }
  uct_ep_params_t params = {.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR |
                                          UCT_EP_PARAM_FIELD_IFACE_ADDR,
                            .iface = s->iface,
                            .dev_addr = (const uct_device_addr_t*)buf,
                            .iface_addr = (const uct_iface_addr_t*)(buf + dl)};
  CHECK_OK(uct_ep_create(&params, &s->ep), "uct_ep_create");
}

static void send_text(side_t* s, const char* text, size_t length) {
  const double deadline = now_s() + kBoundSeconds;
  ucs_status_t status;
  while ((status = uct_ep_am_short(s->ep, kAmId, 0, text, (unsigned)length)) ==
         UCS_ERR_NO_RESOURCE) {
    CHECK(now_s() < deadline, "no send resource");
    uct_worker_progress(s->worker);
  }
  CHECK_OK(status, "uct_ep_am_short");
}

static void child(uct_component_h component, const char* md_name, const char* tl, const char* dev,
                  int to_parent, int from_parent) {
  side_t s;
  /* Never outlives the test, whatever ends it. */
  CHECK(prctl(PR_SET_PDEATHSIG, SIGKILL) == 0 && getppid() != 1, "prctl(PR_SET_PDEATHSIG)");
  open_side(&s, component, md_name, tl, dev);
  write_address(&s, to_parent);
  connect_from_pipe(&s, from_parent);
  send_text(&s, kHello, sizeof(kHello));
  for (;;) { /* answers the parent's messages and flushes until it is killed */
    uct_worker_progress(s.worker);
  }
}

static void run(uct_component_h component, const char* md_name, const char* tl, const char* dev) {
  int to_parent[2], to_child[2];
  side_t s;

  printf("%s on %s:\n", tl, dev);
  CHECK(pipe(to_parent) == 0 && pipe(to_child) == 0, "pipe");
  fflush(stdout);
  const pid_t pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    close(to_parent[0]);
    close(to_child[1]);
    child(component, md_name, tl, dev, to_parent[1], to_child[0]);
  }
  /* Only the ends each side uses stay open: a side that dies is then seen at the other's read. */
  close(to_parent[1]);
  close(to_child[0]);
  open_side(&s, component, md_name, tl, dev);
  CHECK(s.attr.cap.flags & UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE,
        "%s lacks UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE", tl);
  write_address(&s, to_child[1]);
  connect_from_pipe(&s, to_parent[0]);

  double deadline = now_s() + kBoundSeconds;
  while (s.received < 1) {
    CHECK(now_s() < deadline, "no AM from the child within %d s", kBoundSeconds);
    uct_worker_progress(s.worker);
  }
  send_text(&s, kPing, sizeof(kPing));
  CHECK_OK(flush_ep(s.worker, s.ep, kBoundSeconds), "flush to the live child");
  printf("  the child's AM arrived, and an AM and flush to it completed\n");

  CHECK(kill(pid, SIGKILL) == 0, "kill");
  CHECK(waitpid(pid, NULL, 0) == pid, "waitpid");
  const double killed = now_s();
  /* Not found dead yet (no progress since the kill). A cancelling flush (UCP discarding an
   * endpoint) must not wait for the dead peer to match a marker: nothing is left in rdmx's
   * hands after an eager send, so it is done at once. */
  CHECK_OK(uct_ep_am_short(s.ep, kAmId, 0, kPing, sizeof(kPing)), "send after the kill");
  const ucs_status_t cancelled = uct_ep_flush(s.ep, UCT_FLUSH_FLAG_CANCEL, NULL);
  CHECK(cancelled == UCS_OK, "a cancelling flush gave %s, not UCS_OK at once",
        ucs_status_string(cancelled));
  /* The send may be refused already (the peer found dead); the flush must end in an error. */
  const ucs_status_t sent = uct_ep_am_short(s.ep, kAmId, 0, kPing, sizeof(kPing));
  const ucs_status_t flushed = flush_ep(s.worker, s.ep, kBoundSeconds);
  deadline = killed + kBoundSeconds;
  while (s.errors == 0) {
    CHECK(now_s() < deadline, "no error handler call %d s after the peer was killed",
          kBoundSeconds);
    uct_worker_progress(s.worker);
  }
  const double detected = now_s() - killed;
  for (int i = 0; i < 1000; ++i) { /* a second report would come from further progress */
    uct_worker_progress(s.worker);
  }
  printf("  killed the child: send %s, flush %s; error handler after %.2f s: %s, %u call(s)\n",
         ucs_status_string(sent), ucs_status_string(flushed), detected,
         ucs_status_string(s.error_status), s.errors);
  CHECK(flushed != UCS_OK, "the flush to the dead peer reported success");
  CHECK(s.errors == 1, "the error handler ran %u times", s.errors);
  CHECK(s.error_ep == s.ep, "the error handler named endpoint %p, not %p", (void*)s.error_ep,
        (void*)s.ep);
  CHECK(s.error_status != UCS_OK, "the error handler got UCS_OK");
  const ucs_status_t again = uct_ep_flush(s.ep, 0, NULL);
  CHECK(again != UCS_OK && again != UCS_INPROGRESS, "a flush after the failure gave %s",
        ucs_status_string(again));
  close_side(&s);
  close(to_parent[0]);
  close(to_child[1]);
  const char* kinds[] = {"qp", "cq", "srq", "mr", "pd", "ctx"};
  for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); ++k) {
    char left[1024];
    CHECK(own_resources(kinds[k], left, sizeof(left)) == 0, "%s left after close:\n%s", kinds[k],
          left);
  }
  printf("  closed: no verbs object of the process left\n");
}

int main(void) {
  uct_component_h* components;
  uct_md_resource_desc_t* mds;
  unsigned num_mds;

  setvbuf(stdout, NULL, _IOLBF, 0);
  setenv("RDMX_PEER_TIMEOUT_MS", "2000", 1); /* the bound above assumes it */
  const uct_component_h rdmx = find_rdmx(&components, &mds, &num_mds);
  for (const char* const* tl = (const char* const[]){"rdmx_rc", "rdmx_ud", NULL}; *tl; ++tl) {
    char md_name[UCT_MD_NAME_MAX], dev_name[UCT_DEVICE_NAME_MAX];
    CHECK(find_tl_device(rdmx, mds, num_mds, *tl, md_name, dev_name), "no device offers %s", *tl);
    run(rdmx, md_name, *tl, dev_name);
  }
  free(mds);
  uct_release_component_list(components);
  printf("PASS: both transports report a dead peer through the error handler\n");
  return 0;
}
