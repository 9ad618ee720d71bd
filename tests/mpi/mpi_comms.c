/*
 * Communicators keep traffic apart and report their own ranks:
 *  - the same (source, tag) on MPI_COMM_WORLD and a dup, received in the opposite order;
 *  - a wildcard receive on one communicator is not matched by traffic on another;
 *  - MPI_Comm_split (parity, reversed keys): MPI_SOURCE is the rank in the new communicator;
 *  - an intercommunicator between the halves: MPI_SOURCE is the rank in the remote group;
 *  - communicators freed and created again (context ids reused) still work.
 */
#include "mpi_test.h"

int main(int argc, char** argv) {
  MPI_Comm dup, split, inter;
  MPI_Status st;
  int next, prev, a, b, i, flag;
  t_init(&argc, &argv, "mpi_comms");
  CHECK(t_size >= 2, "needs 2 ranks");
  next = (t_rank + 1) % t_size;
  prev = (t_rank + t_size - 1) % t_size;

  t_phase("1. Same source and tag on two");
  /* 1. Same source and tag on two communicators. */
  CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
  a = 100 + t_rank;
  b = 200 + t_rank;
  {
    MPI_Request r[2];
    int ra = -1, rb = -1;
    CHECK_MPI(MPI_Isend(&a, 1, MPI_INT, next, 5, MPI_COMM_WORLD, &r[0]));
    CHECK_MPI(MPI_Isend(&b, 1, MPI_INT, next, 5, dup, &r[1]));
    CHECK_MPI(MPI_Recv(&rb, 1, MPI_INT, prev, 5, dup, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Recv(&ra, 1, MPI_INT, prev, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Waitall(2, r, MPI_STATUSES_IGNORE));
    CHECK(ra == 100 + prev && rb == 200 + prev, "world got %d, dup got %d (prev %d)", ra, rb, prev);
  }

  t_phase("2. A wildcard receive on dup is");
  /* 2. A wildcard receive on dup is not matched by traffic on world. */
  {
    MPI_Request r;
    int got = -1, w = -1, x = 300 + t_rank;
    CHECK_MPI(MPI_Irecv(&got, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, dup, &r));
    CHECK_MPI(MPI_Send(&x, 1, MPI_INT, next, 6, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Recv(&w, 1, MPI_INT, prev, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK_MPI(MPI_Test(&r, &flag, &st));
    CHECK(!flag,
          "wildcard receive on a dup matched a message sent on MPI_COMM_WORLD (got %d from %d "
          "tag %d)",
          got, st.MPI_SOURCE, st.MPI_TAG);
    /* Nobody sends on dup before everyone has tested. */
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    CHECK_MPI(MPI_Send(&x, 1, MPI_INT, next, 7, dup));
    CHECK_MPI(MPI_Wait(&r, &st));
    CHECK(got == 300 + prev && st.MPI_SOURCE == prev && st.MPI_TAG == 7,
          "dup wildcard got %d from %d tag %d", got, st.MPI_SOURCE, st.MPI_TAG);
  }

  t_phase("3. Split by parity");
  /* 3. Split by parity, keys reversed: ranks in the new communicator differ from world's. */
  CHECK_MPI(MPI_Comm_split(MPI_COMM_WORLD, t_rank % 2, t_size - t_rank, &split));
  {
    int srank, ssize, snext, sprev, got = -1;
    MPI_Comm_rank(split, &srank);
    MPI_Comm_size(split, &ssize);
    if (ssize >= 2) {
      snext = (srank + 1) % ssize;
      sprev = (srank + ssize - 1) % ssize;
      CHECK_MPI(MPI_Sendrecv(&srank, 1, MPI_INT, snext, 8, &got, 1, MPI_INT, MPI_ANY_SOURCE,
                             MPI_ANY_TAG, split, &st));
      CHECK(got == sprev && st.MPI_SOURCE == sprev && st.MPI_TAG == 8,
            "split: got %d from MPI_SOURCE %d (expected split rank %d)", got, st.MPI_SOURCE, sprev);
    }
    /* Same tag on world at the same time does not interfere. */
    CHECK_MPI(MPI_Sendrecv(&t_rank, 1, MPI_INT, next, 8, &got, 1, MPI_INT, MPI_ANY_SOURCE, 8,
                           MPI_COMM_WORLD, &st));
    CHECK(got == prev && st.MPI_SOURCE == prev, "world beside split: %d from %d", got,
          st.MPI_SOURCE);
  }

  t_phase("4. Intercommunicator between the even and the");
  /* 4. Intercommunicator between the even and the odd ranks. */
  if (t_size >= 2) {
    int remote_size, irank, got = -1;
    /* Leaders: rank 0 of each half, which (keys reversed) is its highest world rank. */
    const int other = 1 - t_rank % 2;
    const int remote_leader = (t_size - 1) % 2 == other ? t_size - 1 : t_size - 2;
    CHECK_MPI(MPI_Intercomm_create(split, 0, MPI_COMM_WORLD, remote_leader, 9, &inter));
    MPI_Comm_remote_size(inter, &remote_size);
    MPI_Comm_rank(inter, &irank);
    if (irank < remote_size) {
      CHECK_MPI(MPI_Sendrecv(&irank, 1, MPI_INT, irank, 10, &got, 1, MPI_INT, MPI_ANY_SOURCE, 10,
                             inter, &st));
      CHECK(got == irank && st.MPI_SOURCE == irank,
            "intercomm: got %d from remote rank %d (expected %d)", got, st.MPI_SOURCE, irank);
    }
    CHECK_MPI(MPI_Comm_free(&inter));
  }

  t_phase("5. Free and create again");
  /* 5. Free and create again, a few times (context ids are reused). */
  CHECK_MPI(MPI_Comm_free(&split));
  CHECK_MPI(MPI_Comm_free(&dup));
  for (i = 0; i < 20; ++i) {
    MPI_Comm c;
    int got = -1;
    CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &c));
    CHECK_MPI(MPI_Sendrecv(&i, 1, MPI_INT, next, 11, &got, 1, MPI_INT, prev, 11, c, &st));
    CHECK(got == i, "dup %d: got %d", i, got);
    CHECK_MPI(MPI_Comm_free(&c));
  }
  return t_done();
}
