/*
 * MPI_ERR_TRUNCATE under MPI_ERRORS_RETURN: blocking and non-blocking receives, MPI_Waitall
 * (MPI_ERR_IN_STATUS with the per-request error), a non-contiguous receive, a zero-capacity
 * receive. The count reports the bytes actually received (what fitted), those bytes are the
 * message's prefix, nothing is written past the buffer, and the next message is intact.
 */
#include "mpi_test.h"

static int err_class(int rc) {
  int c = -1;
  MPI_Error_class(rc, &c);
  return c;
}

int main(int argc, char** argv) {
  MPI_Comm comm;
  MPI_Status st;
  int v[128], i, rc, count;
  t_init(&argc, &argv, "mpi_truncate");
  CHECK(t_size >= 2, "needs 2 ranks");
  CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  CHECK_MPI(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));

  if (t_rank == 1) {
    for (i = 0; i < 128; ++i) v[i] = 1000 + i;
    CHECK_MPI(MPI_Send(v, 100, MPI_INT, 0, 1, comm)); /* blocking recv of 50 */
    CHECK_MPI(MPI_Send(v, 100, MPI_INT, 0, 2, comm)); /* irecv of 10 */
    CHECK_MPI(MPI_Send(v, 3, MPI_INT, 0, 3, comm));   /* waitall: fits */
    CHECK_MPI(MPI_Send(v, 64, MPI_INT, 0, 4, comm));  /* waitall: truncated to 32 */
    CHECK_MPI(MPI_Send(v, 40, MPI_INT, 0, 5, comm));  /* vector of 3 blocks of 4 */
    CHECK_MPI(MPI_Send(v, 5, MPI_INT, 0, 6, comm));   /* capacity 0 */
    CHECK_MPI(MPI_Send(v, 7, MPI_INT, 0, 7, comm));   /* intact afterwards */
  } else if (t_rank == 0) {
    t_phase("1. Blocking receive of 50 ints out");
    /* 1. Blocking receive of 50 ints out of 100. The guard word after the buffer stays. */
    for (i = 0; i < 128; ++i) v[i] = -7;
    rc = MPI_Recv(v, 50, MPI_INT, 1, 1, comm, &st);
    CHECK(err_class(rc) == MPI_ERR_TRUNCATE, "MPI_Recv returned class %d, not MPI_ERR_TRUNCATE",
          err_class(rc));
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(count == 50, "truncated MPI_Recv count %d, expected 50 (bytes that fitted)", count);
    CHECK(st.MPI_SOURCE == 1 && st.MPI_TAG == 1, "truncated status %d %d", st.MPI_SOURCE,
          st.MPI_TAG);
    for (i = 0; i < 50; ++i) {
      CHECK(v[i] == 1000 + i, "truncated prefix [%d] = %d", i, v[i]);
    }
    CHECK(v[50] == -7, "written past the receive buffer: %d", v[50]);

    t_phase("2. Irecv + Wait");
    /* 2. Irecv + Wait. */
    {
      MPI_Request r;
      CHECK_MPI(MPI_Irecv(v, 10, MPI_INT, 1, 2, comm, &r));
      rc = MPI_Wait(&r, &st);
      CHECK(err_class(rc) == MPI_ERR_TRUNCATE, "MPI_Wait returned class %d", err_class(rc));
      MPI_Get_count(&st, MPI_INT, &count);
      CHECK(count == 10, "truncated Irecv count %d", count);
    }

    t_phase("3. Waitall");
    /* 3. Waitall: one fits, one does not. */
    {
      MPI_Request r[2];
      MPI_Status sts[2];
      int a[3], b[32];
      CHECK_MPI(MPI_Irecv(a, 3, MPI_INT, 1, 3, comm, &r[0]));
      CHECK_MPI(MPI_Irecv(b, 32, MPI_INT, 1, 4, comm, &r[1]));
      rc = MPI_Waitall(2, r, sts);
      CHECK(err_class(rc) == MPI_ERR_IN_STATUS, "MPI_Waitall returned class %d", err_class(rc));
      CHECK(sts[0].MPI_ERROR == MPI_SUCCESS, "fitting receive has error %d", sts[0].MPI_ERROR);
      CHECK(err_class(sts[1].MPI_ERROR) == MPI_ERR_TRUNCATE, "status error class %d",
            err_class(sts[1].MPI_ERROR));
      MPI_Get_count(&sts[1], MPI_INT, &count);
      CHECK(count == 32, "Waitall truncated count %d", count);
      CHECK(a[2] == 1002 && b[31] == 1031, "Waitall data %d %d", a[2], b[31]);
    }

    t_phase("4. Truncation into a vector");
    /* 4. Truncation into a vector: 3 blocks of 4 ints, stride 6; 12 of 40 fit. */
    {
      MPI_Datatype vec;
      int w[18];
      CHECK_MPI(MPI_Type_vector(3, 4, 6, MPI_INT, &vec));
      CHECK_MPI(MPI_Type_commit(&vec));
      for (i = 0; i < 18; ++i) w[i] = -1;
      rc = MPI_Recv(w, 1, vec, 1, 5, comm, &st);
      CHECK(err_class(rc) == MPI_ERR_TRUNCATE, "vector truncation class %d", err_class(rc));
      MPI_Get_count(&st, MPI_INT, &count);
      CHECK(count == 12, "vector truncated count %d", count);
      for (i = 0; i < 4; ++i) {
        CHECK(w[i] == 1000 + i && w[6 + i] == 1004 + i && w[12 + i] == 1008 + i,
              "vector truncated data at block offset %d", i);
      }
      CHECK(w[4] == -1 && w[5] == -1 && w[10] == -1, "vector truncation wrote into a gap");
      MPI_Type_free(&vec);
    }

    t_phase("5. Capacity 0");
    /* 5. Capacity 0. */
    rc = MPI_Recv(v, 0, MPI_INT, 1, 6, comm, &st);
    CHECK(err_class(rc) == MPI_ERR_TRUNCATE, "capacity-0 receive class %d", err_class(rc));
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(count == 0, "capacity-0 count %d", count);

    t_phase("6. The stream is intact");
    /* 6. The stream is intact. */
    rc = MPI_Recv(v, 128, MPI_INT, 1, 7, comm, &st);
    CHECK(rc == MPI_SUCCESS, "receive after truncations failed: %d", rc);
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(count == 7 && v[6] == 1006, "after truncations: count %d, v[6] %d", count, v[6]);
  }

  t_phase("7. Above the eager limit");
  /* 7. Above the eager limit, when rdmx carries it. */
  if (large_messages_supported(MPI_COMM_WORLD)) {
    const int n = 300000;
    unsigned char* buf = malloc((size_t)n);
    CHECK(buf != NULL, "malloc");
    if (t_rank == 1) {
      t_fill(buf, (size_t)n, 9);
      CHECK_MPI(MPI_Send(buf, n, MPI_BYTE, 0, 8, comm));
    } else if (t_rank == 0) {
      memset(buf, 0, (size_t)n);
      rc = MPI_Recv(buf, n / 2, MPI_BYTE, 1, 8, comm, &st);
      CHECK(err_class(rc) == MPI_ERR_TRUNCATE, "large truncation class %d", err_class(rc));
      MPI_Get_count(&st, MPI_BYTE, &count);
      CHECK(count == n / 2, "large truncated count %d", count);
      CHECK(buf[n / 2] == 0, "large truncation wrote past the buffer");
    }
    free(buf);
  }
  CHECK_MPI(MPI_Comm_free(&comm));
  return t_done();
}
