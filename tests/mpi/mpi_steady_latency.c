/*
 * Steady small-message latency: every ping-pong's round trip is recorded, not just the mean.
 * The lower half of the ranks ping-pongs with the upper half (rank i with i + np/2), blocking
 * MPI_Send / MPI_Recv with tag 1 both ways on page-aligned buffers, an MPI_Barrier before each
 * size: the public osu_latency's loop. Per size the initiators report p50, p99 and the maximum;
 * the test fails when more than a fraction STALLS of the round trips take over MAX_X times the
 * median, or the p99 exceeds P99_X times it (a path that waits for a timer or a scheduler tick
 * now and then shows here, where a mean over thousands of iterations hides it). Every message's
 * first and last bytes are checked.
 *
 *   mpi_steady_latency [-n ITERS] [-w WARMUP] [-x MAX_X] [-s STALLS] [-p P99_X] [SIZE...]
 * Defaults: 100,000 iterations after 100 warm-up ones, MAX_X 50, STALLS 0 (not one), P99_X 5,
 * sizes 0 1 8 16 512: the limits for hardware. In an emulated guest a process that only spins
 * is itself stopped for over 1 ms two or three times a second (the guest's timer ticks and the
 * host's scheduling of the vCPUs, tests/mpi/CMakeLists.txt), so CI passes looser limits there.
 * RDMX_STEADY_ITERS overrides -n, RDMX_STEADY_REPORT=0 prints only failures, RDMX_STEADY_HIST
 * prints each initiator's round trips in power-of-two buckets for every size.
 * A failing size says what it can about why: each initiator's histogram (a raised median is
 * every round trip waiting; clusters at 4 ms, 100 ms or 0.5 s are a scheduler tick, rdmx's RC
 * watchdog or rxe's retransmit timer) and, from rank 0, the RDMA device counters that moved
 * during the size (/sys/class/infiniband/.../hw_counters: packets per round trip, retries, RNR).
 */
#include <dirent.h>
#include <time.h>

#include "mpi_test.h"

#define MAX_SIZES 16

static int cmp_double(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* The message of iteration i, in direction dir: its first and last bytes name it. */
static unsigned char first_byte(int i, int dir) {
  return (unsigned char)(i * 2 + dir);
}
static unsigned char last_byte(int size, int i, int dir) {
  return size > 1 ? (unsigned char)(i * 7 + dir) : first_byte(i, dir);
}

static void stamp(unsigned char* buf, int size, int i, int dir) {
  if (size > 0) {
    buf[0] = first_byte(i, dir);
    buf[size - 1] = last_byte(size, i, dir);
  }
}

static void check_stamp(const unsigned char* buf, int size, int i, int dir) {
  if (size > 0) {
    CHECK(buf[0] == first_byte(i, dir) && buf[size - 1] == last_byte(size, i, dir),
          "size %d iteration %d: wrong message (first byte %u, last byte %u)", size, i, buf[0],
          buf[size - 1]);
  }
}

/* Sorted round trips in power-of-two buckets of microseconds (RDMX_STEADY_HIST set). */
static void print_histogram(int rank, int size, const double* sorted, int n) {
  int i = 0;
  double edge = 1.0;
  printf("  hist rank %d size %d:", rank, size);
  while (i < n) {
    int c = 0;
    while (i < n && sorted[i] < edge * 2.0) {
      ++c;
      ++i;
    }
    if (c > 0) {
      printf(" [%.0f,%.0f):%d", edge, edge * 2.0, c);
    }
    edge *= 2.0;
  }
  printf("\n");
  fflush(stdout);
}

/* The device counters (rxe's hw_counters), as "device/counter" and value. */
#define MAX_COUNTERS 256
typedef struct {
  char name[96];
  unsigned long long value;
} counter_t;

static int read_counters(counter_t* c) {
  const char* top = "/sys/class/infiniband";
  DIR* devs = opendir(top);
  struct dirent* d;
  int n = 0;
  if (devs == NULL) {
    return 0;
  }
  while ((d = readdir(devs)) != NULL && n < MAX_COUNTERS) {
    char path[512];
    DIR* hc;
    struct dirent* e;
    if (d->d_name[0] == '.') {
      continue;
    }
    snprintf(path, sizeof(path), "%s/%s/ports/1/hw_counters", top, d->d_name);
    if ((hc = opendir(path)) == NULL) {
      continue;
    }
    while ((e = readdir(hc)) != NULL && n < MAX_COUNTERS) {
      char file[800];
      FILE* f;
      if (e->d_name[0] == '.') {
        continue;
      }
      snprintf(file, sizeof(file), "%s/%s", path, e->d_name);
      if ((f = fopen(file, "r")) != NULL) {
        if (fscanf(f, "%llu", &c[n].value) == 1) {
          snprintf(c[n].name, sizeof(c[n].name), "%.40s/%.50s", d->d_name, e->d_name);
          ++n;
        }
        fclose(f);
      }
    }
    closedir(hc);
  }
  closedir(devs);
  return n;
}

/* The counters that moved between two readings (same order: same directories). */
static void print_counter_deltas(const counter_t* a, int na, const counter_t* b, int nb,
                                 int round_trips) {
  int i;
  printf("  device counters that moved over %d round trips (and the warm-up):", round_trips);
  for (i = 0; i < na && i < nb; ++i) {
    if (strcmp(a[i].name, b[i].name) == 0 && b[i].value != a[i].value) {
      printf(" %s +%llu", b[i].name, b[i].value - a[i].value);
    }
  }
  printf("%s\n", na == 0 ? " (none readable)" : "");
  fflush(stdout);
}

/* One size's figures per initiator, reduced by their maximum over the pairs. */
enum { F_MEAN, F_P50, F_P99, F_MAX, F_MAX_AT, F_STALLS, F_FAILED, F_COUNT };

int main(int argc, char** argv) {
  int iters = 100000, warmup = 100, nsizes = 0, sizes[MAX_SIZES], s, i;
  double max_x = 50.0, p99_x = 5.0, stalls = 0.0;
  const char* env_iters = getenv("RDMX_STEADY_ITERS");
  const char* env_report = getenv("RDMX_STEADY_REPORT");
  const int report = env_report == NULL || strcmp(env_report, "0") != 0;
  const int hist = getenv("RDMX_STEADY_HIST") != NULL;
  unsigned char *sbuf = NULL, *rbuf = NULL;
  double* rtt;
  int pairs, initiator, partner, failures = 0;
  t_init(&argc, &argv, "mpi_steady_latency");
  for (i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
      iters = atoi(argv[++i]);
    } else if (strcmp(argv[i], "-w") == 0 && i + 1 < argc) {
      warmup = atoi(argv[++i]);
    } else if (strcmp(argv[i], "-x") == 0 && i + 1 < argc) {
      max_x = atof(argv[++i]);
    } else if (strcmp(argv[i], "-s") == 0 && i + 1 < argc) {
      stalls = atof(argv[++i]);
    } else if (strcmp(argv[i], "-p") == 0 && i + 1 < argc) {
      p99_x = atof(argv[++i]);
    } else {
      CHECK(nsizes < MAX_SIZES, "at most %d sizes", MAX_SIZES);
      sizes[nsizes++] = atoi(argv[i]);
    }
  }
  if (env_iters != NULL) {
    iters = atoi(env_iters);
  }
  if (nsizes == 0) {
    const int d[] = {0, 1, 8, 16, 512};
    for (nsizes = 0; nsizes < 5; ++nsizes) {
      sizes[nsizes] = d[nsizes];
    }
  }
  CHECK(iters >= 100 && warmup >= 0, "need at least 100 iterations (got %d)", iters);
  CHECK(t_size % 2 == 0, "needs an even number of ranks (got %d)", t_size);
  pairs = t_size / 2;
  initiator = t_rank < pairs;
  partner = initiator ? t_rank + pairs : t_rank - pairs;
  for (s = 0; s < nsizes; ++s) {
    CHECK(sizes[s] >= 0 && sizes[s] <= (1 << 20), "size %d out of range", sizes[s]);
  }
  CHECK(posix_memalign((void**)&sbuf, (size_t)sysconf(_SC_PAGESIZE), 1 << 20) == 0 &&
            posix_memalign((void**)&rbuf, (size_t)sysconf(_SC_PAGESIZE), 1 << 20) == 0,
        "posix_memalign");
  memset(sbuf, 'a', 1 << 20);
  memset(rbuf, 'b', 1 << 20);
  rtt = malloc(sizeof(double) * (size_t)iters);
  CHECK(rtt != NULL, "malloc of %d samples", iters);
  if (t_rank == 0 && report) {
    printf(
        "# %d pair(s), %d iterations per size after %d warm-up; round trips in us; limits: "
        "p99 <= %gx p50, at most %g round trips over %gx p50\n",
        pairs, iters, warmup, p99_x, stalls * iters, max_x);
    printf("%-8s %10s %10s %10s %10s %10s %8s\n", "# size", "mean", "p50", "p99", "max", "max_at",
           "stalls");
    fflush(stdout);
  }
  for (s = 0; s < nsizes; ++s) {
    const int size = sizes[s];
    double sum = 0.0, row[F_COUNT], worst[F_COUNT];
    int over = 0, max_at = 0, bad_any = 0, n0 = 0, n1 = 0;
    static counter_t before[MAX_COUNTERS], after[MAX_COUNTERS];
    if (t_rank == 0) {
      n0 = read_counters(before);
    }
    t_phase("barrier before a size");
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    t_phase("ping-pong");
    for (i = -warmup; i < iters; ++i) {
      if (initiator) {
        const double t0 = now_us();
        stamp(sbuf, size, i, 0);
        CHECK_MPI(MPI_Send(sbuf, size, MPI_CHAR, partner, 1, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Recv(rbuf, size, MPI_CHAR, partner, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        if (i >= 0) {
          rtt[i] = now_us() - t0;
        }
        check_stamp(rbuf, size, i, 1);
      } else {
        CHECK_MPI(MPI_Recv(rbuf, size, MPI_CHAR, partner, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        check_stamp(rbuf, size, i, 0);
        stamp(sbuf, size, i, 1);
        CHECK_MPI(MPI_Send(sbuf, size, MPI_CHAR, partner, 1, MPI_COMM_WORLD));
      }
    }
    memset(row, 0, sizeof(row));
    if (initiator) {
      for (i = 0; i < iters; ++i) {
        sum += rtt[i];
        if (rtt[i] > rtt[max_at]) {
          max_at = i;
        }
      }
      row[F_MEAN] = sum / iters;
      row[F_MAX_AT] = (double)max_at;
      qsort(rtt, (size_t)iters, sizeof(double), cmp_double);
      row[F_P50] = rtt[iters / 2];
      row[F_P99] = rtt[(int)((double)iters * 0.99)];
      row[F_MAX] = rtt[iters - 1];
      for (i = iters - 1; i >= 0 && rtt[i] > max_x * row[F_P50]; --i) {
        ++over;
      }
      row[F_STALLS] = over;
      row[F_FAILED] = over > stalls * iters || row[F_P99] > p99_x * row[F_P50];
    }
    /* Each figure's maximum over the pairs, and whether any pair failed. */
    CHECK_MPI(MPI_Reduce(row, worst, F_COUNT, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
    bad_any = t_rank == 0 && worst[F_FAILED] > 0.0;
    CHECK_MPI(MPI_Bcast(&bad_any, 1, MPI_INT, 0, MPI_COMM_WORLD));
    failures += bad_any;
    if (initiator && (hist || bad_any)) {
      print_histogram(t_rank, size, rtt, iters);
    }
    if (t_rank == 0 && bad_any) {
      n1 = read_counters(after);
      print_counter_deltas(before, n0, after, n1, iters);
    }
    if (t_rank == 0) {
      if (report || bad_any) {
        printf("%-8d %10.2f %10.2f %10.2f %10.2f %10.0f %8.0f%s\n", size, worst[F_MEAN],
               worst[F_P50], worst[F_P99], worst[F_MAX], worst[F_MAX_AT], worst[F_STALLS],
               bad_any ? "  <- FAIL" : "");
        fflush(stdout);
      }
      if (bad_any) {
        fprintf(stderr,
                "[mpi_steady_latency] size %d: %.0f round trips over %.0fx the median %.2f us "
                "(at most %.0f allowed; max %.2f us), p99 %.2f us (%.1fx, limit %.0fx)\n",
                size, worst[F_STALLS], max_x, worst[F_P50], stalls * iters, worst[F_MAX],
                worst[F_P99], worst[F_P99] / worst[F_P50], p99_x);
      }
    }
  }
  CHECK(failures == 0, "%d size(s) with unsteady latency (see the table)", failures);
  free(rtt);
  free(sbuf);
  free(rbuf);
  return t_done();
}
