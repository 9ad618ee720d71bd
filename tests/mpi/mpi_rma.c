/*
 * MPI one-sided communication, as an application uses it: a window per rank (MPI_Win_allocate
 * and MPI_Win_create on malloc'd memory), then
 *   - fence epochs: each rank puts to its right neighbour and gets from its left one, 1 byte to
 *     1 MiB (through pml ucx / osc ucx over rdmx_rc: put_short, put_bcopy, get_bcopy, and the
 *     zero-copy ones), every byte checked;
 *   - passive target: MPI_Win_lock / MPI_Put / MPI_Win_flush / MPI_Get / MPI_Win_unlock to one
 *     target, and MPI_Win_lock_all with MPI_Accumulate (MPI_SUM) from every rank into rank 0
 *     and MPI_Fetch_and_op counters (each rank's fetched value distinct, the sum exact);
 *   - MPI_Compare_and_swap on one word.
 * Rank r's data at size n is seeded (r, n); every check names the first wrong byte.
 */
#include "mpi_test.h"

enum { kMax = 1 << 20 };

static uint32_t seed_of(int rank, size_t n) {
  return (uint32_t)rank * 7919u + (uint32_t)n;
}

/* Fence epochs over `win` (of kMax bytes at `base`): rank r puts its (r, n) data at offset 0 of
 * its right neighbour, and gets its left neighbour's own (left, n) data from offset kMax / 2
 * into `scratch`. */
static void fence_epochs(MPI_Win win, unsigned char* base, unsigned char* src,
                         unsigned char* scratch) {
  static const size_t sizes[] = {1, 8, 200, 256, 257, 4095, 8192, 8193, 65536, kMax / 2};
  const int right = (t_rank + 1) % t_size;
  const int left = (t_rank + t_size - 1) % t_size;
  size_t k;

  for (k = 0; k < sizeof(sizes) / sizeof(sizes[0]); ++k) {
    const size_t n = sizes[k];
    t_phase("fence put/get");
    memset(base, 0, n);
    t_fill(base + kMax / 2, n, seed_of(t_rank, n) + 1); /* what the left neighbour gets */
    t_fill(src, n, seed_of(t_rank, n));
    memset(scratch, 0, n);
    CHECK_MPI(MPI_Win_fence(0, win));
    CHECK_MPI(MPI_Put(src, (int)n, MPI_BYTE, right, 0, (int)n, MPI_BYTE, win));
    CHECK_MPI(MPI_Get(scratch, (int)n, MPI_BYTE, left, kMax / 2, (int)n, MPI_BYTE, win));
    CHECK_MPI(MPI_Win_fence(0, win));
    {
      long d = t_first_diff(base, n, seed_of(left, n));
      CHECK(d < 0, "put of %zu B from rank %d: byte %ld wrong", n, left, d);
      d = t_first_diff(scratch, n, seed_of(left, n) + 1);
      CHECK(d < 0, "get of %zu B from rank %d: byte %ld wrong", n, left, d);
    }
  }
}

/* Passive target: rank 0 locks rank 1's window, puts, flushes, gets it back, unlocks. */
static void lock_put_get(MPI_Win win, unsigned char* base, unsigned char* src,
                         unsigned char* scratch) {
  const size_t n = 70000;
  t_phase("lock put/get");
  memset(base, 0, kMax);
  CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
  if (t_rank == 0) {
    t_fill(src, n, 4242);
    memset(scratch, 0, n);
    CHECK_MPI(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win));
    CHECK_MPI(MPI_Put(src, (int)n, MPI_BYTE, 1, 100, (int)n, MPI_BYTE, win));
    CHECK_MPI(MPI_Win_flush(1, win));
    CHECK_MPI(MPI_Get(scratch, (int)n, MPI_BYTE, 1, 100, (int)n, MPI_BYTE, win));
    CHECK_MPI(MPI_Win_unlock(1, win));
    CHECK_DATA(scratch, n, 4242);
  }
  CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
  if (t_rank == 1) {
    CHECK_MPI(MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win)); /* the window's copy, synchronised */
    CHECK_DATA(base + 100, n, 4242);
    CHECK(base[99] == 0 && base[100 + n] == 0, "the put wrote outside [100, %zu)", 100 + n);
    CHECK_MPI(MPI_Win_unlock(1, win));
  }
}

/* Accumulate and fetch-and-op into rank 0's window, longs from byte 0 (the window's displacement
 * unit is 1 byte), under lock_all. */
static void atomics(MPI_Win win, long* words) {
  enum { kRounds = 20, kLen = 16 };
  long contrib[kLen], fetched[kRounds], one = 1, expect;
  int i, r;

  t_phase("accumulate");
  memset(words, 0, sizeof(long) * (kLen + 2));
  CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
  for (i = 0; i < kLen; ++i) {
    contrib[i] = (long)(t_rank + 1) * (i + 1);
  }
  CHECK_MPI(MPI_Win_lock_all(0, win));
  for (r = 0; r < kRounds; ++r) {
    CHECK_MPI(MPI_Accumulate(contrib, kLen, MPI_LONG, 0, 0, kLen, MPI_LONG, MPI_SUM, win));
    CHECK_MPI(MPI_Fetch_and_op(&one, &fetched[r], MPI_LONG, 0, kLen * sizeof(long), MPI_SUM, win));
    CHECK_MPI(MPI_Win_flush(0, win));
  }
  CHECK_MPI(MPI_Win_unlock_all(win));
  /* Each fetch saw a distinct count, increasing within this rank. */
  for (r = 1; r < kRounds; ++r) {
    CHECK(fetched[r] > fetched[r - 1], "fetch_and_op %d fetched %ld after %ld", r, fetched[r],
          fetched[r - 1]);
  }
  CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
  if (t_rank == 0) {
    CHECK_MPI(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
    for (i = 0; i < kLen; ++i) {
      expect = (long)kRounds * (i + 1) * ((long)t_size * (t_size + 1) / 2);
      CHECK(words[i] == expect, "accumulated word %d is %ld, expected %ld", i, words[i], expect);
    }
    CHECK(words[kLen] == (long)kRounds * t_size, "the fetch_and_op counter is %ld, expected %ld",
          words[kLen], (long)kRounds * t_size);
    CHECK_MPI(MPI_Win_unlock(0, win));
  }

  /* Compare-and-swap: each rank in turn swaps the word from the previous rank's value to its
   * own; exactly one succeeds per round, so the word ends as the last rank's. */
  t_phase("compare_and_swap");
  CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
  for (r = 0; r < t_size; ++r) {
    if (t_rank == r) {
      long mine = 1000 + r, prev = (r == 0) ? 0 : 1000 + r - 1, old = -1;
      CHECK_MPI(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
      CHECK_MPI(
          MPI_Compare_and_swap(&mine, &prev, &old, MPI_LONG, 0, (kLen + 1) * sizeof(long), win));
      CHECK_MPI(MPI_Win_unlock(0, win));
      CHECK(old == prev, "compare_and_swap by rank %d found %ld, expected %ld", r, old, prev);
    }
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
  }
  if (t_rank == 0) {
    CHECK_MPI(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
    CHECK(words[kLen + 1] == 1000 + t_size - 1, "the swapped word is %ld", words[kLen + 1]);
    CHECK_MPI(MPI_Win_unlock(0, win));
  }
}

int main(int argc, char** argv) {
  unsigned char *base, *src, *scratch, *created;
  MPI_Win win, win2;

  t_init(&argc, &argv, "mpi_rma");
  CHECK(t_size >= 2, "needs 2 ranks");
  src = malloc(kMax);
  scratch = malloc(kMax);
  created = malloc(kMax);
  CHECK(src != NULL && scratch != NULL && created != NULL, "malloc");

  CHECK_MPI(MPI_Win_allocate(kMax, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win));
  fence_epochs(win, base, src, scratch);
  lock_put_get(win, base, src, scratch);
  atomics(win, (long*)(void*)base);
  CHECK_MPI(MPI_Win_free(&win));

  /* The same over memory the application allocated itself. */
  CHECK_MPI(MPI_Win_create(created, kMax, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win2));
  fence_epochs(win2, created, src, scratch);
  CHECK_MPI(MPI_Win_free(&win2));

  free(src);
  free(scratch);
  free(created);
  return t_done();
}
