/*
 * osu_bw, osu_bibw and osu_mbw_mr, OSU conventions. Each iteration the sender posts a window
 * (-W, 64) of MPI_Isend and waits for all; the receiver posts the window of MPI_Irecv, waits, and
 * answers with a 4-byte ack (osu_bw). bibw: both sides post the window of receives and sends, no
 * ack. mbw_mr: every rank of the lower half streams to its partner in the upper half at once;
 * the aggregate bandwidth (sum over pairs) and message rate are reported.
 * Built three times: OSU_MODE = 0 (bw), 1 (bibw), 2 (mbw_mr). MB = 10^6 bytes.
 */
#include <stdio.h>
#include <stdlib.h>

#include "osu_common.h"

#ifndef OSU_MODE
#define OSU_MODE 0
#endif
#define OSU_BIBW (OSU_MODE == 1)
#define OSU_MBW (OSU_MODE == 2)

enum { TAG_DATA = 100, TAG_ACK = 101 };

static void stream(const osu_opts_t* o, char* sbuf, char* rbuf, size_t size, int n,
                   MPI_Request* reqs) {
  const int w = osu_window(o, size);
  int i, j;
  char ack[4] = {0};
  for (i = 0; i < n; ++i) {
    if (OSU_BIBW) {
      for (j = 0; j < w; ++j) {
        OSU_CHECK(
            MPI_Irecv(rbuf, (int)size, MPI_CHAR, o->partner, TAG_DATA, MPI_COMM_WORLD, &reqs[j]));
      }
      for (j = 0; j < w; ++j) {
        OSU_CHECK(MPI_Isend(sbuf, (int)size, MPI_CHAR, o->partner, TAG_DATA, MPI_COMM_WORLD,
                            &reqs[w + j]));
      }
      OSU_CHECK(MPI_Waitall(2 * w, reqs, MPI_STATUSES_IGNORE));
    } else if (o->rank < o->pairs) {
      for (j = 0; j < w; ++j) {
        OSU_CHECK(
            MPI_Isend(sbuf, (int)size, MPI_CHAR, o->partner, TAG_DATA, MPI_COMM_WORLD, &reqs[j]));
      }
      OSU_CHECK(MPI_Waitall(w, reqs, MPI_STATUSES_IGNORE));
      OSU_CHECK(MPI_Recv(ack, 4, MPI_CHAR, o->partner, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    } else {
      for (j = 0; j < w; ++j) {
        OSU_CHECK(
            MPI_Irecv(rbuf, (int)size, MPI_CHAR, o->partner, TAG_DATA, MPI_COMM_WORLD, &reqs[j]));
      }
      OSU_CHECK(MPI_Waitall(w, reqs, MPI_STATUSES_IGNORE));
      OSU_CHECK(MPI_Send(ack, 4, MPI_CHAR, o->partner, TAG_ACK, MPI_COMM_WORLD));
    }
  }
}

int main(int argc, char** argv) {
  osu_opts_t o;
  char *sbuf, *rbuf;
  MPI_Request* reqs;
  size_t size;
  MPI_Init(&argc, &argv);
  osu_defaults(&o,
               OSU_BIBW  ? "osu_bibw"
               : OSU_MBW ? "osu_mbw_mr"
                         : "osu_bw",
               OSU_BIBW  ? "Bi-Directional Bandwidth Test"
               : OSU_MBW ? "Multiple Bandwidth / Message Rate Test (pairs stream at once)"
                         : "Bandwidth Test",
               0);
  if (osu_setup(&o, argc, argv, OSU_MBW ? 0 : 2) != 0) {
    MPI_Finalize();
    return 1;
  }
  sbuf = osu_alloc(o.max_size);
  rbuf = osu_alloc(o.max_size);
  reqs = calloc(2 * (size_t)o.window, sizeof(*reqs));
  if (reqs == NULL) {
    osu_die("calloc", MPI_ERR_NO_MEM, __FILE__, __LINE__);
  }
  if (o.rank == 0) {
    if (OSU_MBW) {
      printf("# pairs %d, window %d\n", o.pairs, o.window);
      printf("%-10s%18s%18s\n", "# Size", "MB/s", "Messages/s");
    } else {
      printf("# window %d\n", o.window);
      printf("%-10s%18s\n", "# Size", "Bandwidth (MB/s)");
    }
    fflush(stdout);
  }
  for (size = o.min_size; size <= o.max_size; size = osu_next_size(size)) {
    int iters, skip;
    double t0, warm, mine = 0.0, sum = 0.0;
    if (!osu_begin_size(&o, size, sbuf, rbuf, OSU_BIBW, OSU_MBW ? 2 : 1, &iters, &skip)) {
      continue;
    }
    t0 = MPI_Wtime();
    stream(&o, sbuf, rbuf, size, skip, reqs);
    warm = MPI_Wtime() - t0;
    osu_budget(&o, warm, skip, &iters);
    OSU_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    t0 = MPI_Wtime();
    stream(&o, sbuf, rbuf, size, iters, reqs);
    if (o.rank < o.pairs) {
      /* bytes this pair moved (both directions for bibw) over the sender's time */
      const double bytes = (double)size * osu_window(&o, size) * iters * (OSU_BIBW ? 2.0 : 1.0);
      mine = bytes / 1e6 / (MPI_Wtime() - t0);
    }
    OSU_CHECK(MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD));
    if (o.rank == 0) {
      if (OSU_MBW) {
        osu_row2(size, sum, size > 0 ? sum * 1e6 / (double)size : 0.0);
      } else {
        osu_row(size, sum);
      }
    }
  }
  osu_disarm();
  free(reqs);
  MPI_Finalize();
  return 0;
}
