/*
 * MPI_THREAD_MULTIPLE: four threads per rank ping-pong at once with the partner rank, each on its
 * own duplicate of MPI_COMM_WORLD and with a wildcard-source receive, content checked. rdmx
 * workers are single-threaded; the MTL serializes its rdmx calls with a lock under threads.
 */
#include <pthread.h>

#include "mpi_test.h"

#define THREADS 4
#define ITERS 200

typedef struct {
  int index;
  MPI_Comm comm;
  int peer;
} job_t;

static void* run(void* arg) {
  const job_t* j = arg;
  unsigned char s[512], r[512];
  int i;
  for (i = 0; i < ITERS; ++i) {
    const size_t n = (size_t)((i * 37 + j->index * 11) % 512);
    const uint32_t mine = (uint32_t)(t_rank * 100000 + j->index * 1000 + i);
    const uint32_t theirs = (uint32_t)(j->peer * 100000 + j->index * 1000 + i);
    MPI_Status st;
    int count = -1;
    t_fill(s, n, mine);
    if (t_rank < j->peer) {
      CHECK_MPI(MPI_Send(s, (int)n, MPI_BYTE, j->peer, i, j->comm));
      CHECK_MPI(MPI_Recv(r, 512, MPI_BYTE, MPI_ANY_SOURCE, i, j->comm, &st));
    } else {
      CHECK_MPI(MPI_Recv(r, 512, MPI_BYTE, MPI_ANY_SOURCE, i, j->comm, &st));
      CHECK_MPI(MPI_Send(s, (int)n, MPI_BYTE, j->peer, i, j->comm));
    }
    MPI_Get_count(&st, MPI_BYTE, &count);
    CHECK(count == (int)n && st.MPI_SOURCE == j->peer, "thread %d iteration %d: %d bytes from %d",
          j->index, i, count, st.MPI_SOURCE);
    CHECK_DATA(r, n, theirs);
  }
  return NULL;
}

int main(int argc, char** argv) {
  int provided = MPI_THREAD_SINGLE, i;
  pthread_t th[THREADS];
  job_t jobs[THREADS];
  const char* t = getenv("RDMX_TEST_TIMEOUT");
  t_name = "mpi_threads";
  CHECK_MPI(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
  MPI_Comm_rank(MPI_COMM_WORLD, &t_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &t_size);
  signal(SIGALRM, t_watchdog);
  alarm(t != NULL ? (unsigned)atoi(t) : 300u);
  if (provided < MPI_THREAD_MULTIPLE) {
    if (t_rank == 0) {
      printf("%s: mpi_threads: MPI_THREAD_MULTIPLE not provided (%d)\n", T_SKIP_MARKER, provided);
    }
    MPI_Finalize();
    return 0;
  }
  CHECK(t_size % 2 == 0, "needs an even number of ranks");
  for (i = 0; i < THREADS; ++i) {
    jobs[i].index = i;
    jobs[i].peer = t_rank ^ 1;
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &jobs[i].comm));
  }
  t_phase("threads ping-pong");
  for (i = 0; i < THREADS; ++i) {
    CHECK(pthread_create(&th[i], NULL, run, &jobs[i]) == 0, "pthread_create");
  }
  for (i = 0; i < THREADS; ++i) {
    pthread_join(th[i], NULL);
  }
  for (i = 0; i < THREADS; ++i) {
    CHECK_MPI(MPI_Comm_free(&jobs[i].comm));
  }
  return t_done();
}
