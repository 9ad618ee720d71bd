/*
 * MPI_Cancel:
 *  - an unmatched receive (specific source, any source, non-contiguous type) is cancelled and
 *    does not consume a message sent later;
 *  - a receive that has already matched is not cancelled and keeps its data;
 *  - a send is never cancelled (rdmx cannot recall a message): it completes and is received.
 */
#include "mpi_test.h"

int main(int argc, char** argv) {
  MPI_Request req;
  MPI_Status st;
  int cancelled, v, i;
  t_init(&argc, &argv, "mpi_cancel");
  CHECK(t_size >= 2, "needs 2 ranks");

  if (t_rank == 0) {
    MPI_Datatype vec;
    int buf[40];
    t_phase("1. Unmatched receives");
    /* 1. Unmatched receives, three ways. */
    CHECK_MPI(MPI_Irecv(&v, 1, MPI_INT, 1, 99, MPI_COMM_WORLD, &req));
    CHECK_MPI(MPI_Cancel(&req));
    CHECK_MPI(MPI_Wait(&req, &st));
    MPI_Test_cancelled(&st, &cancelled);
    CHECK(cancelled, "unmatched receive (source 1) was not cancelled");

    CHECK_MPI(MPI_Irecv(&v, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &req));
    CHECK_MPI(MPI_Cancel(&req));
    CHECK_MPI(MPI_Wait(&req, &st));
    MPI_Test_cancelled(&st, &cancelled);
    CHECK(cancelled, "unmatched wildcard receive was not cancelled");

    CHECK_MPI(MPI_Type_vector(4, 2, 5, MPI_INT, &vec));
    CHECK_MPI(MPI_Type_commit(&vec));
    CHECK_MPI(MPI_Irecv(buf, 2, vec, 1, 98, MPI_COMM_WORLD, &req));
    CHECK_MPI(MPI_Cancel(&req));
    CHECK_MPI(MPI_Wait(&req, &st));
    MPI_Test_cancelled(&st, &cancelled);
    CHECK(cancelled, "unmatched non-contiguous receive was not cancelled");
    MPI_Type_free(&vec);

    /* Test_cancelled through MPI_Test as well. */
    CHECK_MPI(MPI_Irecv(&v, 1, MPI_INT, 1, 97, MPI_COMM_WORLD, &req));
    CHECK_MPI(MPI_Cancel(&req));
    {
      int flag = 0;
      while (!flag) {
        CHECK_MPI(MPI_Test(&req, &flag, &st));
      }
    }
    MPI_Test_cancelled(&st, &cancelled);
    CHECK(cancelled, "receive cancelled and completed by MPI_Test: not cancelled");
  }
  CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));

  t_phase("2. The cancelled receives did not consume");
  /* 2. The cancelled receives did not consume the messages now sent with those tags. */
  if (t_rank == 1) {
    v = 1099;
    CHECK_MPI(MPI_Send(&v, 1, MPI_INT, 0, 99, MPI_COMM_WORLD));
  } else if (t_rank == 0) {
    v = 0;
    CHECK_MPI(MPI_Recv(&v, 1, MPI_INT, 1, 99, MPI_COMM_WORLD, &st));
    CHECK(v == 1099, "message after a cancelled receive: %d", v);
  }

  t_phase("3. A matched receive is not cancelled");
  /* 3. A matched receive is not cancelled. Rank 1's marker follows its data (non-overtaking):
   *    once rank 0 has the marker, the data has matched the receive. */
  if (t_rank == 0) {
    int marker = 0;
    v = 0;
    CHECK_MPI(MPI_Irecv(&v, 1, MPI_INT, 1, 5, MPI_COMM_WORLD, &req));
    CHECK_MPI(MPI_Send(&marker, 1, MPI_INT, 1, 49, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Recv(&marker, 1, MPI_INT, 1, 50, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
  } else if (t_rank == 1) {
    int marker = 0;
    CHECK_MPI(MPI_Recv(&marker, 1, MPI_INT, 0, 49, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    v = 555;
    CHECK_MPI(MPI_Send(&v, 1, MPI_INT, 0, 5, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Send(&marker, 1, MPI_INT, 0, 50, MPI_COMM_WORLD));
  }
  if (t_rank == 0) {
    CHECK_MPI(MPI_Cancel(&req));
    CHECK_MPI(MPI_Wait(&req, &st));
    MPI_Test_cancelled(&st, &cancelled);
    CHECK(!cancelled, "a matched receive reported cancelled");
    CHECK(v == 555 && st.MPI_TAG == 5 && st.MPI_SOURCE == 1, "matched receive: %d %d %d", v,
          st.MPI_TAG, st.MPI_SOURCE);
  }

  t_phase("4. Sends are not cancelled");
  /* 4. Sends are not cancelled, eager or synchronous. */
  if (t_rank == 0) {
    MPI_Request sreq[2];
    int out[2] = {606, 707};
    CHECK_MPI(MPI_Isend(&out[0], 1, MPI_INT, 1, 6, MPI_COMM_WORLD, &sreq[0]));
    CHECK_MPI(MPI_Issend(&out[1], 1, MPI_INT, 1, 7, MPI_COMM_WORLD, &sreq[1]));
    for (i = 0; i < 2; ++i) {
      CHECK_MPI(MPI_Cancel(&sreq[i]));
    }
    CHECK_MPI(MPI_Send(&i, 1, MPI_INT, 1, 8, MPI_COMM_WORLD)); /* "now receive them" */
    for (i = 0; i < 2; ++i) {
      CHECK_MPI(MPI_Wait(&sreq[i], &st));
      MPI_Test_cancelled(&st, &cancelled);
      CHECK(!cancelled, "send %d reported cancelled", i);
    }
  } else if (t_rank == 1) {
    int in[2] = {0, 0};
    CHECK_MPI(MPI_Recv(&v, 1, MPI_INT, 0, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Recv(&in[1], 1, MPI_INT, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Recv(&in[0], 1, MPI_INT, 0, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK(in[0] == 606 && in[1] == 707, "sends after cancel delivered %d %d", in[0], in[1]);
  }
  return t_done();
}
