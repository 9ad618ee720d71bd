/* Guest test of the transports rdmx_rc and rdmx_ud through UCX's PUBLIC UCT API only
 * (libuct_rdmx.so preloaded): teardown leaves nothing behind inside a process that goes on.
 *
 * For each transport, rounds of: open the MD, a UCT worker and two interfaces on one device,
 * connect an endpoint each way, send active messages both ways (am_short, and am_bcopy of
 * SEG_SIZE, which rdmx carries by rendezvous), and check every one's content and order. Then:
 *   round "flushed": flush both endpoints (remote completion), destroy them, close everything;
 *   round "in flight": send a further burst both ways and, without progress or flush, destroy
 *     the endpoints and close the interfaces with the messages still queued or on the wire.
 * After each round the kernel's own view (`rdma resource show` for this pid: QPs, CQs, SRQs,
 * MRs, PDs, contexts) must be back to what it was before the first; while the interfaces were
 * open it must have listed their objects (so the check sees them at all). Prints what it sees;
 * exits non-zero on the first failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucs/async/async_fwd.h>

#include "uct_test_util.h"

enum {
  kAmId = 7,
  kShortCount = 64,
  kBcopyCount = 4,
  kProgressSeconds = 60, /* a wait beyond this is a hang */
};

static const char* const kKinds[] = {"qp", "cq", "srq", "mr", "pd", "ctx"};
enum { kNumKinds = sizeof(kKinds) / sizeof(kKinds[0]) };

static void count_all(int counts[kNumKinds]) {
  for (int k = 0; k < kNumKinds; ++k) {
    counts[k] = own_resources(kKinds[k], NULL, 0);
  }
}

static void print_counts(const char* what, const int counts[kNumKinds]) {
  printf("  %-28s", what);
  for (int k = 0; k < kNumKinds; ++k) {
    printf(" %s %d", kKinds[k], counts[k]);
  }
  printf("\n");
}

/* One side's receive state: the AMs must arrive whole and in send order. */
typedef struct {
  const char* name;
  unsigned next; /* sequence number of the next AM expected */
  unsigned bad;
} rx_state_t;

/* Every AM is [u32 sequence][u32 length][bytes (sequence + i) & 0xff]. */
static void fill(uint8_t* p, unsigned seq, size_t length) {
  const uint32_t len32 = (uint32_t)length;
  memcpy(p, &seq, 4);
  memcpy(p + 4, &len32, 4);
  for (size_t i = 8; i < length; ++i) {
    p[i] = (uint8_t)(seq + i);
  }
}

static ucs_status_t on_am(void* arg, void* data, size_t length, unsigned flags) {
  rx_state_t* rx = arg;
  const uint8_t* p = data;
  uint32_t seq, len32;
  (void)flags;
  memcpy(&seq, p, 4);
  memcpy(&len32, p + 4, 4);
  int ok = length >= 8 && seq == rx->next && len32 == length;
  for (size_t i = 8; ok && i < length; ++i) {
    ok = p[i] == (uint8_t)(seq + i);
  }
  if (!ok && rx->bad++ == 0) {
    fprintf(stderr, "%s: AM %u of %zu bytes (header says %u, %u expected) is wrong\n", rx->name,
            seq, length, len32, rx->next);
  }
  ++rx->next;
  return UCS_OK;
}

typedef struct {
  unsigned seq;
  size_t length;
} pack_arg_t;

static size_t pack(void* dest, void* arg) {
  const pack_arg_t* a = arg;
  fill(dest, a->seq, a->length);
  return a->length;
}

typedef struct {
  uct_iface_h iface;
  uct_iface_attr_t attr;
  uct_device_addr_t* dev_addr;
  uct_iface_addr_t* iface_addr;
  uct_ep_h ep;
  rx_state_t rx;
  unsigned sent;
} side_t;

static void open_side(side_t* s, const char* name, uct_md_h md, uct_worker_h worker, const char* tl,
                      const char* dev) {
  memset(s, 0, sizeof(*s));
  s->rx.name = name;
  s->iface = open_iface(md, worker, tl, dev, kAmId, on_am, &s->rx, NULL, NULL, &s->attr);
  CHECK(s->attr.cap.flags & UCT_IFACE_FLAG_CONNECT_TO_IFACE, "%s lacks CONNECT_TO_IFACE", tl);
  get_addresses(s->iface, &s->attr, &s->dev_addr, &s->iface_addr);
}

static void connect_to(side_t* from, const side_t* to) {
  from->ep = connect_ep(from->iface, to->dev_addr, to->iface_addr);
}

/* Posts one AM (short or bcopy by size), progressing while the send pool is empty. */
static void send_one(uct_worker_h worker, side_t* s, size_t length) {
  uint8_t buffer[256];
  const unsigned seq = s->sent++;
  const double deadline = now_s() + kProgressSeconds;
  for (;;) {
    ucs_status_t status;
    if (length <= s->attr.cap.am.max_short && length <= sizeof(buffer)) {
      uint64_t header;
      fill(buffer, seq, length);
      memcpy(&header, buffer, 8);
      status = uct_ep_am_short(s->ep, kAmId, header, buffer + 8, (unsigned)(length - 8));
    } else {
      pack_arg_t arg = {seq, length};
      const ssize_t packed = uct_ep_am_bcopy(s->ep, kAmId, pack, &arg, 0);
      status = packed < 0 ? (ucs_status_t)packed : UCS_OK;
    }
    if (status == UCS_OK) {
      return;
    }
    CHECK(status == UCS_ERR_NO_RESOURCE, "%s: send %u: %s", s->rx.name, seq,
          ucs_status_string(status));
    CHECK(now_s() < deadline, "%s: no send resource for %d s", s->rx.name, kProgressSeconds);
    uct_worker_progress(worker);
  }
}

static void send_burst(uct_worker_h worker, side_t* s) {
  const size_t short_len = s->attr.cap.am.max_short < 64 ? s->attr.cap.am.max_short : 64;
  for (unsigned i = 0; i < kShortCount; ++i) {
    send_one(worker, s, 8 + i % (short_len - 7));
  }
  for (unsigned i = 0; i < kBcopyCount; ++i) {
    send_one(worker, s, s->attr.cap.am.max_bcopy);
  }
}

static void close_side(side_t* s) {
  if (s->ep != NULL) {
    uct_ep_destroy(s->ep);
  }
  uct_iface_close(s->iface);
  free(s->dev_addr);
  free(s->iface_addr);
}

static void run_round(uct_component_h component, const char* md_name, const char* tl,
                      const char* dev, int in_flight, const int baseline[kNumKinds]) {
  uct_md_config_t* md_config;
  uct_md_h md;
  ucs_async_context_t* async;
  uct_worker_h worker;
  side_t a, b;
  int counts[kNumKinds];

  printf("%s on %s, round \"%s\":\n", tl, dev, in_flight ? "in flight" : "flushed");
  CHECK_OK(uct_md_config_read(component, NULL, NULL, &md_config), "uct_md_config_read");
  CHECK_OK(uct_md_open(component, md_name, md_config, &md), "uct_md_open");
  uct_config_release(md_config);
  CHECK_OK(ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK, &async), "async_create");
  CHECK_OK(uct_worker_create(async, UCS_THREAD_MODE_SINGLE, &worker), "uct_worker_create");
  open_side(&a, "a", md, worker, tl, dev);
  open_side(&b, "b", md, worker, tl, dev);
  connect_to(&a, &b);
  connect_to(&b, &a);

  send_burst(worker, &a);
  send_burst(worker, &b);
  const double deadline = now_s() + kProgressSeconds;
  while (a.rx.next < b.sent || b.rx.next < a.sent) {
    CHECK(now_s() < deadline, "after %d s a has %u of %u AMs, b %u of %u", kProgressSeconds,
          a.rx.next, b.sent, b.rx.next, a.sent);
    uct_worker_progress(worker);
  }
  CHECK(a.rx.bad == 0 && b.rx.bad == 0, "%u and %u AMs wrong", a.rx.bad, b.rx.bad);
  printf("  %u AMs each way arrived whole and in order (short up to %zu B, bcopy %zu B)\n", a.sent,
         a.attr.cap.am.max_short, a.attr.cap.am.max_bcopy);
  count_all(counts);
  print_counts("open, after traffic:", counts);
  CHECK(counts[0] > baseline[0] && counts[1] > baseline[1] && counts[3] > baseline[3],
        "rdma resource show does not list the interfaces' QPs, CQs and MRs");

  if (in_flight) {
    send_burst(worker, &a);
    send_burst(worker, &b);
    printf("  closing with %u + %u AMs unreceived\n", a.sent - b.rx.next, b.sent - a.rx.next);
  } else {
    CHECK_OK(flush_ep(worker, a.ep, kProgressSeconds), "a: uct_ep_flush");
    CHECK_OK(flush_ep(worker, b.ep, kProgressSeconds), "b: uct_ep_flush");
    printf("  both endpoints flushed\n");
  }
  close_side(&a);
  close_side(&b);
  uct_worker_destroy(worker);
  ucs_async_context_destroy(async);
  uct_md_close(md);

  count_all(counts);
  print_counts("after close:", counts);
  for (int k = 0; k < kNumKinds; ++k) {
    CHECK(counts[k] == baseline[k], "%d %s left after close (%d before)", counts[k] - baseline[k],
          kKinds[k], baseline[k]);
  }
}

int main(void) {
  uct_component_h* components;
  uct_md_resource_desc_t* mds;
  unsigned num_mds, rounds = 0;
  int baseline[kNumKinds];

  setvbuf(stdout, NULL, _IOLBF, 0);
  count_all(baseline);
  print_counts("before:", baseline);
  const uct_component_h rdmx = find_rdmx(&components, &mds, &num_mds);
  for (const char* const* tl = (const char* const[]){"rdmx_rc", "rdmx_ud", NULL}; *tl; ++tl) {
    char md_name[UCT_MD_NAME_MAX], dev_name[UCT_DEVICE_NAME_MAX];
    CHECK(find_tl_device(rdmx, mds, num_mds, *tl, md_name, dev_name), "no device offers %s", *tl);
    for (int in_flight = 0; in_flight <= 1; ++in_flight, ++rounds) {
      run_round(rdmx, md_name, *tl, dev_name, in_flight, baseline);
    }
  }
  free(mds);
  uct_release_component_list(components);
  printf("PASS: %u rounds, nothing left after any\n", rounds);
  return 0;
}
