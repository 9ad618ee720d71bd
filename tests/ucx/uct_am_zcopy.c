/* Guest test of rdmx_rc's am_zcopy through UCX's PUBLIC UCT API only (libuct_rdmx.so preloaded),
 * in one process: an MD, a UCT worker, two rdmx_rc interfaces on one device, an endpoint a -> b.
 * It sets UCX_RDMX_RC_TX_QUEUE_LEN=16 before the interfaces read their configuration: 16
 * operation descriptors, which puts and am_zcopys share.
 *   - rdmx_rc offers AM_ZCOPY with a 64-byte header and one iov, max_zcopy (header included)
 *     the size of its am_short.
 *   - kMessages AMs, am_zcopy (headers of 0, 8 and 64 bytes, payloads up to max_zcopy less the
 *     header, from a registered region) and am_short in turn: b's handler must get each once, in
 *     order, with its length and every byte; every am_zcopy answered UCS_INPROGRESS completes
 *     once with UCS_OK.
 *   - puts without progress until one is refused (the 16 operation descriptors are all taken):
 *     an am_zcopy then must still go (by a copy: UCS_OK), as an am_short after it does, and
 *     arrive before it. An am_zcopy refused there would be queued by UCP and overtaken by the next
 *     am_short, which UCP sends without looking at the pending queue (seen failing so, when
 *     am_zcopy answered UCS_ERR_NO_RESOURCE for want of an operation descriptor).
 * Prints what it sees; exits non-zero on the first failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucs/async/async_fwd.h>

#include "uct_test_util.h"

enum {
  kAmId = 11,
  kMessages = 120,
  kRegion = 4 << 20,
  kSeconds = 60 /* a wait beyond this is a hang */
};

/* What b's handler expects: the AMs in order, each with its sequence number in its first 8
 * bytes (the header's, or the payload's when there is no header) and then pattern(seq, i). */
typedef struct {
  uint64_t next;
  size_t lengths[kMessages + 2];
} receiver_t;

static uint8_t pattern(uint64_t seq, size_t i) {
  return (uint8_t)(seq * 31 + i * 7 + 3);
}

static ucs_status_t on_am(void* arg, void* data, size_t length, unsigned flags) {
  receiver_t* r = arg;
  const uint8_t* p = data;
  uint64_t seq;
  (void)flags;
  CHECK(length >= sizeof(seq), "an AM of %zu bytes (at least 8 sent)", length);
  memcpy(&seq, p, sizeof(seq));
  CHECK(seq == r->next, "AM %llu arrived where AM %llu was due", (unsigned long long)seq,
        (unsigned long long)r->next);
  CHECK(length == r->lengths[seq], "AM %llu: %zu bytes, not %zu", (unsigned long long)seq, length,
        r->lengths[seq]);
  for (size_t i = sizeof(seq); i < length; ++i) {
    CHECK(p[i] == pattern(seq, i), "AM %llu: byte %zu of %zu is 0x%02x, not 0x%02x",
          (unsigned long long)seq, i, length, p[i], pattern(seq, i));
  }
  ++r->next;
  return UCS_OK;
}

static unsigned completions;
static void on_comp(uct_completion_t* comp) {
  CHECK_OK(comp->status, "an am_zcopy's completion");
  ++completions;
}

/* AM seq by am_zcopy: `hdr` bytes of header, then the payload from the region at `src` (left
 * untouched until its completion), laid out as on_am expects. Returns the call's answer. */
static ucs_status_t send_zcopy(uct_ep_h ep, uint64_t seq, size_t hdr, size_t total, uint8_t* src,
                               uct_mem_h memh, uct_completion_t* comp) {
  uint8_t header[64];
  uint8_t whole[16384];
  CHECK(total <= sizeof(whole) && hdr <= sizeof(header) && total >= sizeof(seq), "sizes");
  memcpy(whole, &seq, sizeof(seq));
  for (size_t i = sizeof(seq); i < total; ++i) {
    whole[i] = pattern(seq, i);
  }
  memcpy(header, whole, hdr);
  memcpy(src, whole + hdr, total - hdr);
  const uct_iov_t iov = {
      .buffer = src, .length = total - hdr, .memh = memh, .stride = 0, .count = 1};
  return uct_ep_am_zcopy(ep, kAmId, header, (unsigned)hdr, &iov, 1, 0, comp);
}

static ucs_status_t send_short(uct_ep_h ep, uint64_t seq, size_t total) {
  uint8_t payload[256];
  CHECK(total >= sizeof(seq) && total - sizeof(seq) <= sizeof(payload), "sizes");
  for (size_t i = sizeof(seq); i < total; ++i) {
    payload[i - sizeof(seq)] = pattern(seq, i);
  }
  return uct_ep_am_short(ep, kAmId, seq, payload, (unsigned)(total - sizeof(seq)));
}

static void wait_for(uct_worker_h worker, const receiver_t* r, uint64_t count, unsigned comps,
                     const char* what) {
  const double deadline = now_s() + kSeconds;
  while (r->next < count || completions < comps) {
    CHECK(now_s() < deadline, "%s: %llu of %llu AMs, %u of %u completions after %d s", what,
          (unsigned long long)r->next, (unsigned long long)count, completions, comps, kSeconds);
    uct_worker_progress(worker);
  }
}

static void put_done(uct_completion_t* comp) {
  (void)comp;
}

/* Each am_zcopy answered UCS_INPROGRESS was completed exactly once (a second completion takes
 * its count below 0 without a callback), and none answered UCS_OK was completed at all. */
static void check_completions(const uct_completion_t* comps, const ucs_status_t* answers,
                              unsigned n, unsigned zcopies) {
  CHECK(completions == zcopies, "%u completions for %u am_zcopy answered UCS_INPROGRESS",
        completions, zcopies);
  for (unsigned m = 0; m < n; ++m) {
    if (comps[m].func != NULL) {
      const int want = answers[m] == UCS_INPROGRESS ? 0 : 1;
      CHECK(comps[m].count == want, "am_zcopy %u (%s): completion count %d, not %d", m,
            ucs_status_string(answers[m]), comps[m].count, want);
    }
  }
}

int main(void) {
  uct_test_env_t e;
  uct_iface_attr_t attr_a, attr_b;
  uct_device_addr_t* dev_addr;
  uct_iface_addr_t* iface_addr;
  static receiver_t r;
  static uct_completion_t comps[kMessages + 2];
  static ucs_status_t answers[kMessages + 2];
  uint8_t* mem;
  uct_mem_h memh;
  unsigned zcopies = 0, copied = 0;

  setvbuf(stdout, NULL, _IOLBF, 0);
  CHECK(setenv("UCX_RDMX_RC_TX_QUEUE_LEN", "16", 1) == 0, "setenv");
  open_env(&e, "rdmx_rc");
  const uct_worker_h worker = e.worker;
  const uct_md_h md = e.md;
  uct_iface_h a =
      open_iface(md, worker, "rdmx_rc", e.dev_name, kAmId, on_am, &r, NULL, NULL, &attr_a);
  uct_iface_h b =
      open_iface(md, worker, "rdmx_rc", e.dev_name, kAmId, on_am, &r, NULL, NULL, &attr_b);
  const size_t max_zcopy = attr_a.cap.am.max_zcopy;
  CHECK((attr_a.cap.flags & UCT_IFACE_FLAG_AM_ZCOPY) && attr_a.cap.am.max_hdr == 64 &&
            attr_a.cap.am.max_iov == 1 && max_zcopy == attr_a.cap.am.max_short &&
            max_zcopy >= 4096 + 64,
        "rdmx_rc: AM_ZCOPY %d, max_hdr %zu, max_iov %zu, max_zcopy %zu, max_short %zu",
        (attr_a.cap.flags & UCT_IFACE_FLAG_AM_ZCOPY) != 0, attr_a.cap.am.max_hdr,
        attr_a.cap.am.max_iov, max_zcopy, attr_a.cap.am.max_short);
  printf("rdmx_rc: am_zcopy up to %zu B with a header of up to %zu B, one iov\n", max_zcopy,
         attr_a.cap.am.max_hdr);
  get_addresses(b, &attr_b, &dev_addr, &iface_addr);
  uct_ep_h ep = connect_ep(a, dev_addr, iface_addr);
  CHECK(posix_memalign((void**)&mem, 4096, kRegion) == 0, "posix_memalign");
  CHECK_OK(uct_md_mem_reg(md, mem, kRegion, UCT_MD_MEM_ACCESS_ALL, &memh), "mem_reg");

  /* am_zcopy and am_short in turn, in order. */
  const size_t hdrs[] = {0, 8, 64};
  for (uint64_t m = 0; m < kMessages; ++m) {
    ucs_status_t status;
    if (m % 2 != 0) {
      r.lengths[m] = 8 + (m * 37) % 120;
      RETRY(worker, status, kSeconds, send_short(ep, m, r.lengths[m]), "am_short");
      CHECK_OK(status, "am_short");
      continue;
    }
    const size_t hdr = hdrs[(m / 2) % 3];
    const size_t payloads[] = {8, 100, 1000, 4000, max_zcopy - hdr};
    r.lengths[m] = hdr + payloads[(m / 2) % 5];
    comps[m] = (uct_completion_t){.func = on_comp, .count = 1, .status = UCS_OK};
    RETRY(worker, status, kSeconds,
          send_zcopy(ep, m, hdr, r.lengths[m], mem + m * 16384, memh, &comps[m]), "am_zcopy");
    CHECK(status == UCS_INPROGRESS || status == UCS_OK, "am_zcopy %llu: %s", (unsigned long long)m,
          ucs_status_string(status));
    answers[m] = status;
    zcopies += status == UCS_INPROGRESS;
    copied += status == UCS_OK;
  }
  wait_for(worker, &r, kMessages, zcopies, "am_zcopy and am_short");
  check_completions(comps, answers, kMessages, zcopies);
  CHECK(zcopies > 0, "no am_zcopy went from the caller's memory (%u copied)", copied);
  printf(
      "%d AMs in order with every byte: %u am_zcopy from the caller's memory (each completed "
      "once), %u copied, %d am_short\n",
      kMessages, zcopies, copied, kMessages / 2);

  /* Puts until the operation descriptors run out, then an am_zcopy and an am_short. */
  {
    uct_completion_t put_comp = {.func = put_done, .count = 0, .status = UCS_OK};
    const uct_iov_t iov = {.buffer = mem, .length = 8, .memh = memh, .stride = 0, .count = 1};
    uct_rkey_bundle_t key;
    unsigned puts = 0;
    ucs_status_t status;
    unpack_key(&e, memh, &key);
    for (;;) {
      CHECK(puts < 4096, "%u puts without progress, none refused", puts);
      ++put_comp.count;
      status = uct_ep_put_zcopy(ep, &iov, 1, (uintptr_t)(mem + kRegion - 8), key.rkey, &put_comp);
      if (status == UCS_ERR_NO_RESOURCE) {
        --put_comp.count;
        break;
      }
      CHECK(status == UCS_INPROGRESS, "put %u: %s", puts, ucs_status_string(status));
      ++puts;
    }
    const uint64_t m = kMessages;
    r.lengths[m] = 64 + 1000;
    comps[m] = (uct_completion_t){.func = on_comp, .count = 1, .status = UCS_OK};
    status = send_zcopy(ep, m, 64, r.lengths[m], mem + m * 16384, memh, &comps[m]);
    /* 16 descriptors, all free after the AMs above: the 17th put is the one refused. */
    CHECK(puts == 16, "%u puts before one was refused, not the 16 descriptors", puts);
    CHECK(status == UCS_OK,
          "am_zcopy after %u puts took every operation descriptor: %s, not UCS_OK (by a copy; "
          "am_short would go)",
          puts, ucs_status_string(status));
    answers[m] = status;
    r.lengths[m + 1] = 16;
    CHECK_OK(send_short(ep, m + 1, r.lengths[m + 1]), "am_short after it");
    wait_for(worker, &r, kMessages + 2, zcopies, "after the puts");
    check_completions(comps, answers, kMessages + 1, zcopies);
    const double deadline = now_s() + kSeconds;
    while (put_comp.count > 0) {
      CHECK(now_s() < deadline, "%d puts not done after %d s", put_comp.count, kSeconds);
      uct_worker_progress(worker);
    }
    printf(
        "%u puts took the operation descriptors; an am_zcopy then went (copied) and arrived "
        "before the am_short after it\n",
        puts);
    uct_rkey_release(e.rdmx, &key);
  }

  CHECK_OK(flush_ep(worker, ep, kSeconds), "flush");
  uct_ep_destroy(ep);
  uct_iface_close(a);
  uct_iface_close(b);
  free(dev_addr);
  free(iface_addr);
  CHECK_OK(uct_md_mem_dereg(md, memh), "mem_dereg");
  free(mem);
  close_env(&e);
  printf("PASS: rdmx_rc am_zcopy in order with am_short, also with no operation descriptor free\n");
  return 0;
}
