/*
 * Ping-pong with content checks at every size from 0 to 64 KiB (powers of two and their
 * neighbours), between rank pairs (0,1), (2,3)...; with an odd size the last rank talks to
 * itself. Also MPI_Sendrecv and sends to self. Sizes above the eager limit run only when rdmx
 * carries large messages (t_message_limit in mpi_test.h).
 */
#include "mpi_test.h"

static const size_t sizes[] = {0,    1,    2,     3,     4,     7,     8,     15,   16,   31,
                               32,   63,   64,    100,   127,   128,   255,   256,  257,  511,
                               512,  1000, 1023,  1024,  2047,  2048,  4095,  4096, 4097, 8191,
                               8192, 8193, 12345, 16384, 32767, 32768, 65535, 65536};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))
#define MAXSIZE 65536
#define REPS 3

int main(int argc, char** argv) {
  unsigned char* sbuf;
  unsigned char* rbuf;
  size_t limit;
  size_t i;
  int peer, r;
  t_init(&argc, &argv, "mpi_pingpong");
  limit = t_size >= 2 ? t_message_limit() : (size_t)MAXSIZE;
  sbuf = malloc(MAXSIZE);
  rbuf = malloc(MAXSIZE);
  CHECK(sbuf && rbuf, "malloc");
  peer = t_rank ^ 1;
  if (peer >= t_size) {
    peer = t_rank; /* odd world: the last rank plays against itself */
  }

  for (i = 0; i < NSIZES; ++i) {
    const size_t n = sizes[i];
    if (n > limit) {
      continue;
    }
    for (r = 0; r < REPS; ++r) {
      const uint32_t seed_a = (uint32_t)(n * 131 + (size_t)r * 7 + (size_t)t_rank * 1000003);
      MPI_Status st;
      int count = -1;
      if (peer == t_rank) {
        MPI_Request req;
        t_fill(sbuf, n, seed_a);
        memset(rbuf, 0xee, n);
        CHECK_MPI(MPI_Isend(sbuf, (int)n, MPI_BYTE, t_rank, 10 + r, MPI_COMM_WORLD, &req));
        CHECK_MPI(MPI_Recv(rbuf, (int)n, MPI_BYTE, t_rank, 10 + r, MPI_COMM_WORLD, &st));
        CHECK_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
        CHECK_DATA(rbuf, n, seed_a);
        continue;
      }
      if (t_rank < peer) {
        /* ping: our pattern; pong: the peer's pattern back */
        const uint32_t seed_b = (uint32_t)(n * 131 + (size_t)r * 7 + (size_t)peer * 1000003);
        t_fill(sbuf, n, seed_a);
        memset(rbuf, 0xee, n);
        CHECK_MPI(MPI_Send(sbuf, (int)n, MPI_BYTE, peer, 10 + r, MPI_COMM_WORLD));
        CHECK_MPI(MPI_Recv(rbuf, (int)MAXSIZE, MPI_BYTE, peer, 20 + r, MPI_COMM_WORLD, &st));
        MPI_Get_count(&st, MPI_BYTE, &count);
        CHECK(count == (int)n, "pong of %zu bytes: count %d", n, count);
        CHECK(st.MPI_SOURCE == peer && st.MPI_TAG == 20 + r, "pong status %d/%d", st.MPI_SOURCE,
              st.MPI_TAG);
        CHECK_DATA(rbuf, n, seed_b);
      } else {
        const uint32_t seed_b = (uint32_t)(n * 131 + (size_t)r * 7 + (size_t)peer * 1000003);
        memset(rbuf, 0xee, n);
        CHECK_MPI(MPI_Recv(rbuf, (int)MAXSIZE, MPI_BYTE, peer, 10 + r, MPI_COMM_WORLD, &st));
        MPI_Get_count(&st, MPI_BYTE, &count);
        CHECK(count == (int)n, "ping of %zu bytes: count %d", n, count);
        CHECK_DATA(rbuf, n, seed_b);
        t_fill(sbuf, n, seed_a);
        CHECK_MPI(MPI_Send(sbuf, (int)n, MPI_BYTE, peer, 20 + r, MPI_COMM_WORLD));
      }
    }
    /* Both directions at once. */
    if (peer != t_rank) {
      const uint32_t mine = (uint32_t)(n * 17 + (size_t)t_rank);
      const uint32_t theirs = (uint32_t)(n * 17 + (size_t)peer);
      MPI_Status st;
      t_fill(sbuf, n, mine);
      memset(rbuf, 0xee, n);
      CHECK_MPI(MPI_Sendrecv(sbuf, (int)n, MPI_BYTE, peer, 30, rbuf, (int)n, MPI_BYTE, peer, 30,
                             MPI_COMM_WORLD, &st));
      CHECK_DATA(rbuf, n, theirs);
    }
  }

  /* Self messages beside a peer's. */
  {
    MPI_Request req;
    const int n = limit < 1000 ? (int)limit : 1000;
    t_fill(sbuf, (size_t)n, 77);
    CHECK_MPI(MPI_Isend(sbuf, n, MPI_BYTE, t_rank, 40, MPI_COMM_WORLD, &req));
    CHECK_MPI(MPI_Recv(rbuf, n, MPI_BYTE, MPI_ANY_SOURCE, 40, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK_DATA(rbuf, (size_t)n, 77);
  }
  free(sbuf);
  free(rbuf);
  return t_done();
}
