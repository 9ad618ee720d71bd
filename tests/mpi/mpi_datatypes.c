/*
 * Derived datatypes through the MTL's pack/unpack path (contiguous ones go zero-copy):
 * vector, indexed, struct (with padding, resized), subarray, each sent and received as itself,
 * and crossed with contiguous on the other side; non-blocking; count 0; and, when rdmx carries
 * large messages, a vector above the eager limit.
 */
#include "mpi_test.h"

typedef struct {
  char c;
  double d;
  int i[3];
  short s;
} item_t;

static MPI_Datatype item_type(void) {
  MPI_Datatype t, r;
  int bl[4] = {1, 1, 3, 1};
  MPI_Aint disp[4] = {offsetof(item_t, c), offsetof(item_t, d), offsetof(item_t, i),
                      offsetof(item_t, s)};
  MPI_Datatype types[4] = {MPI_CHAR, MPI_DOUBLE, MPI_INT, MPI_SHORT};
  CHECK_MPI(MPI_Type_create_struct(4, bl, disp, types, &t));
  CHECK_MPI(MPI_Type_create_resized(t, 0, sizeof(item_t), &r));
  CHECK_MPI(MPI_Type_commit(&r));
  MPI_Type_free(&t);
  return r;
}

static void fill_items(item_t* it, int n, int base) {
  int k;
  memset(it, 0, sizeof(item_t) * (size_t)n);
  for (k = 0; k < n; ++k) {
    it[k].c = (char)('a' + (base + k) % 26);
    it[k].d = (base + k) * 1.5;
    it[k].i[0] = base + k;
    it[k].i[1] = -(base + k);
    it[k].i[2] = (base + k) * 3;
    it[k].s = (short)(base + 2 * k);
  }
}

static void check_items(const item_t* it, int n, int base) {
  int k;
  for (k = 0; k < n; ++k) {
    CHECK(it[k].c == (char)('a' + (base + k) % 26) && it[k].d == (base + k) * 1.5 &&
              it[k].i[0] == base + k && it[k].i[1] == -(base + k) && it[k].i[2] == (base + k) * 3 &&
              it[k].s == (short)(base + 2 * k),
          "struct item %d wrong", k);
  }
}

/* Exchanges one message (rank 0 -> rank 1) and checks what rank 1 got. */
#define NV 10   /* vector: 10 blocks of 3 doubles, stride 5 */
#define NVEC 30 /* doubles carried */

int main(int argc, char** argv) {
  MPI_Datatype vec, idx, item, sub;
  double dv[NV * 5], dc[NVEC];
  int i, b, count;
  MPI_Status st;
  t_init(&argc, &argv, "mpi_datatypes");
  CHECK(t_size >= 2, "needs 2 ranks");
  CHECK_MPI(MPI_Type_vector(NV, 3, 5, MPI_DOUBLE, &vec));
  CHECK_MPI(MPI_Type_commit(&vec));
  {
    int bl[4] = {2, 1, 4, 3};
    int disp[4] = {0, 5, 7, 20};
    CHECK_MPI(MPI_Type_indexed(4, bl, disp, MPI_INT, &idx));
    CHECK_MPI(MPI_Type_commit(&idx));
  }
  item = item_type();
  {
    int sizes[2] = {8, 10}, subs[2] = {4, 5}, starts[2] = {2, 3};
    CHECK_MPI(MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_C, MPI_INT, &sub));
    CHECK_MPI(MPI_Type_commit(&sub));
  }

  t_phase("1. vector -> vector");
  /* 1. vector -> vector, vector -> contiguous, contiguous -> vector. */
  if (t_rank == 0) {
    for (i = 0; i < NV * 5; ++i) dv[i] = i;
    CHECK_MPI(MPI_Send(dv, 1, vec, 1, 1, MPI_COMM_WORLD));
    CHECK_MPI(MPI_Send(dv, 1, vec, 1, 2, MPI_COMM_WORLD));
    for (i = 0; i < NVEC; ++i) dc[i] = 1000 + i;
    CHECK_MPI(MPI_Send(dc, NVEC, MPI_DOUBLE, 1, 3, MPI_COMM_WORLD));
  } else if (t_rank == 1) {
    for (i = 0; i < NV * 5; ++i) dv[i] = -1;
    CHECK_MPI(MPI_Recv(dv, 1, vec, 0, 1, MPI_COMM_WORLD, &st));
    for (b = 0; b < NV; ++b) {
      for (i = 0; i < 5; ++i) {
        const double want = i < 3 ? b * 5 + i : -1;
        CHECK(dv[b * 5 + i] == want, "vector->vector [%d] = %g, want %g", b * 5 + i, dv[b * 5 + i],
              want);
      }
    }
    MPI_Get_count(&st, vec, &count);
    CHECK(count == 1, "vector count %d", count);
    CHECK_MPI(MPI_Recv(dc, NVEC, MPI_DOUBLE, 0, 2, MPI_COMM_WORLD, &st));
    for (b = 0; b < NV; ++b) {
      for (i = 0; i < 3; ++i) {
        CHECK(dc[b * 3 + i] == b * 5 + i, "vector->contiguous [%d] = %g", b * 3 + i, dc[b * 3 + i]);
      }
    }
    for (i = 0; i < NV * 5; ++i) dv[i] = -1;
    CHECK_MPI(MPI_Recv(dv, 1, vec, 0, 3, MPI_COMM_WORLD, &st));
    for (b = 0; b < NV; ++b) {
      for (i = 0; i < 3; ++i) {
        CHECK(dv[b * 5 + i] == 1000 + b * 3 + i, "contiguous->vector [%d] = %g", b * 5 + i,
              dv[b * 5 + i]);
      }
    }
  }

  t_phase("2. indexed");
  /* 2. indexed, 3 at a time, non-blocking on both sides. */
  {
    int ib[3 * 30];
    MPI_Request r;
    if (t_rank == 0) {
      for (i = 0; i < 90; ++i) ib[i] = i;
      CHECK_MPI(MPI_Isend(ib, 3, idx, 1, 4, MPI_COMM_WORLD, &r));
      CHECK_MPI(MPI_Wait(&r, MPI_STATUS_IGNORE));
    } else if (t_rank == 1) {
      /* extent of idx is 23 ints: elements at 0,1 5 7..10 20..22, repeated every 23 */
      const int offs[10] = {0, 1, 5, 7, 8, 9, 10, 20, 21, 22};
      int rep, j;
      for (i = 0; i < 90; ++i) ib[i] = -1;
      CHECK_MPI(MPI_Irecv(ib, 3, idx, 0, 4, MPI_COMM_WORLD, &r));
      CHECK_MPI(MPI_Wait(&r, &st));
      for (rep = 0; rep < 3; ++rep) {
        for (j = 0; j < 10; ++j) {
          const int at = rep * 23 + offs[j];
          CHECK(ib[at] == at, "indexed [%d] = %d", at, ib[at]);
        }
      }
      CHECK(ib[2] == -1 && ib[6] == -1 && ib[19] == -1, "indexed wrote into a gap");
      MPI_Get_count(&st, MPI_INT, &count);
      CHECK(count == 30, "indexed received %d ints", count);
    }
  }

  t_phase("3. struct with padding");
  /* 3. struct with padding (resized to sizeof), 7 items; as bytes on the other side. */
  {
    item_t it[7];
    if (t_rank == 0) {
      fill_items(it, 7, 10);
      CHECK_MPI(MPI_Send(it, 7, item, 1, 5, MPI_COMM_WORLD));
      fill_items(it, 7, 20);
      CHECK_MPI(MPI_Send(it, 7, item, 1, 6, MPI_COMM_WORLD));
    } else if (t_rank == 1) {
      int size = 0;
      char packed[7 * sizeof(item_t)];
      memset(it, 0x55, sizeof(it));
      CHECK_MPI(MPI_Recv(it, 7, item, 0, 5, MPI_COMM_WORLD, &st));
      check_items(it, 7, 10);
      /* The wire carries the type's packed size, not sizeof: receive it as bytes. */
      MPI_Type_size(item, &size);
      CHECK_MPI(MPI_Recv(packed, (int)sizeof(packed), MPI_BYTE, 0, 6, MPI_COMM_WORLD, &st));
      MPI_Get_count(&st, MPI_BYTE, &count);
      CHECK(count == 7 * size, "struct as bytes: %d, expected %d", count, 7 * size);
    }
  }

  t_phase("4. subarray 4x5 out of 8x10");
  /* 4. subarray 4x5 out of 8x10. */
  {
    int m[80];
    if (t_rank == 0) {
      for (i = 0; i < 80; ++i) m[i] = i;
      CHECK_MPI(MPI_Send(m, 1, sub, 1, 7, MPI_COMM_WORLD));
    } else if (t_rank == 1) {
      int r, c, got[20];
      CHECK_MPI(MPI_Recv(got, 20, MPI_INT, 0, 7, MPI_COMM_WORLD, &st));
      for (r = 0; r < 4; ++r) {
        for (c = 0; c < 5; ++c) {
          CHECK(got[r * 5 + c] == (r + 2) * 10 + (c + 3), "subarray (%d,%d) = %d", r, c,
                got[r * 5 + c]);
        }
      }
    }
  }

  t_phase("5. count 0 of a derived type");
  /* 5. count 0 of a derived type. */
  if (t_rank == 0) {
    CHECK_MPI(MPI_Send(dv, 0, vec, 1, 8, MPI_COMM_WORLD));
  } else if (t_rank == 1) {
    CHECK_MPI(MPI_Recv(dv, 4, vec, 0, 8, MPI_COMM_WORLD, &st));
    MPI_Get_count(&st, vec, &count);
    CHECK(count == 0, "count 0 received as %d", count);
  }

  t_phase("6. Above the eager limit");
  /* 6. Above the eager limit: 20000 blocks of 3 doubles (480 KB). */
  if (large_messages_supported(MPI_COMM_WORLD)) {
    const int blocks = 20000;
    MPI_Datatype big;
    double* x = malloc(sizeof(double) * (size_t)blocks * 5);
    CHECK(x != NULL, "malloc");
    CHECK_MPI(MPI_Type_vector(blocks, 3, 5, MPI_DOUBLE, &big));
    CHECK_MPI(MPI_Type_commit(&big));
    if (t_rank == 0) {
      for (i = 0; i < blocks * 5; ++i) x[i] = i;
      CHECK_MPI(MPI_Send(x, 1, big, 1, 9, MPI_COMM_WORLD));
    } else if (t_rank == 1) {
      for (i = 0; i < blocks * 5; ++i) x[i] = -1;
      CHECK_MPI(MPI_Recv(x, 1, big, 0, 9, MPI_COMM_WORLD, &st));
      for (i = 0; i < blocks * 5; ++i) {
        const double want = (i % 5) < 3 ? i : -1;
        CHECK(x[i] == want, "large vector [%d] = %g", i, x[i]);
      }
    }
    MPI_Type_free(&big);
    free(x);
  }

  MPI_Type_free(&vec);
  MPI_Type_free(&idx);
  MPI_Type_free(&item);
  MPI_Type_free(&sub);
  return t_done();
}
