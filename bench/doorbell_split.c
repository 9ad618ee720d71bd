/*
 * doorbell_split: an LD_PRELOAD probe that splits an 8-byte ping-pong's time per process into the
 * doorbell system call and the user-space turn between two doorbells, for any verbs stack
 * (rdmx, UCX, perftest) without changing it.
 *
 * Why this split: on Soft-RoCE every ibv_post_send ends in a write(2) on the verbs command fd,
 * and rxe does the message's protocol work inside that call (requester, and over a local device
 * the peer's responder, the ACK and the completer too). A ping-pong's period per process is then
 * doorbell + turn, where the turn is what the stack spends between two doorbells: noticing the
 * reply and running its receive and send paths up to the next post. One-way latency is about
 * half of it. Both parts are medians of thousands of intervals, so they stay steady when the
 * mean latency moves with the host's load, and a stack's own cost (the turn) is seen apart from
 * the kernel's (the doorbell).
 *
 * Only write(2) calls made from libibverbs or its provider are timed (the caller's library is
 * looked up once per call site). Times are TSC reads on x86-64, calibrated against
 * CLOCK_MONOTONIC over the process's life (clock_gettime itself is a system call in guests whose
 * clocksource is hpet); elsewhere CLOCK_MONOTONIC. At exit it prints one line to stderr:
 *   rdmx_doorbell_split: pid P doorbells N syscall_us p10 A med B p90 C turn_us p10 D med E p90 F
 * The first tenth of the doorbells (connection set-up, warm-up) is left out.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

enum { kMaxDoorbells = 1 << 18, kMaxCallSites = 32 };

static float syscall_ticks[kMaxDoorbells];
static float turn_ticks[kMaxDoorbells];
static unsigned doorbells;
static uint64_t last_return;
static uint64_t start_ticks;
static struct timespec start_time;
static ssize_t (*real_write)(int, const void*, size_t);

/* Call sites of write(2) already classified: verbs or not. */
static void* site_address[kMaxCallSites];
static int site_is_verbs[kMaxCallSites];
static unsigned sites;

static uint64_t ticks(void) {
#if defined(__x86_64__)
  return __rdtsc();
#else
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
#endif
}

static int from_verbs(void* caller) {
  Dl_info info;
  int verbs;
  for (unsigned i = 0; i < sites; ++i) {
    if (site_address[i] == caller) {
      return site_is_verbs[i];
    }
  }
  verbs = dladdr(caller, &info) != 0 && info.dli_fname != NULL &&
          (strstr(info.dli_fname, "libibverbs") != NULL || strstr(info.dli_fname, "rdmav") != NULL);
  if (sites < kMaxCallSites) { /* benchmarks post from one thread: no lock */
    site_address[sites] = caller;
    site_is_verbs[sites] = verbs;
    ++sites;
  }
  return verbs;
}

ssize_t write(int fd, const void* buf, size_t count) {
  uint64_t begin;
  uint64_t end;
  ssize_t rc;
  if (real_write == NULL) {
    real_write = (ssize_t(*)(int, const void*, size_t))dlsym(RTLD_NEXT, "write");
  }
  if (!from_verbs(__builtin_return_address(0))) {
    return real_write(fd, buf, count);
  }
  begin = ticks();
  rc = real_write(fd, buf, count);
  end = ticks();
  if (doorbells < kMaxDoorbells) {
    syscall_ticks[doorbells] = (float)(end - begin);
    turn_ticks[doorbells] = last_return != 0 ? (float)(begin - last_return) : 0.0f;
    ++doorbells;
  }
  last_return = end;
  return rc;
}

__attribute__((constructor)) static void start(void) {
  clock_gettime(CLOCK_MONOTONIC, &start_time);
  start_ticks = ticks();
}

static int by_value(const void* a, const void* b) {
  const float x = *(const float*)a;
  const float y = *(const float*)b;
  return (x > y) - (x < y);
}

/* p10, median and p90 of v[0..n) in microseconds. */
static void quantiles(float* v, unsigned n, double ticks_per_us, double out[3]) {
  qsort(v, n, sizeof(*v), by_value);
  out[0] = v[n / 10] / ticks_per_us;
  out[1] = v[n / 2] / ticks_per_us;
  out[2] = v[n * 9 / 10] / ticks_per_us;
}

__attribute__((destructor)) static void report(void) {
  struct timespec now;
  double elapsed_us;
  double ticks_per_us;
  double sys[3];
  double turn[3];
  const unsigned skip = doorbells / 10;
  const unsigned n = doorbells - skip;
  if (n < 100) {
    return; /* not a ping-pong of this process (mpirun's helpers, a short run) */
  }
  clock_gettime(CLOCK_MONOTONIC, &now);
  elapsed_us = (double)(now.tv_sec - start_time.tv_sec) * 1e6 +
               (double)(now.tv_nsec - start_time.tv_nsec) / 1e3;
  ticks_per_us = (double)(ticks() - start_ticks) / elapsed_us;
  quantiles(syscall_ticks + skip, n, ticks_per_us, sys);
  quantiles(turn_ticks + skip, n, ticks_per_us, turn);
  fprintf(stderr,
          "rdmx_doorbell_split: pid %d doorbells %u syscall_us p10 %.2f med %.2f p90 %.2f "
          "turn_us p10 %.2f med %.2f p90 %.2f\n",
          (int)getpid(), doorbells, sys[0], sys[1], sys[2], turn[0], turn[1], turn[2]);
}
