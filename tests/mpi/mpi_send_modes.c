/*
 * Send modes. Synchronous sends complete only after the receiver matched them:
 *  - MPI_Issend stays incomplete for 500 ms of MPI_Test while rank 1 has not posted the receive
 *    (rank 1 waits for a "go" sent after that window), then completes;
 *  - a blocking MPI_Ssend to a rank that sleeps 1 s before its receive takes about that long;
 *  - many outstanding Issends, received in reverse order; a zero-byte Ssend; Issend to self.
 * Standard, ready (Rsend) and buffered (Bsend/Ibsend) sends deliver their data.
 */
#include "mpi_test.h"

int main(int argc, char** argv) {
  int i, v, flag;
  MPI_Request req;
  t_init(&argc, &argv, "mpi_send_modes");
  CHECK(t_size >= 2, "needs 2 ranks");

  t_phase("1. Issend is not complete before the");
  /* 1. Issend is not complete before the match. */
  if (t_rank == 0) {
    int data = 4711, go = 1, tests = 0;
    double t0;
    CHECK_MPI(MPI_Issend(&data, 1, MPI_INT, 1, 1, MPI_COMM_WORLD, &req));
    t0 = MPI_Wtime();
    while (MPI_Wtime() - t0 < 0.5) {
      CHECK_MPI(MPI_Test(&req, &flag, MPI_STATUS_IGNORE));
      CHECK(!flag, "MPI_Issend completed before the receiver posted its receive");
      ++tests;
    }
    CHECK_MPI(MPI_Send(&go, 1, MPI_INT, 1, 2, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(tests > 0, "no MPI_Test ran");
  } else if (t_rank == 1) {
    int go = 0, data = 0;
    CHECK_MPI(MPI_Recv(&go, 1, MPI_INT, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Recv(&data, 1, MPI_INT, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK(data == 4711, "Issend data %d", data);
  }

  t_phase("2. Blocking Ssend waits for a late");
  /* 2. Blocking Ssend waits for a late receiver; a standard send of the same size is eager. */
  CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
  if (t_rank == 0) {
    int data = 42;
    double t0 = MPI_Wtime(), dt;
    CHECK_MPI(MPI_Ssend(&data, 1, MPI_INT, 1, 3, MPI_COMM_WORLD));
    dt = MPI_Wtime() - t0;
    CHECK(dt >= 0.8, "MPI_Ssend returned after %.3f s, before the receive was posted (1 s)", dt);
    printf("note: MPI_Ssend to a receiver 1 s late took %.3f s\n", dt);
  } else if (t_rank == 1) {
    int data = 0;
    double t0 = MPI_Wtime();
    while (MPI_Wtime() - t0 < 1.0) {
      usleep(10000); /* no MPI calls: the receive is simply not posted yet */
    }
    CHECK_MPI(MPI_Recv(&data, 1, MPI_INT, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK(data == 42, "Ssend data %d", data);
  }

  t_phase("3. Many outstanding Issends");
  /* 3. Many outstanding Issends, received in reverse order; a zero-byte Ssend. */
  CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
  if (t_rank == 0) {
    MPI_Request reqs[64];
    int out[64];
    for (i = 0; i < 64; ++i) {
      out[i] = 1000 + i;
      CHECK_MPI(MPI_Issend(&out[i], 1, MPI_INT, 1, 100 + i, MPI_COMM_WORLD, &reqs[i]));
    }
    CHECK_MPI(MPI_Waitall(64, reqs, MPI_STATUSES_IGNORE));
    CHECK_MPI(MPI_Ssend(NULL, 0, MPI_BYTE, 1, 200, MPI_COMM_WORLD));
  } else if (t_rank == 1) {
    MPI_Status st;
    int count = -1;
    for (i = 63; i >= 0; --i) {
      CHECK_MPI(MPI_Recv(&v, 1, MPI_INT, 0, 100 + i, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
      CHECK(v == 1000 + i, "Issend %d delivered %d", i, v);
    }
    CHECK_MPI(MPI_Recv(NULL, 0, MPI_BYTE, 0, 200, MPI_COMM_WORLD, &st));
    MPI_Get_count(&st, MPI_BYTE, &count);
    CHECK(count == 0, "zero-byte Ssend count %d", count);
  }

  t_phase("4. Issend to self completes once the");
  /* 4. Issend to self completes once the receive is posted. */
  {
    int out = 31337, in = 0;
    CHECK_MPI(MPI_Issend(&out, 1, MPI_INT, t_rank, 300, MPI_COMM_WORLD, &req));
    for (i = 0; i < 100; ++i) {
      CHECK_MPI(MPI_Test(&req, &flag, MPI_STATUS_IGNORE));
      CHECK(!flag, "Issend to self completed before its receive");
    }
    CHECK_MPI(MPI_Recv(&in, 1, MPI_INT, t_rank, 300, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(in == 31337, "Issend to self delivered %d", in);
  }

  t_phase("5. Ready and buffered modes");
  /* 5. Ready and buffered modes. */
  if (t_rank == 1) {
    int in[3] = {0, 0, 0};
    MPI_Request r[3];
    CHECK_MPI(MPI_Irecv(&in[0], 1, MPI_INT, 0, 400, MPI_COMM_WORLD, &r[0]));
    CHECK_MPI(MPI_Irecv(&in[1], 1, MPI_INT, 0, 401, MPI_COMM_WORLD, &r[1]));
    CHECK_MPI(MPI_Irecv(&in[2], 1, MPI_INT, 0, 402, MPI_COMM_WORLD, &r[2]));
    CHECK_MPI(MPI_Send(&v, 1, MPI_INT, 0, 399, MPI_COMM_WORLD)); /* receives are posted */
    CHECK_MPI(MPI_Waitall(3, r, MPI_STATUSES_IGNORE));
    CHECK(in[0] == 1 && in[1] == 2 && in[2] == 3, "rsend/bsend/ibsend: %d %d %d", in[0], in[1],
          in[2]);
  } else if (t_rank == 0) {
    int a = 1, b = 2, c = 3, size = 0;
    void* attached;
    char* bsend_buf;
    MPI_Pack_size(2, MPI_INT, MPI_COMM_WORLD, &size);
    size += 2 * MPI_BSEND_OVERHEAD;
    bsend_buf = malloc((size_t)size);
    CHECK(bsend_buf != NULL, "malloc");
    CHECK_MPI(MPI_Buffer_attach(bsend_buf, size));
    CHECK_MPI(MPI_Recv(&v, 1, MPI_INT, 1, 399, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Rsend(&a, 1, MPI_INT, 1, 400, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Bsend(&b, 1, MPI_INT, 1, 401, MPI_COMM_WORLD));
    b = -2; /* the buffered copy went, not this */
    CHECK_MPI(MPI_Ibsend(&c, 1, MPI_INT, 1, 402, MPI_COMM_WORLD, &req));
    CHECK_MPI(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Buffer_detach(&attached, &size));
    free(bsend_buf);
  }
  return t_done();
}
