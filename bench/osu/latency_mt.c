/*
 * osu_latency_mt: multi-threaded latency, OSU conventions, np 2 under MPI_THREAD_MULTIPLE.
 * Each rank runs -t threads; thread k of rank 0 ping-pongs with thread k of rank 1 on its own
 * duplicate of MPI_COMM_WORLD, all threads at once. Latency = half the round trip, averaged over
 * iterations and threads. Pre-flight, time budget and reporting happen on the main thread
 * between sizes, when no worker thread runs.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "osu_common.h"

typedef struct {
  const osu_opts_t* o;
  MPI_Comm comm;
  char* sbuf;
  char* rbuf;
  size_t size;
  int n;
  int min_n;
  double deadline; /* osu_pingpong's: 0 or the end of the size's budget */
  double seconds;  /* out: this thread's time per round trip */
} job_t;

static void* run(void* arg) {
  job_t* j = arg;
  const double t0 = MPI_Wtime();
  const int done = osu_pingpong(j->comm, j->o->rank == 0, j->o->partner, j->sbuf, j->rbuf, j->size,
                                j->n, j->min_n, j->deadline, NULL);
  j->seconds = done > 0 ? (MPI_Wtime() - t0) / done : 0.0;
  return NULL;
}

/* Runs every thread for n round trips of size bytes; returns the mean seconds per round trip. */
static double round_trips(job_t* jobs, int threads, size_t size, int n, double deadline) {
  pthread_t* th = calloc((size_t)threads, sizeof(*th));
  double sum = 0.0;
  int k;
  if (th == NULL) {
    osu_die("calloc", MPI_ERR_NO_MEM, __FILE__, __LINE__);
  }
  for (k = 0; k < threads; ++k) {
    jobs[k].size = size;
    jobs[k].n = n;
    jobs[k].min_n = jobs[k].o->min_iters;
    jobs[k].deadline = deadline;
    if (pthread_create(&th[k], NULL, run, &jobs[k]) != 0) {
      osu_die("pthread_create", MPI_ERR_OTHER, __FILE__, __LINE__);
    }
  }
  for (k = 0; k < threads; ++k) {
    pthread_join(th[k], NULL);
    sum += jobs[k].seconds;
  }
  free(th);
  return sum / threads;
}

int main(int argc, char** argv) {
  osu_opts_t o;
  job_t* jobs;
  size_t size;
  int k;
  if (osu_setup_mt(&o, argc, argv, "osu_latency_mt",
                   "Multi-threaded Latency Test (MPI_THREAD_MULTIPLE)", 1) != 0) {
    return 1;
  }
  jobs = calloc((size_t)o.threads, sizeof(*jobs));
  if (jobs == NULL) {
    osu_die("calloc", MPI_ERR_NO_MEM, __FILE__, __LINE__);
  }
  for (k = 0; k < o.threads; ++k) {
    jobs[k].o = &o;
    jobs[k].sbuf = osu_alloc(o.max_size);
    jobs[k].rbuf = osu_alloc(o.max_size);
    OSU_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &jobs[k].comm));
    OSU_CHECK(MPI_Comm_set_errhandler(jobs[k].comm, MPI_ERRORS_RETURN));
  }
  if (o.rank == 0) {
    printf("# threads per rank %d\n", o.threads);
    printf("%-10s%18s\n", "# Size", "Latency (us)");
    fflush(stdout);
  }
  for (size = o.min_size; size <= o.max_size; size = osu_next_size(size)) {
    int iters, skip;
    double t;
    if (!osu_begin_size(&o, size, jobs[0].sbuf, jobs[0].rbuf, 1, 1, &iters, &skip)) {
      continue;
    }
    round_trips(jobs, o.threads, size, skip, 0.0);
    OSU_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    t = round_trips(jobs, o.threads, size, iters, osu_deadline(&o));
    if (o.rank == 0) {
      osu_row(size, t * 1e6 / 2.0);
    }
  }
  osu_disarm();
  for (k = 0; k < o.threads; ++k) {
    MPI_Comm_free(&jobs[k].comm);
  }
  MPI_Finalize();
  return 0;
}
