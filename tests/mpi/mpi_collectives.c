/*
 * Collectives over the MTL (Open MPI's coll components use negative tags on the user's
 * communicator): barrier, bcast, reduce, allreduce, gather, scatter, allgather, alltoall,
 * alltoallv, each result checked, at several sizes, on MPI_COMM_WORLD and on a split
 * communicator. Sizes above the eager limit run when rdmx carries large messages.
 */
#include "mpi_test.h"

static void run(MPI_Comm comm, size_t max_bytes, const char* what) {
  int rank, size, i, j, root;
  const int counts[] = {1, 3, 64, 257, 1024, 2048, 16384, 65536};
  size_t c;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);

  for (i = 0; i < 3; ++i) {
    CHECK_MPI(MPI_Barrier(comm));
  }
  for (c = 0; c < sizeof(counts) / sizeof(counts[0]); ++c) {
    const int n = counts[c];
    int *a, *b;
    if ((size_t)n * sizeof(int) * (size_t)size > max_bytes) {
      break; /* alltoall/gather move size * n ints through one rank */
    }
    a = malloc(sizeof(int) * (size_t)n * (size_t)size);
    b = malloc(sizeof(int) * (size_t)n * (size_t)size);
    CHECK(a && b, "malloc");

    t_phase("bcast");
    /* bcast from every root */
    for (root = 0; root < size; ++root) {
      for (i = 0; i < n; ++i) a[i] = rank == root ? root * 1000 + i : -1;
      CHECK_MPI(MPI_Bcast(a, n, MPI_INT, root, comm));
      for (i = 0; i < n; ++i) {
        CHECK(a[i] == root * 1000 + i, "%s bcast n=%d root %d [%d] = %d", what, n, root, i, a[i]);
      }
    }
    t_phase("reduce, allreduce");
    /* reduce and allreduce */
    for (i = 0; i < n; ++i) a[i] = rank + i;
    CHECK_MPI(MPI_Reduce(a, b, n, MPI_INT, MPI_SUM, size - 1, comm));
    if (rank == size - 1) {
      for (i = 0; i < n; ++i) {
        CHECK(b[i] == size * (size - 1) / 2 + size * i, "%s reduce n=%d [%d] = %d", what, n, i,
              b[i]);
      }
    }
    CHECK_MPI(MPI_Allreduce(a, b, n, MPI_INT, MPI_MAX, comm));
    for (i = 0; i < n; ++i) {
      CHECK(b[i] == size - 1 + i, "%s allreduce max n=%d [%d] = %d", what, n, i, b[i]);
    }
    t_phase("gather, scatter, allgather");
    /* gather / scatter / allgather */
    for (i = 0; i < n; ++i) a[i] = rank * 100000 + i;
    CHECK_MPI(MPI_Gather(a, n, MPI_INT, b, n, MPI_INT, 0, comm));
    if (rank == 0) {
      for (j = 0; j < size; ++j) {
        for (i = 0; i < n; ++i) {
          CHECK(b[j * n + i] == j * 100000 + i, "%s gather n=%d from %d [%d]", what, n, j, i);
        }
      }
      for (j = 0; j < size; ++j) {
        for (i = 0; i < n; ++i) a[j * n + i] = -(j * 100000 + i);
      }
    }
    CHECK_MPI(MPI_Scatter(a, n, MPI_INT, b, n, MPI_INT, 0, comm));
    for (i = 0; i < n; ++i) {
      CHECK(b[i] == -(rank * 100000 + i), "%s scatter n=%d [%d] = %d", what, n, i, b[i]);
    }
    for (i = 0; i < n; ++i) a[i] = rank * 100000 + i;
    CHECK_MPI(MPI_Allgather(a, n, MPI_INT, b, n, MPI_INT, comm));
    for (j = 0; j < size; ++j) {
      for (i = 0; i < n; ++i) {
        CHECK(b[j * n + i] == j * 100000 + i, "%s allgather n=%d from %d [%d]", what, n, j, i);
      }
    }
    t_phase("alltoall");
    /* alltoall: block j goes to rank j */
    for (j = 0; j < size; ++j) {
      for (i = 0; i < n; ++i) a[j * n + i] = rank * 1000000 + j * 1000 + i % 1000;
    }
    CHECK_MPI(MPI_Alltoall(a, n, MPI_INT, b, n, MPI_INT, comm));
    for (j = 0; j < size; ++j) {
      for (i = 0; i < n; ++i) {
        CHECK(b[j * n + i] == j * 1000000 + rank * 1000 + i % 1000,
              "%s alltoall n=%d from %d [%d] = %d", what, n, j, i, b[j * n + i]);
      }
    }
    free(a);
    free(b);
  }

  t_phase("alltoallv");
  /* alltoallv: rank r sends r+j+1 ints to rank j */
  {
    int *sc = malloc(sizeof(int) * (size_t)size), *sd = malloc(sizeof(int) * (size_t)size);
    int *rc = malloc(sizeof(int) * (size_t)size), *rd = malloc(sizeof(int) * (size_t)size);
    int stot = 0, rtot = 0, *sb, *rb;
    CHECK(sc && sd && rc && rd, "malloc");
    for (j = 0; j < size; ++j) {
      sc[j] = rank + j + 1;
      sd[j] = stot;
      stot += sc[j];
      rc[j] = j + rank + 1;
      rd[j] = rtot;
      rtot += rc[j];
    }
    sb = malloc(sizeof(int) * (size_t)stot);
    rb = malloc(sizeof(int) * (size_t)rtot);
    CHECK(sb && rb, "malloc");
    for (j = 0; j < size; ++j) {
      for (i = 0; i < sc[j]; ++i) sb[sd[j] + i] = rank * 10000 + j * 100 + i;
    }
    CHECK_MPI(MPI_Alltoallv(sb, sc, sd, MPI_INT, rb, rc, rd, MPI_INT, comm));
    for (j = 0; j < size; ++j) {
      for (i = 0; i < rc[j]; ++i) {
        CHECK(rb[rd[j] + i] == j * 10000 + rank * 100 + i, "%s alltoallv from %d [%d]", what, j, i);
      }
    }
    free(sc);
    free(sd);
    free(rc);
    free(rd);
    free(sb);
    free(rb);
  }
}

int main(int argc, char** argv) {
  MPI_Comm half;
  size_t max_bytes;
  t_init(&argc, &argv, "mpi_collectives");
  /* Without rendezvous, keep every point-to-point message within the eager limit: the largest
   * is a whole gather/alltoall buffer in the worst algorithm. */
  max_bytes = t_size >= 2 ? t_message_limit() : SIZE_MAX;
  /* With rendezvous: 1 MiB through one rank at most (np 8: 64 KiB per rank), which already
   * takes every collective across the rendezvous threshold; more only costs emulated-guest
   * minutes (np 8 with 16 MiB ran past the 300 s watchdog). */
  if (max_bytes > ((size_t)1 << 20)) {
    max_bytes = (size_t)1 << 20;
  }
  run(MPI_COMM_WORLD, max_bytes, "world");
  CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, t_rank < t_size / 2, t_rank, &half));
  run(half, max_bytes, "half");
  CHECK_MPI(MPI_Comm_free(&half));
  return t_done();
}
