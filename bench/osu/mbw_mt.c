/*
 * osu_mbw_mt: multi-threaded message rate, OSU bandwidth conventions, np 2 under
 * MPI_THREAD_MULTIPLE. Each rank runs -t threads; thread k of rank 0 streams to thread k of rank
 * 1 on its own duplicate of MPI_COMM_WORLD, all threads at once: per window, -W MPI_Isend of the
 * size and an MPI_Waitall, then a 4-byte reply (osu_bw's loop), -i windows (-x of warm-up) per
 * thread. The rate is every thread's messages over the slowest thread's time: the aggregate a
 * rank pair sustains with that many threads. Windows are fixed (no time budget), so that each
 * stack moves the same messages.
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
  MPI_Request* reqs;
  size_t size;
  int windows;
  double seconds; /* out */
} job_t;

static void* run(void* arg) {
  job_t* j = arg;
  const int w = j->o->window;
  const int sender = j->o->rank == 0;
  const int peer = j->o->partner;
  const double t0 = MPI_Wtime();
  int i, k;
  char ack[4] = {0};
  for (i = 0; i < j->windows; ++i) {
    for (k = 0; k < w; ++k) {
      if (sender) {
        OSU_CHECK(MPI_Isend(j->sbuf, (int)j->size, MPI_CHAR, peer, 100, j->comm, &j->reqs[k]));
      } else {
        OSU_CHECK(MPI_Irecv(j->rbuf, (int)j->size, MPI_CHAR, peer, 100, j->comm, &j->reqs[k]));
      }
    }
    OSU_CHECK(MPI_Waitall(w, j->reqs, MPI_STATUSES_IGNORE));
    if (sender) {
      OSU_CHECK(MPI_Recv(ack, 4, MPI_CHAR, peer, 101, j->comm, MPI_STATUS_IGNORE));
    } else {
      OSU_CHECK(MPI_Send(ack, 4, MPI_CHAR, peer, 101, j->comm));
    }
  }
  j->seconds = MPI_Wtime() - t0;
  return NULL;
}

/* Runs every thread for `windows` windows; returns the slowest thread's seconds. */
static double stream(job_t* jobs, int threads, size_t size, int windows) {
  pthread_t* th = calloc((size_t)threads, sizeof(*th));
  double slowest = 0.0;
  int k;
  if (th == NULL) {
    osu_die("calloc", MPI_ERR_NO_MEM, __FILE__, __LINE__);
  }
  for (k = 0; k < threads; ++k) {
    jobs[k].size = size;
    jobs[k].windows = windows;
    if (pthread_create(&th[k], NULL, run, &jobs[k]) != 0) {
      osu_die("pthread_create", MPI_ERR_OTHER, __FILE__, __LINE__);
    }
  }
  for (k = 0; k < threads; ++k) {
    pthread_join(th[k], NULL);
    slowest = jobs[k].seconds > slowest ? jobs[k].seconds : slowest;
  }
  free(th);
  return slowest;
}

int main(int argc, char** argv) {
  osu_opts_t o;
  job_t* jobs;
  size_t size;
  int k;
  if (osu_setup_mt(&o, argc, argv, "osu_mbw_mt",
                   "Multi-threaded Message Rate Test (MPI_THREAD_MULTIPLE)", 0) != 0) {
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
    jobs[k].reqs = calloc((size_t)o.window, sizeof(MPI_Request));
    if (jobs[k].reqs == NULL) {
      osu_die("calloc", MPI_ERR_NO_MEM, __FILE__, __LINE__);
    }
    OSU_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &jobs[k].comm));
    OSU_CHECK(MPI_Comm_set_errhandler(jobs[k].comm, MPI_ERRORS_RETURN));
  }
  if (o.rank == 0) {
    printf("# threads per rank %d, window %d\n", o.threads, o.window);
    printf("%-10s%18s%18s\n", "# Size", "MB/s", "Messages/s");
    fflush(stdout);
  }
  for (size = o.min_size; size <= o.max_size; size = osu_next_size(size)) {
    int iters, skip;
    double t;
    if (!osu_begin_size(&o, size, jobs[0].sbuf, jobs[0].rbuf, 1, 1, &iters, &skip)) {
      continue;
    }
    stream(jobs, o.threads, size, skip);
    OSU_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    t = stream(jobs, o.threads, size, iters);
    OSU_CHECK(MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    if (o.rank == 0) {
      const double msgs = (double)o.threads * o.window * iters;
      printf("%-10zu%18.2f%18.0f\n", size, msgs * (double)size / t / 1e6, msgs / t);
      fflush(stdout);
    }
  }
  osu_disarm();
  for (k = 0; k < o.threads; ++k) {
    MPI_Comm_free(&jobs[k].comm);
  }
  MPI_Finalize();
  return 0;
}
