/*
 * Messages above rdmx's eager limit (rendezvous). Skipped as a whole (ctest: Skipped) while
 * rdmx refuses them. Ping-pong from just above the limit to 64 MiB (8 MiB + 5 and 16 MiB + 1:
 * more than rxe's 8 MiB max message, split into several writes), MPI_Ssend, wildcard receives,
 * probe of a large message, several outstanding at once, and a receive posted after the message
 * arrived (unexpected).
 */
#include "mpi_test.h"

int main(int argc, char** argv) {
  /* From just above a UD eager limit (one MTU) and RC's default (8 KiB) up. */
  const size_t sizes[] = {1025,    4097,    8193,          16384,          65536 + 3, 262144,
                          1 << 20, 4 << 20, (8 << 20) + 5, (16 << 20) + 1, 64 << 20};
  const size_t max = 64 << 20;
  unsigned char *s, *r;
  size_t k;
  int count;
  MPI_Status st;
  t_init(&argc, &argv, "mpi_large");
  CHECK(t_size >= 2, "needs 2 ranks");
  t_require_large();
  s = malloc(max);
  r = malloc(max);
  CHECK(s && r, "malloc");

  t_phase("1. Ping-pong");
  /* 1. Ping-pong, blocking on one side, non-blocking on the other. */
  for (k = 0; k < sizeof(sizes) / sizeof(sizes[0]); ++k) {
    const size_t n = sizes[k];
    if (t_rank == 0) {
      t_fill(s, n, (uint32_t)k);
      CHECK_MPI(MPI_Send(s, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD));
      memset(r, 0, n);
      CHECK_MPI(MPI_Recv(r, (int)max, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &st));
      MPI_Get_count(&st, MPI_BYTE, &count);
      CHECK(count == (int)n, "pong %zu: %d bytes", n, count);
      CHECK_DATA(r, n, (uint32_t)k + 100);
    } else if (t_rank == 1) {
      MPI_Request q;
      memset(r, 0, n);
      CHECK_MPI(MPI_Irecv(r, (int)max, MPI_BYTE, 0, 1, MPI_COMM_WORLD, &q));
      CHECK_MPI(MPI_Wait(&q, &st));
      MPI_Get_count(&st, MPI_BYTE, &count);
      CHECK(count == (int)n, "ping %zu: %d bytes", n, count);
      CHECK_DATA(r, n, (uint32_t)k);
      t_fill(s, n, (uint32_t)k + 100);
      CHECK_MPI(MPI_Isend(s, (int)n, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &q));
      CHECK_MPI(MPI_Wait(&q, MPI_STATUS_IGNORE));
    }
  }

  t_phase("2. Ssend");
  /* 2. Ssend, wildcard receive, probe first (the message waits unexpected). */
  if (t_rank == 0) {
    t_fill(s, 1 << 20, 7);
    CHECK_MPI(MPI_Ssend(s, 1 << 20, MPI_BYTE, 1, 3, MPI_COMM_WORLD));
  } else if (t_rank == 1) {
    CHECK_MPI(MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
    MPI_Get_count(&st, MPI_BYTE, &count);
    CHECK(count == 1 << 20 && st.MPI_TAG == 3, "probe of a large message: %d bytes tag %d", count,
          st.MPI_TAG);
    CHECK_MPI(MPI_Recv(r, 1 << 20, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
    CHECK(st.MPI_SOURCE == 0, "large wildcard source %d", st.MPI_SOURCE);
    CHECK_DATA(r, (size_t)1 << 20, 7);
  }

  t_phase("3. Eight 512 KiB messages in flight");
  /* 3. Eight 512 KiB messages in flight, received in reverse order. */
  if (t_rank == 0) {
    MPI_Request q[8];
    int i;
    for (i = 0; i < 8; ++i) {
      t_fill(s + (size_t)i * (512 << 10), 512 << 10, 1000u + (uint32_t)i);
      CHECK_MPI(MPI_Isend(s + (size_t)i * (512 << 10), 512 << 10, MPI_BYTE, 1, 10 + i,
                          MPI_COMM_WORLD, &q[i]));
    }
    CHECK_MPI(MPI_Waitall(8, q, MPI_STATUSES_IGNORE));
  } else if (t_rank == 1) {
    MPI_Request q[8];
    int i;
    for (i = 7; i >= 0; --i) {
      CHECK_MPI(MPI_Irecv(r + (size_t)i * (512 << 10), 512 << 10, MPI_BYTE, 0, 10 + i,
                          MPI_COMM_WORLD, &q[i]));
    }
    CHECK_MPI(MPI_Waitall(8, q, MPI_STATUSES_IGNORE));
    for (i = 0; i < 8; ++i) {
      CHECK_DATA(r + (size_t)i * (512 << 10), (size_t)512 << 10, 1000u + (uint32_t)i);
    }
  }
  free(s);
  free(r);
  return t_done();
}
