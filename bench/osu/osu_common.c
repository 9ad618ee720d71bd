/* Options, buffers, watchdog, pre-flight and output of the OSU-style benchmarks (osu_common.h). */
#define _POSIX_C_SOURCE 200809L
#include "osu_common.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Watchdog message parts, set before each size: the handler may only use async-signal-safe calls.
 */
static char osu_wd_msg[160] = "watchdog: no size started yet\n";
static size_t osu_wd_len = 30;

static void osu_watchdog(int sig) {
  ssize_t n = write(2, osu_wd_msg, osu_wd_len);
  (void)n;
  (void)sig;
  _exit(3);
}

void osu_defaults(osu_opts_t* o, const char* name, const char* title, int lat) {
  memset(o, 0, sizeof(*o));
  o->name = name;
  o->title = title;
  o->min_size = 1;
  o->max_size = (size_t)4 << 20;
  /* osu_latency: 10000/100 and 1000/10 above 8 KiB; osu_bw: 100/10 and 20/2. */
  o->iters = lat ? 10000 : 100;
  o->skip = lat ? 100 : 10;
  o->iters_large = lat ? 1000 : 20;
  o->skip_large = lat ? 10 : 2;
  o->window = 64;
  o->threads = 2;
  o->min_iters = lat ? 20 : 3;
  o->budget_s = 0.0;
  o->timeout_s = 120;
}

static void osu_usage(const osu_opts_t* o) {
  printf(
      "usage: mpirun -np N %s [options]\n"
      "  -m MIN[:MAX]  message sizes, powers of two from MIN (default %zu:%zu)\n"
      "  -i N          iterations up to %d B (default %d)\n"
      "  -I N          iterations above %d B (default %d)\n"
      "  -x N          warm-up iterations up to %d B (default %d)\n"
      "  -X N          warm-up iterations above %d B (default %d)\n"
      "  -W N          window of non-blocking operations, bandwidth tests (default %d)\n"
      "  -B BYTES      bandwidth tests: at most BYTES in flight per window, i.e. the window\n"
      "                is min(W, BYTES / size), at least 1 (default 0 = no cap, OSU's way)\n"
      "  -t N          threads per rank, multi-threaded latency (default %d)\n"
      "  -D SEC        time budget per size: fewer iterations when the warm-up is slow\n"
      "                (default %.1f = off)\n"
      "  -n N          never fewer iterations than this under -D (default %d)\n"
      "  -P            latency tests: time every round trip, print p50, p99 and max beside\n"
      "                the mean (half round trips, us; not with -D)\n"
      "  -T SEC        watchdog per size: the job ends if one size takes longer (default %u)\n",
      o->name, o->min_size, o->max_size, OSU_LARGE_SIZE, o->iters, OSU_LARGE_SIZE, o->iters_large,
      OSU_LARGE_SIZE, o->skip, OSU_LARGE_SIZE, o->skip_large, o->window, o->threads, o->budget_s,
      o->min_iters, o->timeout_s);
}

static int osu_parse_int(const char* s, int lo, int* out) {
  char* end = NULL;
  long v = strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < lo || v > 1000000000L) {
    return 0;
  }
  *out = (int)v;
  return 1;
}

static int osu_parse_sizes(const char* s, osu_opts_t* o) {
  char* end = NULL;
  unsigned long long lo = strtoull(s, &end, 10), hi;
  if (end == s) {
    return 0;
  }
  hi = lo > o->max_size ? lo : o->max_size;
  if (*end == ':') {
    const char* h = end + 1;
    hi = strtoull(h, &end, 10);
    if (end == h) {
      return 0;
    }
  }
  if (*end != '\0' || hi < lo || hi > (1ull << 30)) {
    return 0;
  }
  o->min_size = (size_t)lo;
  o->max_size = (size_t)hi;
  return 1;
}

int osu_setup_mt(osu_opts_t* o, int argc, char** argv, const char* name, const char* title,
                 int lat) {
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  osu_defaults(o, name, title, lat);
  if (osu_setup(o, argc, argv, 2) != 0) {
    MPI_Finalize();
    return 1;
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    if (o->rank == 0) {
      fprintf(stderr, "%s: MPI_THREAD_MULTIPLE not provided (got level %d)\n", name, provided);
    }
    MPI_Finalize();
    return 1;
  }
  return 0;
}

int osu_setup(osu_opts_t* o, int argc, char** argv, int exact_np) {
  int c, ok = 1, t = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &o->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &o->size);
  opterr = 0;
  while (ok && (c = getopt(argc, argv, "m:i:I:x:X:W:B:t:D:n:T:Ph")) != -1) {
    switch (c) {
      case 'm':
        ok = osu_parse_sizes(optarg, o);
        break;
      case 'i':
        ok = osu_parse_int(optarg, 1, &o->iters);
        break;
      case 'I':
        ok = osu_parse_int(optarg, 1, &o->iters_large);
        break;
      case 'x':
        ok = osu_parse_int(optarg, 0, &o->skip);
        break;
      case 'X':
        ok = osu_parse_int(optarg, 0, &o->skip_large);
        break;
      case 'W':
        ok = osu_parse_int(optarg, 1, &o->window);
        break;
      case 'B': {
        char* end = NULL;
        unsigned long long b = strtoull(optarg, &end, 10);
        ok = end != optarg && *end == '\0';
        o->window_bytes = (size_t)b;
        break;
      }
      case 't':
        ok = osu_parse_int(optarg, 1, &o->threads);
        break;
      case 'n':
        ok = osu_parse_int(optarg, 1, &o->min_iters);
        break;
      case 'T':
        ok = osu_parse_int(optarg, 1, &t) && (o->timeout_s = (unsigned)t) > 0;
        break;
      case 'P':
        o->per_iter = 1;
        break;
      case 'D': {
        char* end = NULL;
        o->budget_s = strtod(optarg, &end);
        ok = end != optarg && *end == '\0' && o->budget_s >= 0.0;
        break;
      }
      default:
        ok = 0;
        break;
    }
  }
  ok = ok && !(o->per_iter && o->budget_s > 0.0); /* -P times a fixed count */
  if (!ok || optind != argc) {
    if (o->rank == 0) {
      if (c != 'h') {
        fprintf(stderr, "%s: bad option or value (see -h)\n", o->name);
      }
      osu_usage(o);
    }
    return 1;
  }
  if ((exact_np > 0 && o->size != exact_np) || (exact_np == 0 && (o->size < 2 || o->size % 2))) {
    if (o->rank == 0) {
      if (exact_np > 0) {
        fprintf(stderr, "%s: needs exactly %d processes (got %d)\n", o->name, exact_np, o->size);
      } else {
        fprintf(stderr, "%s: needs an even number of processes (got %d)\n", o->name, o->size);
      }
    }
    return 1;
  }
  /* Errors come back to the caller (OSU_CHECK names the call, then ends the job). */
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  o->pairs = o->size / 2;
  o->partner = o->rank < o->pairs ? o->rank + o->pairs : o->rank - o->pairs;
  signal(SIGALRM, osu_watchdog);
  if (o->rank == 0) {
    printf("# %s\n", o->title);
    printf("# rdmx bench/osu (OSU micro-benchmark conventions, own code); np %d", o->size);
    if (o->budget_s > 0.0) {
      printf(", time budget %.2f s per size", o->budget_s);
    }
    if (o->window_bytes > 0) {
      printf(", window capped at %zu bytes in flight", o->window_bytes);
    }
    printf("\n");
    fflush(stdout);
  }
  return 0;
}

void* osu_alloc(size_t n) {
  void* p = NULL;
  size_t len = n > 0 ? n : 1;
  if (posix_memalign(&p, 4096, len) != 0) {
    fprintf(stderr, "bench: cannot allocate %zu bytes\n", len);
    MPI_Abort(MPI_COMM_WORLD, 2);
    exit(2);
  }
  memset(p, 0, len);
  return p;
}

void osu_arm(const osu_opts_t* o, size_t size, const char* phase) {
  int n = snprintf(osu_wd_msg, sizeof(osu_wd_msg),
                   "%s: rank %d: watchdog: size %zu (%s) took more than %u s (-T); ending the "
                   "job\n",
                   o->name, o->rank, size, phase, o->timeout_s);
  osu_wd_len = n > 0 && (size_t)n < sizeof(osu_wd_msg) ? (size_t)n : sizeof(osu_wd_msg) - 1;
  alarm(o->timeout_s);
}

int osu_window(const osu_opts_t* o, size_t size) {
  size_t w = (size_t)o->window;
  if (o->window_bytes > 0 && size > 0 && w * size > o->window_bytes) {
    w = o->window_bytes / size;
    w = w > 0 ? w : 1;
  }
  return (int)w;
}

void osu_disarm(void) {
  alarm(0);
}

void osu_iters(const osu_opts_t* o, size_t size, int* iters, int* skip) {
  const int large = size > OSU_LARGE_SIZE;
  *iters = large ? o->iters_large : o->iters;
  *skip = large ? o->skip_large : o->skip;
}

void osu_budget(const osu_opts_t* o, double warm_s, int skip, int* iters) {
  double slowest = 0.0, per;
  long want;
  if (o->budget_s <= 0.0) {
    return;
  }
  OSU_CHECK(MPI_Allreduce(&warm_s, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  per = slowest / (skip > 0 ? skip : 1);
  if (per <= 0.0) {
    return;
  }
  want = (long)(o->budget_s / per);
  if (want < o->min_iters) {
    want = o->min_iters;
  }
  if (want < *iters) {
    *iters = (int)want;
  }
}

static unsigned char osu_byte(uint32_t seed, size_t i) {
  uint32_t x = seed * 2654435761u + (uint32_t)i * 40503u + (uint32_t)(i >> 8) * 977u;
  return (unsigned char)(x ^ (x >> 13));
}

enum { OSU_TAG_PREFLIGHT = 30001, OSU_TAG_STATUS = 30002 };

int osu_preflight(const osu_opts_t* o, size_t size, void* sbuf, void* rbuf, int both_ways) {
  MPI_Comm c;
  MPI_Request rreq = MPI_REQUEST_NULL, sreq;
  MPI_Status st;
  unsigned char* s = sbuf;
  unsigned char* r = rbuf;
  const int sender = both_ways || o->rank < o->pairs;
  const int receiver = both_ways || o->rank >= o->pairs;
  int send_ok = 1, peer_ok = 1, ok = 1, all = 0, rc;
  size_t i;
  osu_arm(o, size, "pre-flight");
  /* A private communicator with MPI_ERRORS_RETURN: a refusal is an answer, not an abort. */
  OSU_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
  OSU_CHECK(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN));
  for (i = 0; i < size; ++i) {
    s[i] = osu_byte((uint32_t)o->rank + 7u, i);
    r[i] = 0;
  }
  if (receiver) {
    OSU_CHECK(MPI_Irecv(r, (int)size, MPI_BYTE, o->partner, OSU_TAG_PREFLIGHT, c, &rreq));
  }
  if (sender) {
    rc = MPI_Isend(s, (int)size, MPI_BYTE, o->partner, OSU_TAG_PREFLIGHT, c, &sreq);
    if (rc == MPI_SUCCESS) {
      rc = MPI_Wait(&sreq, MPI_STATUS_IGNORE);
    }
    send_ok = rc == MPI_SUCCESS;
    OSU_CHECK(MPI_Send(&send_ok, 1, MPI_INT, o->partner, OSU_TAG_STATUS, c));
  }
  if (receiver) {
    OSU_CHECK(MPI_Recv(&peer_ok, 1, MPI_INT, o->partner, OSU_TAG_STATUS, c, MPI_STATUS_IGNORE));
    if (peer_ok) {
      int count = -1;
      rc = MPI_Wait(&rreq, &st);
      if (rc == MPI_SUCCESS) {
        MPI_Get_count(&st, MPI_BYTE, &count);
      }
      ok = rc == MPI_SUCCESS && count == (int)size;
      for (i = 0; ok && i < size; ++i) {
        ok = r[i] == osu_byte((uint32_t)o->partner + 7u, i);
      }
      if (!ok) {
        fprintf(stderr, "%s: rank %d: pre-flight of %zu B from rank %d: %s\n", o->name, o->rank,
                size, o->partner,
                rc != MPI_SUCCESS    ? "receive failed"
                : count != (int)size ? "wrong length"
                                     : "data corrupted");
      }
    } else {
      OSU_CHECK(MPI_Cancel(&rreq));
      OSU_CHECK(MPI_Wait(&rreq, &st));
    }
  }
  ok = ok && send_ok && peer_ok;
  OSU_CHECK(MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  OSU_CHECK(MPI_Comm_free(&c));
  return all;
}

int osu_begin_size(const osu_opts_t* o, size_t size, void* sbuf, void* rbuf, int both_ways,
                   int columns, int* iters, int* skip) {
  if (!osu_preflight(o, size, sbuf, rbuf, both_ways)) {
    if (o->rank == 0) {
      osu_row_fail(size, columns);
    }
    return 0;
  }
  osu_arm(o, size, "timed");
  osu_iters(o, size, iters, skip);
  OSU_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  return 1;
}

enum { OSU_TAG_PING = 1, OSU_TAG_LAST = 2 };

int osu_pingpong(MPI_Comm comm, int initiator, int peer, char* sbuf, char* rbuf, size_t size, int n,
                 int min_n, double deadline, double* half_us) {
  MPI_Status st;
  int i;
  for (i = 0; i < n; ++i) {
    if (initiator) {
      const double t0 = half_us != NULL ? MPI_Wtime() : 0.0;
      /* MPI_Wtime may be a system call in the guest: below 64 KiB look every 16 round trips. */
      const int look = size >= 65536 || (i & 15) == 15;
      const int last =
          i + 1 == n || (deadline > 0.0 && i + 1 >= min_n && look && MPI_Wtime() > deadline);
      OSU_CHECK(
          MPI_Send(sbuf, (int)size, MPI_CHAR, peer, last ? OSU_TAG_LAST : OSU_TAG_PING, comm));
      OSU_CHECK(MPI_Recv(rbuf, (int)size, MPI_CHAR, peer, OSU_TAG_PING, comm, MPI_STATUS_IGNORE));
      if (half_us != NULL) {
        half_us[i] = (MPI_Wtime() - t0) * 1e6 / 2.0;
      }
      if (last) {
        return i + 1;
      }
    } else {
      OSU_CHECK(MPI_Recv(rbuf, (int)size, MPI_CHAR, peer, MPI_ANY_TAG, comm, &st));
      OSU_CHECK(MPI_Send(sbuf, (int)size, MPI_CHAR, peer, OSU_TAG_PING, comm));
      if (st.MPI_TAG == OSU_TAG_LAST) {
        return i + 1;
      }
    }
  }
  return n;
}

static int osu_cmp_double(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

void osu_percentiles(double* v, int n, double out[3]) {
  qsort(v, (size_t)n, sizeof(double), osu_cmp_double);
  out[0] = v[n / 2];
  out[1] = v[(int)((double)n * 0.99)];
  out[2] = v[n - 1];
}

double osu_deadline(const osu_opts_t* o) {
  return o->budget_s > 0.0 ? MPI_Wtime() + o->budget_s : 0.0;
}

void osu_row(size_t size, double v) {
  printf("%-10zu%18.2f\n", size, v);
  fflush(stdout);
}

void osu_row2(size_t size, double v1, double v2) {
  printf("%-10zu%18.2f%18.2f\n", size, v1, v2);
  fflush(stdout);
}

void osu_row_fail(size_t size, int columns) {
  int i;
  printf("%-10zu", size);
  for (i = 0; i < columns; ++i) {
    printf("%18s", "fail");
  }
  printf("\n");
  fflush(stdout);
}

void osu_die(const char* what, int rc, const char* file, int line) {
  char s[MPI_MAX_ERROR_STRING];
  int n = 0;
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  s[0] = '\0';
  MPI_Error_string(rc, s, &n);
  fprintf(stderr, "bench: rank %d: %s failed (%d: %s) at %s:%d; ending the job\n", rank, what, rc,
          s, file, line);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 2);
  exit(2);
}

size_t osu_next_size(size_t s) {
  return s == 0 ? 1 : s * 2;
}
