/*
 * MPI_ANY_SOURCE and MPI_ANY_TAG with their statuses:
 *  - every rank sends rank 0 a numbered stream; rank 0 receives all of it with wildcards and
 *    checks MPI_SOURCE, MPI_TAG, the count and per-sender order (non-overtaking);
 *  - a specific source with any tag, any source with a specific tag;
 *  - MPI_TAG_UB round-trips;
 *  - a wildcard receive pending across collectives on the same communicator is not matched by
 *    Open MPI's negative internal tags (and the collectives still work).
 */
#include "mpi_test.h"

#define MSGS 24

int main(int argc, char** argv) {
  int i;
  t_init(&argc, &argv, "mpi_anysource");
  CHECK(t_size >= 2, "needs 2 ranks");

  t_phase("1. Wildcard stream");
  /* 1. Wildcard stream: payload {sender, index, tag, filler...}, 3..7 ints. */
  if (t_rank != 0) {
    for (i = 0; i < MSGS; ++i) {
      int msg[8] = {t_rank, i, t_rank * 100 + i, 0, 0, 0, 0, 0};
      const int n = 3 + i % 5;
      CHECK_MPI(MPI_Send(msg, n, MPI_INT, 0, t_rank * 100 + i, MPI_COMM_WORLD));
    }
  } else {
    int* next = calloc((size_t)t_size, sizeof(int));
    int total = (t_size - 1) * MSGS;
    CHECK(next != NULL, "calloc");
    while (total-- > 0) {
      int msg[8];
      MPI_Status st;
      int count = -1;
      CHECK_MPI(MPI_Recv(msg, 8, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
      MPI_Get_count(&st, MPI_INT, &count);
      CHECK(st.MPI_SOURCE == msg[0], "MPI_SOURCE %d but the message is from %d", st.MPI_SOURCE,
            msg[0]);
      CHECK(st.MPI_TAG == msg[2], "MPI_TAG %d, expected %d", st.MPI_TAG, msg[2]);
      CHECK(count == 3 + msg[1] % 5, "count %d, expected %d", count, 3 + msg[1] % 5);
      CHECK(msg[1] == next[msg[0]], "from %d: message %d arrived before %d (overtaking)", msg[0],
            msg[1], next[msg[0]]);
      next[msg[0]]++;
    }
    free(next);
  }
  CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));

  t_phase("2. Specific source");
  /* 2. Specific source, any tag; any source, specific tag (rank 1 -> rank 0). */
  if (t_rank == 1) {
    int v = 11;
    CHECK_MPI(MPI_Send(&v, 1, MPI_INT, 0, 5, MPI_COMM_WORLD));
    v = 12;
    CHECK_MPI(MPI_Send(&v, 1, MPI_INT, 0, 6, MPI_COMM_WORLD));
  } else if (t_rank == 0) {
    int v = 0;
    MPI_Status st;
    CHECK_MPI(MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 6, MPI_COMM_WORLD, &st));
    CHECK(v == 12 && st.MPI_SOURCE == 1 && st.MPI_TAG == 6, "any source/tag 6: %d %d %d", v,
          st.MPI_SOURCE, st.MPI_TAG);
    CHECK_MPI(MPI_Recv(&v, 1, MPI_INT, 1, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
    CHECK(v == 11 && st.MPI_SOURCE == 1 && st.MPI_TAG == 5, "source 1/any tag: %d %d %d", v,
          st.MPI_SOURCE, st.MPI_TAG);
  }

  t_phase("3. The largest tag");
  /* 3. The largest tag. */
  {
    int* ub = NULL;
    int flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    CHECK(flag && *ub >= 32767, "MPI_TAG_UB %d", flag ? *ub : -1);
    if (t_rank == 1) {
      int v = 99;
      CHECK_MPI(MPI_Send(&v, 1, MPI_INT, 0, *ub, MPI_COMM_WORLD));
    } else if (t_rank == 0) {
      int v = 0;
      MPI_Status st;
      CHECK_MPI(MPI_Recv(&v, 1, MPI_INT, 1, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
      CHECK(v == 99 && st.MPI_TAG == *ub, "tag ub %d came back as %d", *ub, st.MPI_TAG);
    }
  }

  t_phase("4. A wildcard receive pending across collectives");
  /* 4. A wildcard receive pending across collectives (negative internal tags, same context). */
  {
    MPI_Request req = MPI_REQUEST_NULL;
    int got = -1, flag = 0, sum = 0, root_val = 0, one = 1;
    double dmax = 0.0, mine = (double)t_rank;
    if (t_rank == 0) {
      CHECK_MPI(MPI_Irecv(&got, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &req));
    }
    for (i = 0; i < 5; ++i) {
      CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
      root_val = (t_rank == t_size - 1) ? 4321 + i : 0;
      CHECK_MPI(MPI_Bcast(&root_val, 1, MPI_INT, t_size - 1, MPI_COMM_WORLD));
      CHECK(root_val == 4321 + i, "bcast under a wildcard receive: %d", root_val);
      CHECK_MPI(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
      CHECK(sum == t_size, "allreduce under a wildcard receive: %d", sum);
      CHECK_MPI(MPI_Allreduce(&mine, &dmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
      CHECK(dmax == (double)(t_size - 1), "allreduce max %g", dmax);
    }
    if (t_rank == 0) {
      MPI_Status st;
      CHECK_MPI(MPI_Test(&req, &flag, &st));
      CHECK(!flag, "MPI_ANY_TAG receive matched collective traffic (tag %d from %d)", st.MPI_TAG,
            st.MPI_SOURCE);
    }
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    if (t_rank == 1) {
      int v = 777;
      CHECK_MPI(MPI_Send(&v, 1, MPI_INT, 0, 7, MPI_COMM_WORLD));
    }
    if (t_rank == 0) {
      MPI_Status st;
      CHECK_MPI(MPI_Wait(&req, &st));
      CHECK(got == 777 && st.MPI_SOURCE == 1 && st.MPI_TAG == 7, "wildcard got %d from %d tag %d",
            got, st.MPI_SOURCE, st.MPI_TAG);
    }
  }
  return t_done();
}
