/* Guest test of rdmx_rc's and rdmx_ud's puts and gets through UCX's PUBLIC UCT API only
 * (libuct_rdmx.so preloaded), in one process: an MD, a UCT worker, and per transport two
 * interfaces on one device, an endpoint each way.
 *   - Each offers PUT_SHORT, PUT_BCOPY, GET_BCOPY, PUT_ZCOPY and GET_ZCOPY.
 *   - Memory registered before the interfaces open, and after: each interface's worker gets a
 *     registration of it in its own PD (the kernel lists one MR per registration and PD), and a
 *     key packed afterwards reaches it.
 *   - put_zcopy and get_zcopy from 1 byte to 4 MiB, every byte checked.
 *   - put_short, put_bcopy and get_bcopy (bounce buffers) from 1 byte to their largest, every
 *     byte checked.
 *   - the first put on a new endpoint is refused (no connection yet) and pending: a flush behind
 *     it must answer NO_RESOURCE, not end before it.
 *   - put_short without progress until the interface runs out of bounce buffers: the refused
 *     request must be taken by pending_add (an answer of BUSY would have UCP retry at once, with
 *     no progress to give a buffer back: seen so before pending_add counted bounce buffers),
 *     and run, with its put, at a later progress.
 *   - fence: a 1-MiB put, uct_ep_fence, then an AM: its handler must find the put's data
 *     there (the AM goes on another QP and could overtake it; seen passing without the fence
 *     too, the put being done before the peer's progress runs the handler).
 *   - fence the other way: an AM whose handler writes 8 bytes into the peer's region,
 *     uct_ep_fence, then a get of them: the get must read what the handler wrote. Without the
 *     fence the peer's device serves the get before the peer's progress runs the handler (seen
 *     failing so); with it, in one thread, the handler runs in the progress call that answers
 *     the fence's marker, before this side sees the answer.
 *   - flush: a put without completion, then uct_ep_flush: the data is there.
 *   - closing the interfaces leaves each registration in the MD's PD alone; deregistering, none.
 * Prints what it sees; exits non-zero on the first failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucs/async/async_fwd.h>

#include "uct_test_util.h"

enum {
  kAmId = 9,
  kSetId = 10,        /* an AM whose handler writes its header at fence_check_t.set_at */
  kRegion = 16 << 20, /* bytes of each registered buffer: its MRs are told apart by length */
  kLargest = 4 << 20, /* the largest put and get */
  kFence = 1 << 20,
  kSeconds = 60 /* a wait beyond this is a hang */
};

typedef struct {
  uint8_t* mem;
  uct_mem_h memh;
  uct_rkey_bundle_t key;
} region_t;

typedef struct {
  uct_iface_h iface;
  uct_iface_attr_t attr;
  uct_device_addr_t* dev_addr;
  uct_iface_addr_t* iface_addr;
  uct_ep_h ep;
} side_t;

/* What b's AM handler checks: the fenced put's last byte is in place when the AM arrives. */
typedef struct {
  const uint8_t* target;
  uint8_t want;
  int arrived;
  int in_place;
  uint8_t* set_at;
} fence_check_t;

static uint8_t pattern(unsigned seed, size_t i) {
  return (uint8_t)(i * 13 + seed * 71 + 5);
}

/* MRs of this process as long as a region: one per registration and PD. */
static int region_mrs(void) {
  static char mrs[1 << 16];
  char want[32];
  int n = 0;
  (void)own_resources("mr", mrs, sizeof(mrs));
  snprintf(want, sizeof(want), " mrlen %d ", kRegion);
  for (const char* p = strstr(mrs, want); p != NULL; p = strstr(p + 1, want)) {
    ++n;
  }
  return n;
}

static ucs_status_t on_am(void* arg, void* data, size_t length, unsigned flags) {
  fence_check_t* f = arg;
  (void)data;
  (void)length;
  (void)flags;
  f->arrived = 1;
  f->in_place = f->target[kFence - 1] == f->want && f->target[0] == f->want;
  return UCS_OK;
}

static ucs_status_t on_set(void* arg, void* data, size_t length, unsigned flags) {
  fence_check_t* f = arg;
  (void)flags;
  CHECK(length == sizeof(uint64_t), "the set AM carries %zu bytes", length);
  memcpy(f->set_at, data, sizeof(uint64_t));
  return UCS_OK;
}

static void open_side(side_t* s, uct_md_h md, uct_worker_h worker, const char* tl, const char* dev,
                      fence_check_t* fence) {
  memset(s, 0, sizeof(*s));
  s->iface = open_iface(md, worker, tl, dev, kAmId, on_am, fence, NULL, NULL, &s->attr);
  CHECK_OK(uct_iface_set_am_handler(s->iface, kSetId, on_set, fence, 0), "set_am_handler");
  CHECK((s->attr.cap.flags & UCT_IFACE_FLAG_PUT_ZCOPY) &&
            (s->attr.cap.flags & UCT_IFACE_FLAG_GET_ZCOPY),
        "%s lacks PUT_ZCOPY or GET_ZCOPY (flags 0x%lx)", tl, (unsigned long)s->attr.cap.flags);
  CHECK(s->attr.cap.put.max_zcopy >= kLargest && s->attr.cap.get.max_zcopy >= kLargest,
        "max_zcopy put %zu get %zu", s->attr.cap.put.max_zcopy, s->attr.cap.get.max_zcopy);
  CHECK((s->attr.cap.flags & UCT_IFACE_FLAG_PUT_SHORT) &&
            (s->attr.cap.flags & UCT_IFACE_FLAG_PUT_BCOPY) &&
            (s->attr.cap.flags & UCT_IFACE_FLAG_GET_BCOPY),
        "%s lacks PUT_SHORT, PUT_BCOPY or GET_BCOPY (flags 0x%lx)", tl,
        (unsigned long)s->attr.cap.flags);
  CHECK(s->attr.cap.put.max_short >= 8 && s->attr.cap.put.max_bcopy >= 4096 &&
            s->attr.cap.get.max_bcopy == s->attr.cap.put.max_bcopy,
        "max_short %zu, max_bcopy put %zu get %zu", s->attr.cap.put.max_short,
        s->attr.cap.put.max_bcopy, s->attr.cap.get.max_bcopy);
  get_addresses(s->iface, &s->attr, &s->dev_addr, &s->iface_addr);
}

static void connect_to(side_t* from, const side_t* to) {
  from->ep = connect_ep(from->iface, to->dev_addr, to->iface_addr);
}

static void close_side(side_t* s) {
  uct_ep_destroy(s->ep);
  uct_iface_close(s->iface);
  free(s->dev_addr);
  free(s->iface_addr);
}

static void register_region(uct_md_h md, region_t* r) {
  CHECK(posix_memalign((void**)&r->mem, 4096, kRegion) == 0, "posix_memalign");
  CHECK_OK(uct_md_mem_reg(md, r->mem, kRegion, UCT_MD_MEM_ACCESS_ALL, &r->memh), "mem_reg");
}

static void done(uct_completion_t* comp) {
  (void)comp;
}

/* A put or get of [buf, +len) at remote_addr, waited for unless comp is NULL. */
static void rma(uct_worker_h worker, uct_ep_h ep, int get, void* buf, size_t len, uct_mem_h memh,
                uint64_t remote_addr, uct_rkey_t rkey, uct_completion_t* comp) {
  const uct_iov_t iov = {.buffer = buf, .length = len, .memh = memh, .stride = 0, .count = 1};
  const double deadline = now_s() + kSeconds;
  ucs_status_t status;
  while ((status = get ? uct_ep_get_zcopy(ep, &iov, 1, remote_addr, rkey, comp)
                       : uct_ep_put_zcopy(ep, &iov, 1, remote_addr, rkey, comp)) ==
         UCS_ERR_NO_RESOURCE) {
    CHECK(now_s() < deadline, "%s of %zu B: no resource for %d s", get ? "get" : "put", len,
          kSeconds);
    uct_worker_progress(worker);
  }
  CHECK(status == UCS_INPROGRESS || status == UCS_OK, "%s of %zu B: %s", get ? "get" : "put", len,
        ucs_status_string(status));
}

static void wait_comp(uct_worker_h worker, uct_completion_t* comp, const char* what) {
  const double deadline = now_s() + kSeconds;
  while (comp->count > 0) {
    CHECK(now_s() < deadline, "%s not done after %d s", what, kSeconds);
    uct_worker_progress(worker);
  }
  CHECK_OK(comp->status, what);
}

static void check_bytes(const uint8_t* p, size_t n, unsigned seed, size_t at, const char* what) {
  for (size_t i = 0; i < n; ++i) {
    CHECK(p[i] == pattern(seed, at + i), "%s: byte %zu of %zu is 0x%02x, not 0x%02x", what, i, n,
          p[i], pattern(seed, at + i));
  }
}

typedef struct {
  const uint8_t* src;
  size_t length;
} pack_arg_t;

static size_t pack(void* dest, void* arg) {
  const pack_arg_t* a = arg;
  memcpy(dest, a->src, a->length);
  return a->length;
}

static void unpack(void* arg, const void* data, size_t length) {
  memcpy(arg, data, length);
}

/* put_short, put_bcopy and get_bcopy of a's region at `at` (the gets at half + at) into b's,
 * sizes 1 byte to each one's largest, every byte checked. Returns the bytes used from `at`. */
static size_t bounce_ops(uct_worker_h worker, const side_t* a, region_t* ra, region_t* rb,
                         size_t at, size_t half) {
  const size_t max_short = a->attr.cap.put.max_short;
  const size_t max_bcopy = a->attr.cap.put.max_bcopy;
  const size_t short_sizes[] = {1, 8, max_short};
  const size_t bcopy_sizes[] = {1, 100, 4095, max_bcopy};
  size_t offset = at;

  for (size_t k = 0; k < sizeof(short_sizes) / sizeof(short_sizes[0]); ++k) {
    const size_t n = short_sizes[k];
    ucs_status_t status;
    RETRY(worker, status, kSeconds,
          uct_ep_put_short(a->ep, ra->mem + offset, (unsigned)n, (uintptr_t)rb->mem + offset,
                           rb->key.rkey),
          "put_short");
    CHECK_OK(status, "put_short");
    CHECK_OK(flush_ep(worker, a->ep, kSeconds), "flush after put_short");
    check_bytes(rb->mem + offset, n, 1, offset, "put_short");
    offset += n;
  }
  for (size_t k = 0; k < sizeof(bcopy_sizes) / sizeof(bcopy_sizes[0]); ++k) {
    const size_t n = bcopy_sizes[k];
    pack_arg_t arg = {.src = ra->mem + offset, .length = n};
    uct_completion_t comp = {.func = done, .count = 1, .status = UCS_OK};
    ssize_t packed;
    ucs_status_t status;
    RETRY(worker, packed, kSeconds,
          uct_ep_put_bcopy(a->ep, pack, &arg, (uintptr_t)rb->mem + offset, rb->key.rkey),
          "put_bcopy");
    CHECK(packed == (ssize_t)n, "put_bcopy of %zu B answered %zd", n, packed);
    CHECK_OK(flush_ep(worker, a->ep, kSeconds), "flush after put_bcopy");
    check_bytes(rb->mem + offset, n, 1, offset, "put_bcopy");
    RETRY(worker, status, kSeconds,
          uct_ep_get_bcopy(a->ep, unpack, ra->mem + half + offset, n,
                           (uintptr_t)rb->mem + half + offset, rb->key.rkey, &comp),
          "get_bcopy");
    CHECK(status == UCS_INPROGRESS, "get_bcopy of %zu B: %s", n, ucs_status_string(status));
    wait_comp(worker, &comp, "get_bcopy");
    check_bytes(ra->mem + half + offset, n, 2, half + offset, "get_bcopy");
    offset += n;
  }
  CHECK(rb->mem[offset] == pattern(2, offset), "a put_bcopy wrote past its end");
  CHECK(ra->mem[half + offset] == pattern(1, half + offset), "a get_bcopy wrote past its end");
  return offset - at;
}

/* A pending request that posts one put_short of 8 bytes when it runs. */
typedef struct {
  uct_pending_req_t super;
  uct_ep_h ep;
  uint64_t value;
  uint64_t remote_addr;
  uct_rkey_t rkey;
  int ran;
} pending_put_t;

static ucs_status_t run_pending_put(uct_pending_req_t* self) {
  pending_put_t* p = (pending_put_t*)self;
  const ucs_status_t status =
      uct_ep_put_short(p->ep, &p->value, sizeof(p->value), p->remote_addr, p->rkey);
  if (status == UCS_OK) {
    p->ran = 1;
  }
  return status;
}

/* put_short with no progress until refused; the refused one goes to pending_add, which must
 * take it, and it must run at a later progress. Every put's 8 bytes checked after a flush. */
static void bounce_exhaustion(uct_worker_h worker, const side_t* a, region_t* rb, size_t at) {
  enum { kMax = 4096 };
  uint64_t* slots = (uint64_t*)(rb->mem + at);
  pending_put_t p = {.ep = a->ep, .rkey = rb->key.rkey};
  ucs_status_t status;
  unsigned n = 0;
  const double deadline = now_s() + kSeconds;

  for (;;) {
    const uint64_t value = 0xb0b0000000000000ull | n;
    CHECK(n < kMax, "%u put_shorts without progress, none refused", n);
    status = uct_ep_put_short(a->ep, &value, sizeof(value), (uintptr_t)&slots[n], rb->key.rkey);
    if (status == UCS_ERR_NO_RESOURCE) {
      break;
    }
    CHECK_OK(status, "put_short");
    ++n;
  }
  p.value = 0xb0b0000000000000ull | n;
  p.remote_addr = (uintptr_t)&slots[n];
  p.super.func = run_pending_put;
  status = uct_ep_pending_add(a->ep, &p.super, 0);
  CHECK(status == UCS_OK,
        "pending_add after put_short %u was refused for want of a resource answered %s", n,
        ucs_status_string(status));
  while (!p.ran) {
    CHECK(now_s() < deadline, "the pending put_short did not run in %d s", kSeconds);
    uct_worker_progress(worker);
  }
  CHECK_OK(flush_ep(worker, a->ep, kSeconds), "flush after the put_shorts");
  for (unsigned i = 0; i <= n; ++i) {
    CHECK(slots[i] == (0xb0b0000000000000ull | i), "put_short %u of %u: 0x%016llx", i, n + 1,
          (unsigned long long)slots[i]);
  }
  printf(
      "put_short: %u taken without progress, the next one pending and run later; all %u in "
      "place\n",
      n, n + 1);
}

/* The first put on a new endpoint, before any progress: the connection (over rdmx_ud, the
 * on-demand RC connection) is not up, so it is refused, and pending_add takes it. A flush then
 * must not end before it (UCT's flush covers pending requests): NO_RESOURCE (seen: UCS_OK, and
 * MPI_Win_fence over rdmx_ud returned before a get had run). Then progress runs it. */
static void pending_before_flush(uct_worker_h worker, const side_t* a, region_t* rb, size_t at) {
  const uint64_t value = 0x5eed5eed5eed5eedull;
  pending_put_t p = {.ep = a->ep, .rkey = rb->key.rkey, .value = value};
  ucs_status_t status;
  const double deadline = now_s() + kSeconds;

  p.remote_addr = (uintptr_t)(rb->mem + at);
  p.super.func = run_pending_put;
  status = uct_ep_put_short(a->ep, &value, sizeof(value), p.remote_addr, rb->key.rkey);
  CHECK(status == UCS_ERR_NO_RESOURCE, "the first put, before any progress: %s",
        ucs_status_string(status));
  CHECK_OK(uct_ep_pending_add(a->ep, &p.super, 0), "pending_add of the first put");
  status = uct_ep_flush(a->ep, 0, NULL);
  CHECK(status == UCS_ERR_NO_RESOURCE, "a flush behind a pending put answered %s",
        ucs_status_string(status));
  while (!p.ran) {
    CHECK(now_s() < deadline, "the pending put did not run in %d s", kSeconds);
    uct_worker_progress(worker);
  }
  CHECK_OK(flush_ep(worker, a->ep, kSeconds), "flush after the pending put");
  CHECK(memcmp(rb->mem + at, &value, sizeof(value)) == 0, "the pending put is not in place");
  printf("first put refused before the connection is up, pending; a flush behind it: %s\n",
         ucs_status_string(UCS_ERR_NO_RESOURCE));
}

/* Everything above over one transport: its two interfaces, their registrations and keys. */
static void run_tl(const char* tl, const uct_test_env_t* e) {
  const uct_component_h rdmx = e->rdmx;
  const uct_md_h md = e->md;
  const uct_worker_h worker = e->worker;
  const char* dev_name = e->dev_name;
  side_t a, b;
  region_t ra, rb;
  fence_check_t fence = {0};
  const size_t sizes[] = {1, 8, 4095, 65536, 1 << 20, kLargest}; /* in all, under half */
  const size_t half = kRegion / 2;

  printf("--- %s\n", tl);
  register_region(md, &ra); /* before the interfaces */
  CHECK(region_mrs() == 1, "%d MRs for one registration without interfaces", region_mrs());
  open_side(&a, md, worker, tl, dev_name, &fence);
  open_side(&b, md, worker, tl, dev_name, &fence);
  register_region(md, &rb); /* after */
  CHECK(region_mrs() == 6, "%d MRs for two registrations with two %s interfaces (want 6)",
        region_mrs(), tl);
  printf("%s: two registrations, each in the MD's PD and both workers': 6 MRs\n", dev_name);
  unpack_key(e, ra.memh, &ra.key);
  unpack_key(e, rb.memh, &rb.key);
  connect_to(&a, &b);
  connect_to(&b, &a);
  pending_before_flush(worker, &a, &rb, 0);
  for (size_t i = 0; i < kRegion; ++i) {
    ra.mem[i] = pattern(1, i);
    rb.mem[i] = pattern(2, i);
  }

  /* a puts its lower half, piece by piece, at the start of b's; a gets b's upper half. */
  size_t offset = 0;
  for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); ++k) {
    const size_t n = sizes[k];
    uct_completion_t comp = {.func = done, .count = 1, .status = UCS_OK};
    rma(worker, a.ep, 0, ra.mem + offset, n, ra.memh, (uintptr_t)rb.mem + offset, rb.key.rkey,
        &comp);
    wait_comp(worker, &comp, "put");
    check_bytes(rb.mem + offset, n, 1, offset, "put");
    comp.count = 1;
    rma(worker, a.ep, 1, ra.mem + half + offset, n, ra.memh, (uintptr_t)rb.mem + half + offset,
        rb.key.rkey, &comp);
    wait_comp(worker, &comp, "get");
    check_bytes(ra.mem + half + offset, n, 2, half + offset, "get");
    offset += n;
  }
  CHECK(rb.mem[offset] == pattern(2, offset), "a put wrote past its end");
  printf("put_zcopy and get_zcopy of 1 B to 4 MiB: every byte in place\n");
  ++offset; /* past the byte just checked */
  offset += bounce_ops(worker, &a, &ra, &rb, offset, half);
  printf("put_short (1 B to %zu B), put_bcopy and get_bcopy (1 B to %zu B): every byte in place\n",
         a.attr.cap.put.max_short, a.attr.cap.put.max_bcopy);
  bounce_exhaustion(worker, &a, &rb, offset + 64);

  /* b's endpoint the other way: b puts into a's region. */
  {
    uct_completion_t comp = {.func = done, .count = 1, .status = UCS_OK};
    rma(worker, b.ep, 0, rb.mem + half, 65536, rb.memh, (uintptr_t)ra.mem, ra.key.rkey, &comp);
    wait_comp(worker, &comp, "put b->a");
    check_bytes(ra.mem, 65536, 2, half, "put b->a");
  }

  /* Fence: the AM after it finds the put before it in place. */
  memset(ra.mem, 0xc3, kFence);
  fence.target = rb.mem;
  fence.want = 0xc3;
  {
    uct_completion_t comp = {.func = done, .count = 1, .status = UCS_OK};
    ucs_status_t status;
    const double deadline = now_s() + kSeconds;
    rma(worker, a.ep, 0, ra.mem, kFence, ra.memh, (uintptr_t)rb.mem, rb.key.rkey, &comp);
    CHECK_OK(uct_ep_fence(a.ep, 0), "uct_ep_fence");
    RETRY(worker, status, kSeconds, uct_ep_am_short(a.ep, kAmId, 0, NULL, 0),
          "am_short after the fence");
    CHECK_OK(status, "am_short after the fence");
    while (!fence.arrived) {
      CHECK(now_s() < deadline, "the AM after the fence did not arrive in %d s", kSeconds);
      uct_worker_progress(worker);
    }
    CHECK(fence.in_place, "the AM after the fence overtook the put before it");
    wait_comp(worker, &comp, "fenced put");
  }
  printf("fence: the AM after it found the 1-MiB put before it in place\n");

  /* Fence the other way round: an AM (the fence posts a marker after it), then a get. */
  fence.set_at = rb.mem + half;
  {
    const uint64_t value = 0x0123456789abcdefull;
    uint64_t got;
    uct_completion_t comp = {.func = done, .count = 1, .status = UCS_OK};
    ucs_status_t status;
    RETRY(worker, status, kSeconds, uct_ep_am_short(a.ep, kSetId, value, NULL, 0),
          "am_short before the fence");
    CHECK_OK(status, "am_short before the fence");
    CHECK_OK(uct_ep_fence(a.ep, 0), "uct_ep_fence");
    rma(worker, a.ep, 1, ra.mem + half, sizeof(got), ra.memh, (uintptr_t)(rb.mem + half),
        rb.key.rkey, &comp);
    wait_comp(worker, &comp, "fenced get");
    memcpy(&got, ra.mem + half, sizeof(got));
    CHECK(got == value, "the get after the fence read 0x%016llx, not the AM's 0x%016llx",
          (unsigned long long)got, (unsigned long long)value);
  }
  printf("fence: the get after it read what the AM before it wrote\n");

  /* Flush: a put without completion is done once the endpoint is flushed. */
  memset(ra.mem, 0x3c, 65536);
  rma(worker, a.ep, 0, ra.mem, 65536, ra.memh, (uintptr_t)rb.mem, rb.key.rkey, NULL);
  CHECK_OK(flush_ep(worker, a.ep, kSeconds), "uct_ep_flush");
  CHECK(rb.mem[0] == 0x3c && rb.mem[65535] == 0x3c, "a flushed put is not in place");
  printf("flush: a put without completion was in place after it\n");

  close_side(&a);
  close_side(&b);
  CHECK(region_mrs() == 2, "%d MRs after the interfaces closed (want 2: the MD's)", region_mrs());
  uct_rkey_release(rdmx, &ra.key);
  uct_rkey_release(rdmx, &rb.key);
  CHECK_OK(uct_md_mem_dereg(md, ra.memh), "mem_dereg");
  CHECK_OK(uct_md_mem_dereg(md, rb.memh), "mem_dereg");
  CHECK(region_mrs() == 0, "%d MRs after deregistering", region_mrs());
  free(ra.mem);
  free(rb.mem);
}

int main(void) {
  uct_test_env_t e;

  setvbuf(stdout, NULL, _IOLBF, 0);
  open_env(&e, "rdmx_rc");
  run_tl("rdmx_rc", &e);
  run_tl("rdmx_ud", &e);
  close_env(&e);
  printf(
      "PASS: rdmx_rc and rdmx_ud put/get short, bcopy and zcopy, fence and flush; registrations "
      "follow the interfaces\n");
  return 0;
}
