/*
 * Shared parts of rdmx's MPI benchmarks in the OSU micro-benchmark conventions (bench/osu/):
 * options, buffers, the per-size watchdog, the per-size pre-flight check and the output columns.
 *
 * The programs are our own, written to read like OSU's: same options where they make sense, same
 * defaults (10000 iterations and 100 warm-up below 8 KiB, 1000 and 10 above, window 64), same
 * columns (`# Size  Latency (us)`, `# Size  Bandwidth (MB/s)`, MB = 10^6 bytes).
 *
 * Two additions let one script compare stacks that may not carry every size, on a slow emulated
 * machine, without ever hanging:
 *   - Pre-flight: before a size is timed, every rank exchanges one message of that size with its
 *     partner under MPI_ERRORS_RETURN and checks its content; a stack that refuses or corrupts
 *     the size prints `fail` in the figure's column and the program goes on with the next size.
 *   - Watchdog: alarm(-T seconds) per size; on expiry the process says where it was and exits,
 *     which makes mpirun end the whole job. A broken stack costs at most -T seconds.
 *   - Window cap (-B bytes, bandwidth programs): see osu_window.
 *   - Per-iteration figures (-P, osu_latency): every round trip is timed and p50, p99 and the
 *     maximum (half round trips, as the mean) are printed beside the mean: a path that stalls
 *     now and then shows there, where the mean hides it. Costs a clock read per round trip.
 *   - Time budget (-D seconds per size, 0 = off: -i exactly; the default, so that without -D the
 *     loop runs the public suite's counts, 10000 + 100 warm-up up to 8 KiB). Latency loops run
 * until the budget is spent (after at least -n round trips; osu_pingpong), so a fast size gets many
 *     iterations and a slow or preempted one still ends on time. Bandwidth loops cannot stop
 *     one-sidedly: their warm-up is timed and the window count lowered to fit (osu_budget).
 */
#ifndef RDMX_BENCH_OSU_COMMON_H
#define RDMX_BENCH_OSU_COMMON_H

#include <mpi.h>
#include <stddef.h>

#define OSU_LARGE_SIZE 8192 /* OSU's LARGE_MESSAGE_SIZE: fewer iterations above it */

typedef struct {
  const char* name;    /* program name, for messages */
  const char* title;   /* first header line */
  size_t min_size;     /* -m MIN[:MAX] */
  size_t max_size;     /* default 4 MiB (8 B .. 4 MiB: the demo's range) */
  int iters;           /* -i, for sizes up to OSU_LARGE_SIZE */
  int skip;            /* -x */
  int iters_large;     /* -I, above OSU_LARGE_SIZE */
  int skip_large;      /* -X */
  int window;          /* -W, bandwidth programs */
  size_t window_bytes; /* -B: caps window * size (0: off), see osu_window */
  int threads;         /* -t, the multi-threaded latency */
  int min_iters;       /* -n: the time budget never goes below this */
  double budget_s;     /* -D: seconds per size (0: off) */
  int per_iter;        /* -P: latency programs record every round trip (p50/p99/max columns) */
  unsigned timeout_s;  /* -T: watchdog per size */
  int rank, size;      /* in MPI_COMM_WORLD */
  int partner;         /* the pair partner: rank ^ half */
  int pairs;           /* np / 2 */
} osu_opts_t;

/* Fills defaults for a latency-type (lat=1) or bandwidth-type (lat=0) program. */
void osu_defaults(osu_opts_t* o, const char* name, const char* title, int lat);

/*
 * MPI_Init(_thread) is the caller's. Parses argv (prints usage and returns 1 on -h or a bad
 * option: the caller finalizes and exits), checks np (exact_np > 0: exactly that many; 0: an
 * even number >= 2), sets rank/partner, installs the watchdog and prints the header lines.
 */
int osu_setup(osu_opts_t* o, int argc, char** argv, int exact_np);
/*
 * The multi-threaded programs' start (np 2): MPI_Init_thread(MPI_THREAD_MULTIPLE), osu_defaults
 * and osu_setup, then the thread level check. Returns 1 after MPI_Finalize (bad options, or the
 * level not provided, said on rank 0): the caller exits.
 */
int osu_setup_mt(osu_opts_t* o, int argc, char** argv, const char* name, const char* title,
                 int lat);

/* Page-aligned buffer of n bytes (zeroed); aborts the job when out of memory. */
void* osu_alloc(size_t n);

/* Re-arms the watchdog for one size and names the phase for its message. */
void osu_arm(const osu_opts_t* o, size_t size, const char* phase);

/*
 * The window for a size: -W, lowered to max(1, B / size) under -B B. OSU keeps 64 at every size;
 * on an emulated 40 MB/s device one 64 x 4 MiB window takes 7 s, so the demo caps the bytes in
 * flight (16 MiB is still 4 messages of 4 MiB). The header says when the cap applies.
 */
int osu_window(const osu_opts_t* o, size_t size);

/* Sorts v[0..n) and stores its 50th and 99th percentiles and maximum in out[0..3). */
void osu_percentiles(double* v, int n, double out[3]);

/* Stops the watchdog (before MPI_Finalize). */
void osu_disarm(void);

/* Iterations and warm-up for a size (before the time budget). */
void osu_iters(const osu_opts_t* o, size_t size, int* iters, int* skip);

/*
 * Collective over MPI_COMM_WORLD: lowers *iters so that *iters iterations of warm_s / skip
 * seconds each take about the budget, using the slowest rank's warm-up, never below min_iters.
 */
void osu_budget(const osu_opts_t* o, double warm_s, int skip, int* iters);

/*
 * Collective over MPI_COMM_WORLD: can every rank exchange one size-byte message with its partner
 * in both directions (when both_ways; else lower half -> upper half only), content intact?
 * sbuf and rbuf hold at least size bytes. A stack that refuses the size returns 0 everywhere.
 */
int osu_preflight(const osu_opts_t* o, size_t size, void* sbuf, void* rbuf, int both_ways);

/*
 * Collective: the start of one size. Pre-flight (osu_preflight); on a refusal rank 0 prints the
 * `fail` row (columns figures) and 0 is returned: skip the size. Else arms the watchdog, sets the
 * iterations and warm-up for the size and returns 1 after a barrier.
 */
int osu_begin_size(const osu_opts_t* o, size_t size, void* sbuf, void* rbuf, int both_ways,
                   int columns, int* iters, int* skip);

/*
 * n ping-pongs of size bytes with peer on comm (blocking MPI_Send / MPI_Recv, tag 1); the
 * initiator sends first. With a deadline (MPI_Wtime seconds, 0: none) the initiator stops early
 * once it has passed, after at least min_n round trips, and tells the responder by sending the
 * last message with tag 2. With half_us (-P, else NULL) the initiator times every round trip
 * and stores half of it, in us, at half_us[i]. Returns the round trips done.
 */
int osu_pingpong(MPI_Comm comm, int initiator, int peer, char* sbuf, char* rbuf, size_t size, int n,
                 int min_n, double deadline, double* half_us);

/* The deadline of a timed loop that starts now: one budget (0 when -D is off). */
double osu_deadline(const osu_opts_t* o);

/* Output rows: "%-10zu" size then right-aligned figures, or `fail` in every figure column. */
void osu_row(size_t size, double v);
void osu_row2(size_t size, double v1, double v2);
void osu_row_fail(size_t size, int columns);

/* An MPI call on the timed path: on error, say which and where, and end the job. */
#define OSU_CHECK(call)                            \
  do {                                             \
    int osu_rc_ = (call);                          \
    if (osu_rc_ != MPI_SUCCESS) {                  \
      osu_die(#call, osu_rc_, __FILE__, __LINE__); \
    }                                              \
  } while (0)

void osu_die(const char* what, int rc, const char* file, int line);

/* Next size: doubles, from min_size (0 -> 1). */
size_t osu_next_size(size_t s);

#endif /* RDMX_BENCH_OSU_COMMON_H */
