/*
 * Shared helpers of the MPI tests (tests/mpi/): checks that abort the job with the rank, file and
 * line, data patterns, a watchdog, and the run-time question "does rdmx carry messages above
 * its eager limit yet?" (large_messages_supported).
 *
 * Environment:
 *   RDMX_TEST_LARGE=0|1   0: skip the large-message cases without asking; 1: they are required,
 *                         a refusal fails the test. Unset: ask rdmx (see large_messages_supported).
 *   RDMX_TEST_TIMEOUT     watchdog seconds (default 300).
 */
#ifndef RDMX_TESTS_MPI_TEST_H
#define RDMX_TESTS_MPI_TEST_H

#include <mpi.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int t_rank = -1;
static int t_size = 0;
static const char* t_name = "?";

/* A whole test program skipped (ctest SKIP_REGULAR_EXPRESSION). */
#define T_SKIP_MARKER "RDMX_TEST_SKIPPED"

static inline void t_fail(const char* file, int line, const char* fmt, ...) {
  /* The line in one write: as several, another rank's output could land inside it. */
  char msg[1024];
  va_list ap;
  int n = snprintf(msg, sizeof(msg), "[%s rank %d] %s:%d: FAIL: ", t_name, t_rank, file, line);
  if (n < 0) {
    n = 0;
  } else if (n >= (int)sizeof(msg)) {
    n = (int)sizeof(msg) - 1; /* a truncated prefix, kept */
  }
  va_start(ap, fmt);
  vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
  va_end(ap);
  fprintf(stderr, "%s\n", msg);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 2);
  exit(2);
}

#define CHECK(cond, ...)                       \
  do {                                         \
    if (!(cond)) {                             \
      t_fail(__FILE__, __LINE__, __VA_ARGS__); \
    }                                          \
  } while (0)

/* An MPI call that must succeed (under MPI_ERRORS_RETURN, or it aborted already). */
#define CHECK_MPI(call)                                                  \
  do {                                                                   \
    int rc_ = (call);                                                    \
    if (rc_ != MPI_SUCCESS) {                                            \
      char s_[MPI_MAX_ERROR_STRING];                                     \
      int n_ = 0;                                                        \
      MPI_Error_string(rc_, s_, &n_);                                    \
      t_fail(__FILE__, __LINE__, "%s returned %d (%s)", #call, rc_, s_); \
    }                                                                    \
  } while (0)

/* What the test is doing, for the watchdog's message. */
static const char* volatile t_phase_name = "start";
#define t_phase(name) (t_phase_name = (name))

static inline void t_watchdog(int sig) {
  static const char msg[] = "mpi test: watchdog expired (RDMX_TEST_TIMEOUT) in phase: ";
  ssize_t n;
  (void)sig;
  n = write(2, msg, sizeof(msg) - 1);
  n = write(2, t_phase_name, strlen(t_phase_name));
  n = write(2, "\n", 1);
  (void)n;
  _exit(3);
}

static inline void t_init(int* argc, char*** argv, const char* name) {
  const char* t = getenv("RDMX_TEST_TIMEOUT");
  t_name = name;
  CHECK_MPI(MPI_Init(argc, argv));
  MPI_Comm_rank(MPI_COMM_WORLD, &t_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &t_size);
  signal(SIGALRM, t_watchdog);
  alarm(t != NULL ? (unsigned)atoi(t) : 300u);
}

/* Ends the test: every rank got here without a failure. */
static inline int t_done(void) {
  CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
  if (t_rank == 0) {
    printf("PASS %s (np %d)\n", t_name, t_size);
    fflush(stdout);
  }
  CHECK_MPI(MPI_Finalize());
  return 0;
}

/* The byte at index i of a message identified by seed. */
static inline unsigned char t_byte(uint32_t seed, size_t i) {
  uint32_t x = seed * 2654435761u + (uint32_t)i * 40503u + (uint32_t)(i >> 8) * 977u;
  return (unsigned char)(x ^ (x >> 13));
}

static inline void t_fill(void* buf, size_t n, uint32_t seed) {
  unsigned char* p = buf;
  size_t i;
  for (i = 0; i < n; ++i) {
    p[i] = t_byte(seed, i);
  }
}

/* Index of the first wrong byte, or -1. */
static inline long t_first_diff(const void* buf, size_t n, uint32_t seed) {
  const unsigned char* p = buf;
  size_t i;
  for (i = 0; i < n; ++i) {
    if (p[i] != t_byte(seed, i)) {
      return (long)i;
    }
  }
  return -1;
}

#define CHECK_DATA(buf, n, seed)                                                                  \
  do {                                                                                            \
    long d_ = t_first_diff((buf), (n), (seed));                                                   \
    CHECK(d_ < 0, "data of %zu bytes (seed %u) wrong at byte %ld", (size_t)(n), (unsigned)(seed), \
          d_);                                                                                    \
  } while (0)

/*
 * Collective over comm (size >= 2): does rdmx carry an n-byte message from rank 0 to rank 1?
 * Rank 0 sends it on a private communicator with MPI_ERRORS_RETURN; a refusal, at MPI_Isend
 * (rdmx_tag_send returned RDMX_ERR_UNSUPPORTED) or at MPI_Wait, is a "no". Rank 1 checks the
 * data when it arrives and cancels its receive when it will not. Everyone learns the verdict.
 */
static inline int t_try_message(MPI_Comm comm, int n) {
  int rank, size, ok = 1, all = 0;
  MPI_Comm c;
  MPI_Request req;
  MPI_Status st;
  unsigned char* buf;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  CHECK(size >= 2, "t_try_message needs 2 ranks");
  buf = malloc((size_t)n + 1);
  CHECK(buf != NULL, "malloc");
  CHECK_MPI(MPI_Comm_dup(comm, &c));
  CHECK_MPI(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN));
  if (rank == 0) {
    int rc;
    t_fill(buf, (size_t)n, 4242);
    rc = MPI_Isend(buf, n, MPI_BYTE, 1, 1, c, &req);
    if (rc == MPI_SUCCESS) {
      rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
    }
    ok = rc == MPI_SUCCESS;
    CHECK_MPI(MPI_Send(&ok, 1, MPI_INT, 1, 2, c));
  } else if (rank == 1) {
    int cancelled = 0;
    CHECK_MPI(MPI_Irecv(buf, n, MPI_BYTE, 0, 1, c, &req));
    CHECK_MPI(MPI_Recv(&ok, 1, MPI_INT, 0, 2, c, MPI_STATUS_IGNORE));
    if (ok) {
      int count = -1;
      CHECK_MPI(MPI_Wait(&req, &st));
      MPI_Get_count(&st, MPI_BYTE, &count);
      CHECK(count == n, "probe message: received %d bytes, expected %d", count, n);
      CHECK_DATA(buf, (size_t)n, 4242);
    } else {
      CHECK_MPI(MPI_Cancel(&req));
      CHECK_MPI(MPI_Wait(&req, &st));
      MPI_Test_cancelled(&st, &cancelled);
      CHECK(cancelled, "probe message: the receive of a refused message was not cancelled");
    }
  }
  CHECK_MPI(MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm));
  CHECK_MPI(MPI_Comm_free(&c));
  free(buf);
  return all;
}

#define T_LARGE_PROBE (256 * 1024)

/*
 * Collective. Does rdmx carry messages above its eager limit (rendezvous)? Asked with one
 * 256 KiB message (t_try_message). RDMX_TEST_LARGE=0 answers no without asking; =1 makes a "no"
 * a failure.
 */
static inline int large_messages_supported(MPI_Comm comm) {
  static int cached = -1;
  const char* env = getenv("RDMX_TEST_LARGE");
  if (cached >= 0 && comm == MPI_COMM_WORLD) {
    return cached;
  }
  if (env != NULL && strcmp(env, "0") == 0) {
    if (t_rank == 0) {
      printf("note: RDMX_TEST_LARGE=0: large-message cases skipped\n");
    }
    return cached = 0;
  }
  if (!t_try_message(comm, T_LARGE_PROBE)) {
    CHECK(env == NULL || strcmp(env, "1") != 0,
          "RDMX_TEST_LARGE=1 but rdmx refused a %d-byte message", T_LARGE_PROBE);
    if (t_rank == 0) {
      printf(
          "note: rdmx refused a %d-byte message (no rendezvous yet): large-message cases "
          "skipped\n",
          T_LARGE_PROBE);
      fflush(stdout);
    }
    return cached = 0;
  }
  return cached = 1;
}

/*
 * Collective over MPI_COMM_WORLD. The largest message rdmx carries here: unlimited (SIZE_MAX)
 * with rendezvous, else its eager limit, found by bisection with t_try_message (it depends on
 * the transport: on UD one packet, capped by the path MTU).
 */
static inline size_t t_message_limit(void) {
  static size_t cached = 0;
  int lo = 0, hi = T_LARGE_PROBE;
  if (cached != 0) {
    return cached;
  }
  if (large_messages_supported(MPI_COMM_WORLD)) {
    return cached = SIZE_MAX;
  }
  while (hi - lo > 1) { /* lo is carried, hi is refused */
    const int mid = lo + (hi - lo) / 2;
    if (t_try_message(MPI_COMM_WORLD, mid)) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  if (t_rank == 0) {
    printf("note: rdmx carries at most %d bytes per message here; larger cases skipped\n", lo);
    fflush(stdout);
  }
  return cached = (size_t)lo;
}

/* Whole-program skip when large messages are not supported: ctest reports the test skipped. */
static inline void t_require_large(void) {
  if (!large_messages_supported(MPI_COMM_WORLD)) {
    if (t_rank == 0) {
      printf("%s: %s: rdmx does not carry messages above its eager limit yet\n", T_SKIP_MARKER,
             t_name);
      fflush(stdout);
    }
    MPI_Finalize();
    exit(0);
  }
}

#endif /* RDMX_TESTS_MPI_TEST_H */
