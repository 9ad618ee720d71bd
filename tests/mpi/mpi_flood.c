/*
 * Unexpected floods: every rank sends FLOOD (argv[1], default 1000) small messages to the next
 * rank before that rank posts a single receive, so they all wait in rdmx's unexpected queue
 * (beyond the SRQ depth: rdmx must copy them out of its receive buffers); then a barrier (its
 * messages queue behind the flood), then the receives in order, then the sends complete.
 */
#include "mpi_test.h"

int main(int argc, char** argv) {
  int flood, next, prev, i;
  MPI_Request* fr;
  int* out;
  t_init(&argc, &argv, "mpi_flood");
  flood = argc > 1 ? atoi(argv[1]) : 1000;
  next = (t_rank + 1) % t_size;
  prev = (t_rank + t_size - 1) % t_size;
  fr = malloc(sizeof(MPI_Request) * (size_t)flood);
  out = malloc(sizeof(int) * (size_t)flood);
  CHECK(fr && out, "malloc");

  t_phase("flood: posting the sends");
  for (i = 0; i < flood; ++i) {
    out[i] = t_rank * 100000 + i;
    CHECK_MPI(MPI_Isend(&out[i], 1, MPI_INT, next, 1000, MPI_COMM_WORLD, &fr[i]));
  }
  t_phase("flood: barrier behind the flood");
  CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
  t_phase("flood: receiving");
  for (i = 0; i < flood; ++i) {
    int v = -1;
    CHECK_MPI(MPI_Recv(&v, 1, MPI_INT, prev, 1000, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK(v == prev * 100000 + i, "flood message %d: got %d", i, v);
  }
  t_phase("flood: completing the sends");
  CHECK_MPI(MPI_Waitall(flood, fr, MPI_STATUSES_IGNORE));
  free(fr);
  free(out);
  return t_done();
}
