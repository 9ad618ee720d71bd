/*
 * The MPI standard's rules for statuses (MPI-3.1 sections 3.2.5, 3.8, 3.11, 4.1.11), checked
 * through the MTL:
 *  1. A call that completes one request or probes (Recv, Wait, Test, Probe, Iprobe, Mprobe,
 *     Improbe, Mrecv) leaves status.MPI_ERROR as it was: only the multiple-completion calls set
 *     it, with MPI_ERR_IN_STATUS. Seeded with a sentinel, checked after each success.
 *  2. MPI_PROC_NULL: a send completes at once; a receive, probe or matched probe of it gives
 *     source MPI_PROC_NULL, tag MPI_ANY_TAG, count 0 (MPI_Get_count and MPI_Get_elements), not
 *     cancelled.
 *  3. Zero-byte messages, specific and wildcard: count 0, source and tag right.
 *  4. MPI_STATUS_IGNORE and MPI_STATUSES_IGNORE in every call that takes a status.
 *  5. Receives into and sends from MPI_BOTTOM with absolute-address datatypes.
 *  6. MPI_Get_count and MPI_Get_elements on derived types, whole and partial.
 *  7. MPI_Cancel of a send (eager and rendezvous sizes) reports it not cancelled, and the
 *     message still arrives intact.
 */
#include "mpi_test.h"

#define SENTINEL 0x5eed
#define TAG 7

static void seed(MPI_Status* st) {
  memset(st, 0xa5, sizeof(*st));
  st->MPI_ERROR = SENTINEL;
}

/* Status of a received n-int message from `src` with tag `tag`, MPI_ERROR untouched. */
static void check_status(const MPI_Status* st, const char* call, int src, int tag, int n) {
  int count = -1;
  CHECK(st->MPI_ERROR == SENTINEL, "%s overwrote status.MPI_ERROR (%d; MPI-3.1 3.2.5)", call,
        st->MPI_ERROR);
  CHECK(st->MPI_SOURCE == src && st->MPI_TAG == tag, "%s: source %d tag %d, expected %d %d", call,
        st->MPI_SOURCE, st->MPI_TAG, src, tag);
  MPI_Get_count(st, MPI_INT, &count);
  CHECK(count == n, "%s: count %d, expected %d", call, count, n);
}

static void check_ints(const int* v, int n, int base, const char* what) {
  int i;
  for (i = 0; i < n; ++i) {
    CHECK(v[i] == base + i, "%s: element %d is %d, expected %d", what, i, v[i], base + i);
  }
}

static void send_ints(int dst, int n, int base, int tag) {
  int v[16];
  int i;
  for (i = 0; i < n; ++i) {
    v[i] = base + i;
  }
  CHECK_MPI(MPI_Send(v, n, MPI_INT, dst, tag, MPI_COMM_WORLD));
}

/* 1. Rank 0 receives eight 4-int messages from rank 1 in eight ways. */
static void error_field_untouched(void) {
  int v[16], flag = 0, k;
  MPI_Status st;
  MPI_Message msg;
  MPI_Request req;
  t_phase("1. MPI_ERROR untouched");
  if (t_rank == 1) {
    for (k = 0; k < 8; ++k) {
      send_ints(0, 4, 100 * k, TAG + k);
    }
    return;
  }
  if (t_rank != 0) {
    return;
  }
  seed(&st);
  CHECK_MPI(MPI_Recv(v, 16, MPI_INT, 1, TAG, MPI_COMM_WORLD, &st));
  check_status(&st, "MPI_Recv", 1, TAG, 4);
  check_ints(v, 4, 0, "MPI_Recv");

  seed(&st);
  CHECK_MPI(MPI_Irecv(v, 16, MPI_INT, 1, TAG + 1, MPI_COMM_WORLD, &req));
  CHECK_MPI(MPI_Wait(&req, &st));
  check_status(&st, "MPI_Wait", 1, TAG + 1, 4);
  check_ints(v, 4, 100, "MPI_Wait");

  CHECK_MPI(MPI_Irecv(v, 16, MPI_INT, 1, TAG + 2, MPI_COMM_WORLD, &req));
  for (flag = 0; !flag;) {
    seed(&st);
    CHECK_MPI(MPI_Test(&req, &flag, &st));
  }
  check_status(&st, "MPI_Test", 1, TAG + 2, 4);
  check_ints(v, 4, 200, "MPI_Test");

  seed(&st);
  CHECK_MPI(MPI_Probe(1, TAG + 3, MPI_COMM_WORLD, &st));
  check_status(&st, "MPI_Probe", 1, TAG + 3, 4);
  CHECK_MPI(MPI_Recv(v, 16, MPI_INT, 1, TAG + 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE));

  for (flag = 0; !flag;) {
    seed(&st);
    CHECK_MPI(MPI_Iprobe(MPI_ANY_SOURCE, TAG + 4, MPI_COMM_WORLD, &flag, &st));
  }
  check_status(&st, "MPI_Iprobe", 1, TAG + 4, 4);
  CHECK_MPI(MPI_Recv(v, 16, MPI_INT, 1, TAG + 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE));

  seed(&st);
  CHECK_MPI(MPI_Mprobe(1, TAG + 5, MPI_COMM_WORLD, &msg, &st));
  check_status(&st, "MPI_Mprobe", 1, TAG + 5, 4);
  seed(&st);
  CHECK_MPI(MPI_Mrecv(v, 16, MPI_INT, &msg, &st));
  check_status(&st, "MPI_Mrecv", 1, TAG + 5, 4);
  check_ints(v, 4, 500, "MPI_Mrecv");

  for (flag = 0; !flag;) {
    seed(&st);
    CHECK_MPI(MPI_Improbe(1, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &msg, &st));
  }
  check_status(&st, "MPI_Improbe", 1, TAG + 6, 4);
  seed(&st);
  CHECK_MPI(MPI_Imrecv(v, 16, MPI_INT, &msg, &req));
  CHECK_MPI(MPI_Wait(&req, &st));
  check_status(&st, "MPI_Imrecv + MPI_Wait", 1, TAG + 6, 4);
  check_ints(v, 4, 600, "MPI_Imrecv");

  /* The eighth, with MPI_STATUS_IGNORE. */
  CHECK_MPI(MPI_Recv(v, 16, MPI_INT, 1, TAG + 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
}

/* The status of a receive or probe of MPI_PROC_NULL (MPI-3.1 3.11). */
static void check_null_status(const MPI_Status* st, const char* call) {
  int count = -1, elements = -1, cancelled = 1;
  CHECK(st->MPI_SOURCE == MPI_PROC_NULL && st->MPI_TAG == MPI_ANY_TAG,
        "%s of MPI_PROC_NULL: source %d tag %d, expected MPI_PROC_NULL and MPI_ANY_TAG", call,
        st->MPI_SOURCE, st->MPI_TAG);
  MPI_Get_count(st, MPI_INT, &count);
  MPI_Get_elements(st, MPI_INT, &elements);
  MPI_Test_cancelled(st, &cancelled);
  CHECK(count == 0 && elements == 0 && !cancelled,
        "%s of MPI_PROC_NULL: count %d elements %d cancelled %d, expected 0 0 0", call, count,
        elements, cancelled);
}

/* 2. Every rank, alone. */
static void proc_null(void) {
  int v[4] = {1, 2, 3, 4}, flag = 0;
  MPI_Status st;
  MPI_Request req;
  MPI_Message msg;
  t_phase("2. MPI_PROC_NULL");
  CHECK_MPI(MPI_Send(v, 4, MPI_INT, MPI_PROC_NULL, TAG, MPI_COMM_WORLD));
  CHECK_MPI(MPI_Isend(v, 4, MPI_INT, MPI_PROC_NULL, TAG, MPI_COMM_WORLD, &req));
  CHECK_MPI(MPI_Wait(&req, &st));
  CHECK_MPI(MPI_Ssend(v, 4, MPI_INT, MPI_PROC_NULL, TAG, MPI_COMM_WORLD));

  seed(&st);
  CHECK_MPI(MPI_Recv(v, 4, MPI_INT, MPI_PROC_NULL, TAG, MPI_COMM_WORLD, &st));
  check_null_status(&st, "MPI_Recv");
  check_ints(v, 4, 1, "MPI_Recv of MPI_PROC_NULL must not touch the buffer");

  seed(&st);
  CHECK_MPI(MPI_Irecv(v, 4, MPI_INT, MPI_PROC_NULL, TAG, MPI_COMM_WORLD, &req));
  CHECK_MPI(MPI_Wait(&req, &st));
  check_null_status(&st, "MPI_Irecv + MPI_Wait");

  seed(&st);
  CHECK_MPI(MPI_Probe(MPI_PROC_NULL, TAG, MPI_COMM_WORLD, &st));
  check_null_status(&st, "MPI_Probe");

  seed(&st);
  CHECK_MPI(MPI_Iprobe(MPI_PROC_NULL, TAG, MPI_COMM_WORLD, &flag, &st));
  CHECK(flag, "MPI_Iprobe of MPI_PROC_NULL: flag false, expected true");
  check_null_status(&st, "MPI_Iprobe");

  seed(&st);
  CHECK_MPI(MPI_Mprobe(MPI_PROC_NULL, TAG, MPI_COMM_WORLD, &msg, &st));
  CHECK(msg == MPI_MESSAGE_NO_PROC, "MPI_Mprobe of MPI_PROC_NULL: not MPI_MESSAGE_NO_PROC");
  check_null_status(&st, "MPI_Mprobe");
  seed(&st);
  CHECK_MPI(MPI_Mrecv(v, 4, MPI_INT, &msg, &st));
  check_null_status(&st, "MPI_Mrecv of MPI_MESSAGE_NO_PROC");
  CHECK(msg == MPI_MESSAGE_NULL, "MPI_Mrecv left the message handle set");

  flag = 0;
  seed(&st);
  CHECK_MPI(MPI_Improbe(MPI_PROC_NULL, TAG, MPI_COMM_WORLD, &flag, &msg, &st));
  CHECK(flag && msg == MPI_MESSAGE_NO_PROC, "MPI_Improbe of MPI_PROC_NULL: flag %d", flag);
  check_null_status(&st, "MPI_Improbe");
  CHECK_MPI(MPI_Mrecv(v, 4, MPI_INT, &msg, MPI_STATUS_IGNORE));

  seed(&st);
  CHECK_MPI(MPI_Sendrecv(v, 4, MPI_INT, MPI_PROC_NULL, TAG, v, 4, MPI_INT, MPI_PROC_NULL, TAG,
                         MPI_COMM_WORLD, &st));
  check_null_status(&st, "MPI_Sendrecv");
}

/* 3. Zero-byte messages from rank 1 to rank 0: specific, then wildcard source and tag. */
static void zero_bytes(void) {
  MPI_Status st;
  MPI_Request req;
  int count = -1, elements = -1;
  t_phase("3. zero-byte messages");
  if (t_rank == 1) {
    CHECK_MPI(MPI_Send(NULL, 0, MPI_INT, 0, TAG, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Send(NULL, 0, MPI_BYTE, 0, TAG + 1, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Ssend(NULL, 0, MPI_INT, 0, TAG + 2, MPI_COMM_WORLD));
  } else if (t_rank == 0) {
    seed(&st);
    CHECK_MPI(MPI_Recv(NULL, 0, MPI_INT, 1, TAG, MPI_COMM_WORLD, &st));
    check_status(&st, "zero-byte MPI_Recv", 1, TAG, 0);
    seed(&st);
    CHECK_MPI(MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
    check_status(&st, "zero-byte MPI_Probe", 1, TAG + 1, 0);
    seed(&st);
    CHECK_MPI(MPI_Irecv(NULL, 0, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &req));
    CHECK_MPI(MPI_Wait(&req, &st));
    MPI_Get_elements(&st, MPI_BYTE, &elements);
    check_status(&st, "zero-byte wildcard MPI_Wait", 1, TAG + 1, 0);
    CHECK(elements == 0, "zero-byte message: MPI_Get_elements %d", elements);
    seed(&st);
    /* A larger receive buffer for a zero-byte synchronous send. */
    {
      int v[4];
      CHECK_MPI(MPI_Recv(v, 4, MPI_INT, MPI_ANY_SOURCE, TAG + 2, MPI_COMM_WORLD, &st));
    }
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(count == 0 && st.MPI_SOURCE == 1 && st.MPI_ERROR == SENTINEL,
          "zero-byte Ssend received: count %d source %d error %d", count, st.MPI_SOURCE,
          st.MPI_ERROR);
  }
}

/* 4. Rank 1 sends 11 messages; rank 0 takes them with every call that accepts an ignore. */
static void ignores(void) {
  int v[8][4], i, idx = -1, flag = 0, outcount = 0, indices[2];
  MPI_Request reqs[2];
  MPI_Message msg;
  t_phase("4. MPI_STATUS_IGNORE / MPI_STATUSES_IGNORE");
  if (t_rank == 1) {
    for (i = 0; i < 11; ++i) {
      send_ints(0, 4, 1000 + 10 * i, TAG + i);
    }
    {
      int r[4];
      CHECK_MPI(MPI_Sendrecv(r, 0, MPI_INT, 0, TAG + 20, r, 4, MPI_INT, 0, TAG + 21, MPI_COMM_WORLD,
                             MPI_STATUS_IGNORE));
      check_ints(r, 4, 77, "MPI_Sendrecv with MPI_STATUS_IGNORE");
    }
    return;
  }
  if (t_rank != 0) {
    return;
  }
  CHECK_MPI(MPI_Recv(v[0], 4, MPI_INT, 1, TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
  check_ints(v[0], 4, 1000, "MPI_Recv");
  CHECK_MPI(MPI_Irecv(v[1], 4, MPI_INT, 1, TAG + 1, MPI_COMM_WORLD, &reqs[0]));
  CHECK_MPI(MPI_Irecv(v[2], 4, MPI_INT, 1, TAG + 2, MPI_COMM_WORLD, &reqs[1]));
  CHECK_MPI(MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE));
  check_ints(v[2], 4, 1020, "MPI_Waitall");
  CHECK_MPI(MPI_Irecv(v[1], 4, MPI_INT, 1, TAG + 3, MPI_COMM_WORLD, &reqs[0]));
  CHECK_MPI(MPI_Irecv(v[2], 4, MPI_INT, 1, TAG + 4, MPI_COMM_WORLD, &reqs[1]));
  for (flag = 0; !flag;) {
    CHECK_MPI(MPI_Testall(2, reqs, &flag, MPI_STATUSES_IGNORE));
  }
  check_ints(v[1], 4, 1030, "MPI_Testall");
  CHECK_MPI(MPI_Irecv(v[3], 4, MPI_INT, 1, TAG + 5, MPI_COMM_WORLD, &reqs[0]));
  CHECK_MPI(MPI_Waitany(1, reqs, &idx, MPI_STATUS_IGNORE));
  CHECK(idx == 0, "MPI_Waitany index %d", idx);
  check_ints(v[3], 4, 1050, "MPI_Waitany");
  CHECK_MPI(MPI_Irecv(v[4], 4, MPI_INT, 1, TAG + 6, MPI_COMM_WORLD, &reqs[0]));
  for (outcount = 0; outcount == 0;) {
    CHECK_MPI(MPI_Waitsome(1, reqs, &outcount, indices, MPI_STATUSES_IGNORE));
  }
  check_ints(v[4], 4, 1060, "MPI_Waitsome");
  CHECK_MPI(MPI_Probe(1, TAG + 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
  for (flag = 0; !flag;) {
    CHECK_MPI(MPI_Iprobe(1, TAG + 7, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE));
  }
  CHECK_MPI(MPI_Mprobe(1, TAG + 7, MPI_COMM_WORLD, &msg, MPI_STATUS_IGNORE));
  CHECK_MPI(MPI_Mrecv(v[5], 4, MPI_INT, &msg, MPI_STATUS_IGNORE));
  check_ints(v[5], 4, 1070, "MPI_Mrecv");
  for (flag = 0; !flag;) {
    CHECK_MPI(MPI_Improbe(1, TAG + 8, MPI_COMM_WORLD, &flag, &msg, MPI_STATUS_IGNORE));
  }
  CHECK_MPI(MPI_Imrecv(v[6], 4, MPI_INT, &msg, &reqs[0]));
  for (flag = 0; !flag;) {
    CHECK_MPI(MPI_Test(&reqs[0], &flag, MPI_STATUS_IGNORE));
  }
  check_ints(v[6], 4, 1080, "MPI_Imrecv + MPI_Test");
  CHECK_MPI(MPI_Irecv(v[7], 4, MPI_INT, 1, TAG + 9, MPI_COMM_WORLD, &reqs[0]));
  for (flag = 0; !flag;) {
    CHECK_MPI(MPI_Testany(1, reqs, &idx, &flag, MPI_STATUS_IGNORE));
  }
  check_ints(v[7], 4, 1090, "MPI_Testany");
  CHECK_MPI(MPI_Irecv(v[0], 4, MPI_INT, 1, TAG + 10, MPI_COMM_WORLD, &reqs[0]));
  for (outcount = 0; outcount == 0;) {
    CHECK_MPI(MPI_Testsome(1, reqs, &outcount, indices, MPI_STATUSES_IGNORE));
  }
  check_ints(v[0], 4, 1100, "MPI_Testsome");
  {
    int r[4] = {77, 78, 79, 80};
    CHECK_MPI(MPI_Sendrecv(r, 4, MPI_INT, 1, TAG + 21, v[1], 4, MPI_INT, 1, TAG + 20,
                           MPI_COMM_WORLD, MPI_STATUS_IGNORE));
  }
}

/* 5 and 6. Absolute addresses from MPI_BOTTOM, and counts of derived types. */
struct rec {
  double d;
  int pad;
  int i[3];
};

static MPI_Datatype absolute_type(struct rec* r) {
  MPI_Aint disp[2];
  int lens[2] = {1, 3};
  MPI_Datatype types[2] = {MPI_DOUBLE, MPI_INT}, t;
  CHECK_MPI(MPI_Get_address(&r->d, &disp[0]));
  CHECK_MPI(MPI_Get_address(r->i, &disp[1]));
  CHECK_MPI(MPI_Type_create_struct(2, lens, disp, types, &t));
  CHECK_MPI(MPI_Type_commit(&t));
  return t;
}

static void bottom_and_counts(void) {
  MPI_Status st;
  MPI_Datatype t, vec;
  int count = -1, elements = -1, i;
  t_phase("5. MPI_BOTTOM with absolute addresses; 6. counts of derived types");
  if (t_rank == 1) {
    struct rec r = {2.5, -1, {7, 8, 9}};
    int v[12];
    t = absolute_type(&r);
    CHECK_MPI(MPI_Send(MPI_BOTTOM, 1, t, 0, TAG, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Type_free(&t));
    for (i = 0; i < 12; ++i) {
      v[i] = 300 + i;
    }
    CHECK_MPI(MPI_Send(v, 12, MPI_INT, 0, TAG + 1, MPI_COMM_WORLD)); /* 2 whole vectors */
    CHECK_MPI(MPI_Send(v, 7, MPI_INT, 0, TAG + 2, MPI_COMM_WORLD));  /* 1 vector + 1 element */
  } else if (t_rank == 0) {
    struct rec r = {0.0, 42, {0, 0, 0}};
    int v[24];
    t = absolute_type(&r);
    seed(&st);
    CHECK_MPI(MPI_Recv(MPI_BOTTOM, 1, t, 1, TAG, MPI_COMM_WORLD, &st));
    CHECK(r.d == 2.5 && r.i[0] == 7 && r.i[1] == 8 && r.i[2] == 9 && r.pad == 42,
          "MPI_BOTTOM receive: d %g i %d %d %d pad %d", r.d, r.i[0], r.i[1], r.i[2], r.pad);
    MPI_Get_count(&st, t, &count);
    MPI_Get_elements(&st, t, &elements);
    CHECK(count == 1 && elements == 4 && st.MPI_ERROR == SENTINEL,
          "MPI_BOTTOM receive: count %d elements %d (expected 1 and 4)", count, elements);
    CHECK_MPI(MPI_Type_free(&t));

    /* A vector of 3 blocks of 2 ints, stride 4: 6 ints a whole element. */
    CHECK_MPI(MPI_Type_vector(3, 2, 4, MPI_INT, &vec));
    CHECK_MPI(MPI_Type_commit(&vec));
    for (i = 0; i < 24; ++i) {
      v[i] = -1;
    }
    seed(&st);
    CHECK_MPI(MPI_Recv(v, 2, vec, 1, TAG + 1, MPI_COMM_WORLD, &st));
    MPI_Get_count(&st, vec, &count);
    MPI_Get_elements(&st, vec, &elements);
    CHECK(count == 2 && elements == 12, "2 vectors: count %d elements %d", count, elements);
    /* Extent 10 ints: the second vector starts at v[10]. */
    CHECK(v[0] == 300 && v[1] == 301 && v[2] == -1 && v[4] == 302 && v[9] == 305 && v[10] == 306 &&
              v[12] == -1 && v[19] == 311 && v[20] == -1,
          "2 vectors: data misplaced (%d %d %d %d %d %d %d)", v[0], v[1], v[2], v[4], v[9], v[10],
          v[19]);
    seed(&st);
    CHECK_MPI(MPI_Recv(v, 2, vec, 1, TAG + 2, MPI_COMM_WORLD, &st));
    MPI_Get_count(&st, vec, &count);
    MPI_Get_elements(&st, vec, &elements);
    CHECK(count == MPI_UNDEFINED && elements == 7,
          "7 ints into vectors: count %d (expected MPI_UNDEFINED) elements %d (expected 7)", count,
          elements);
    CHECK_MPI(MPI_Type_free(&vec));
  }
}

/* 7. A send cannot be recalled: cancel reports it not cancelled, the receiver gets it. */
static void cancel_sends(void) {
  const int big = 1 << 20; /* above every eager limit: rendezvous */
  int* buf = malloc(sizeof(int) * (size_t)big);
  MPI_Request req;
  MPI_Status st;
  int cancelled = 1, sizes[2] = {4, big}, k, i;
  CHECK(buf != NULL, "malloc");
  t_phase("7. MPI_Cancel of sends");
  for (k = 0; k < 2; ++k) {
    const int n = sizes[k];
    if (t_rank == 1) {
      for (i = 0; i < n; ++i) {
        buf[i] = k * 7 + i;
      }
      CHECK_MPI(MPI_Isend(buf, n, MPI_INT, 0, TAG + k, MPI_COMM_WORLD, &req));
      CHECK_MPI(MPI_Cancel(&req));
      /* The receiver posts only after the cancel: the message is not matched yet. */
      CHECK_MPI(MPI_Send(&k, 0, MPI_INT, 0, TAG + 10, MPI_COMM_WORLD));
      CHECK_MPI(MPI_Wait(&req, &st));
      MPI_Test_cancelled(&st, &cancelled);
      CHECK(!cancelled, "a %d-int send was reported cancelled (rdmx never recalls one)", n);
    } else if (t_rank == 0) {
      CHECK_MPI(MPI_Recv(NULL, 0, MPI_INT, 1, TAG + 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
      memset(buf, 0, sizeof(int) * (size_t)n);
      seed(&st);
      CHECK_MPI(MPI_Recv(buf, n, MPI_INT, 1, TAG + k, MPI_COMM_WORLD, &st));
      check_status(&st, "receive of a send whose cancel failed", 1, TAG + k, n);
      for (i = 0; i < n; ++i) {
        CHECK(buf[i] == k * 7 + i, "cancelled-send message of %d ints wrong at %d", n, i);
      }
    }
  }
  free(buf);
}

int main(int argc, char** argv) {
  t_init(&argc, &argv, "mpi_status_rules");
  CHECK(t_size >= 2, "needs 2 ranks");
  error_field_untouched();
  proc_null();
  zero_bytes();
  ignores();
  bottom_and_counts();
  cancel_sends();
  return t_done();
}
