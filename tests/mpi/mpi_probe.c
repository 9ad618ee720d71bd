/*
 * MPI_Probe/MPI_Iprobe and the matched probes MPI_Mprobe/MPI_Improbe with MPI_Mrecv/MPI_Imrecv:
 * statuses (source, tag, count), order, a matched message leaving the matching queue, a probe
 * not consuming the message, zero-length and non-contiguous matched receives.
 */
#include "mpi_test.h"

static void send_ints(int n, int tag, int base) {
  int* v = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
  int i;
  CHECK(v != NULL, "malloc");
  for (i = 0; i < n; ++i) {
    v[i] = base + i;
  }
  CHECK_MPI(MPI_Send(v, n, MPI_INT, 0, tag, MPI_COMM_WORLD));
  free(v);
}

static void check_ints(const int* v, int n, int base) {
  int i;
  for (i = 0; i < n; ++i) {
    CHECK(v[i] == base + i, "element %d is %d, expected %d", i, v[i], base + i);
  }
}

int main(int argc, char** argv) {
  int v[64];
  int count, flag;
  MPI_Status st;
  MPI_Message msg;
  MPI_Request req;
  t_init(&argc, &argv, "mpi_probe");
  CHECK(t_size >= 2, "needs 2 ranks");

  if (t_rank == 1) {
    send_ints(10, 1, 100);
    send_ints(20, 2, 200);
    send_ints(30, 3, 300);
    send_ints(0, 4, 0);
    send_ints(24, 5, 500); /* received as a vector */
  } else if (t_rank == 0) {
    /* A probe sees the first message and leaves it there. */
    CHECK_MPI(MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(st.MPI_SOURCE == 1 && st.MPI_TAG == 1 && count == 10, "probe: %d %d %d", st.MPI_SOURCE,
          st.MPI_TAG, count);
    CHECK_MPI(MPI_Probe(1, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
    CHECK(st.MPI_TAG == 1, "second probe saw tag %d", st.MPI_TAG);

    /* A probe for a later tag, then its receive. */
    flag = 0;
    while (!flag) {
      CHECK_MPI(MPI_Iprobe(1, 3, MPI_COMM_WORLD, &flag, &st));
    }
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(st.MPI_TAG == 3 && count == 30, "iprobe tag 3: %d %d", st.MPI_TAG, count);
    CHECK_MPI(MPI_Recv(v, 64, MPI_INT, 1, 3, MPI_COMM_WORLD, &st));
    check_ints(v, 30, 300);

    /* Nothing with this tag. */
    CHECK_MPI(MPI_Iprobe(MPI_ANY_SOURCE, 42, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE));
    CHECK(!flag, "iprobe found a message that was never sent");

    /* A matched probe removes the message from matching: a probe now sees tag 2. */
    CHECK_MPI(MPI_Mprobe(1, MPI_ANY_TAG, MPI_COMM_WORLD, &msg, &st));
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(st.MPI_TAG == 1 && count == 10, "mprobe: tag %d count %d", st.MPI_TAG, count);
    CHECK_MPI(MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
    CHECK(st.MPI_TAG == 2, "after mprobe, probe saw tag %d (expected 2)", st.MPI_TAG);
    memset(v, 0, sizeof(v));
    CHECK_MPI(MPI_Mrecv(v, 64, MPI_INT, &msg, &st));
    CHECK(msg == MPI_MESSAGE_NULL, "MPI_Mrecv left the message handle set");
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(st.MPI_SOURCE == 1 && st.MPI_TAG == 1 && count == 10, "mrecv status %d %d %d",
          st.MPI_SOURCE, st.MPI_TAG, count);
    check_ints(v, 10, 100);

    /* Improbe + Imrecv. */
    flag = 0;
    while (!flag) {
      CHECK_MPI(MPI_Improbe(MPI_ANY_SOURCE, 2, MPI_COMM_WORLD, &flag, &msg, &st));
    }
    memset(v, 0, sizeof(v));
    CHECK_MPI(MPI_Imrecv(v, 64, MPI_INT, &msg, &req));
    CHECK_MPI(MPI_Wait(&req, &st));
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(st.MPI_TAG == 2 && count == 20, "imrecv: tag %d count %d", st.MPI_TAG, count);
    check_ints(v, 20, 200);

    /* Zero bytes. */
    CHECK_MPI(MPI_Mprobe(1, 4, MPI_COMM_WORLD, &msg, &st));
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(count == 0, "zero-length mprobe count %d", count);
    CHECK_MPI(MPI_Mrecv(NULL, 0, MPI_INT, &msg, &st));
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(count == 0 && st.MPI_TAG == 4, "zero-length mrecv %d %d", count, st.MPI_TAG);

    /* A matched message received into a non-contiguous type: 8 blocks of 3 ints, stride 5. */
    {
      MPI_Datatype vec;
      int i, b;
      CHECK_MPI(MPI_Type_vector(8, 3, 5, MPI_INT, &vec));
      CHECK_MPI(MPI_Type_commit(&vec));
      CHECK_MPI(MPI_Mprobe(1, 5, MPI_COMM_WORLD, &msg, &st));
      for (i = 0; i < 64; ++i) {
        v[i] = -1;
      }
      CHECK_MPI(MPI_Mrecv(v, 1, vec, &msg, &st));
      for (b = 0; b < 8; ++b) {
        for (i = 0; i < 3; ++i) {
          CHECK(v[b * 5 + i] == 500 + b * 3 + i, "vector mrecv [%d] = %d", b * 5 + i, v[b * 5 + i]);
        }
        if (b < 7) {
          CHECK(v[b * 5 + 3] == -1 && v[b * 5 + 4] == -1, "vector mrecv wrote into a gap");
        }
      }
      MPI_Type_free(&vec);
    }
  }
  return t_done();
}
