/*
 * osu_latency (np 2) and osu_multi_lat (any even np), OSU conventions: the lower half of the
 * ranks ping-pongs with the upper half (rank i with i + np/2), blocking MPI_Send / MPI_Recv;
 * latency = half the round trip, averaged over iterations and, for multi_lat, over the pairs
 * (osu_pingpong).
 * Built twice: OSU_MULTI=0 -> osu_latency, OSU_MULTI=1 -> osu_multi_lat.
 * -P adds p50, p99 and max columns (each the largest over the pairs): every round trip timed.
 */
#include <stdio.h>
#include <stdlib.h>

#include "osu_common.h"

#ifndef OSU_MULTI
#define OSU_MULTI 0
#endif

int main(int argc, char** argv) {
  osu_opts_t o;
  char *sbuf, *rbuf;
  double* half_us = NULL;
  size_t size;
  MPI_Init(&argc, &argv);
  osu_defaults(&o, OSU_MULTI ? "osu_multi_lat" : "osu_latency",
               OSU_MULTI ? "Multi Latency Test (pairs ping-pong at once)" : "Latency Test", 1);
  if (osu_setup(&o, argc, argv, OSU_MULTI ? 0 : 2) != 0) {
    MPI_Finalize();
    return 1;
  }
  sbuf = osu_alloc(o.max_size);
  rbuf = osu_alloc(o.max_size);
  if (o.per_iter) {
    half_us = malloc(sizeof(double) * (size_t)(o.iters > o.iters_large ? o.iters : o.iters_large));
    if (half_us == NULL) {
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  if (o.rank == 0) {
    if (o.per_iter) {
      printf("%-10s%18s%18s%18s%18s\n", "# Size", "Latency (us)", "p50 (us)", "p99 (us)",
             "max (us)");
    } else {
      printf("%-10s%18s\n", "# Size", "Latency (us)");
    }
    fflush(stdout);
  }
  for (size = o.min_size; size <= o.max_size; size = osu_next_size(size)) {
    int iters, skip, done;
    double t0, mine = 0.0, sum = 0.0, pct[3] = {0.0, 0.0, 0.0}, worst[3];
    if (!osu_begin_size(&o, size, sbuf, rbuf, 1, 1, &iters, &skip)) {
      continue;
    }
    osu_pingpong(MPI_COMM_WORLD, o.rank < o.pairs, o.partner, sbuf, rbuf, size, skip, skip, 0.0,
                 NULL);
    OSU_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    t0 = MPI_Wtime();
    done = osu_pingpong(MPI_COMM_WORLD, o.rank < o.pairs, o.partner, sbuf, rbuf, size, iters,
                        o.min_iters, osu_deadline(&o), half_us);
    if (o.rank < o.pairs) {
      mine = (MPI_Wtime() - t0) * 1e6 / (2.0 * done);
      if (half_us != NULL) {
        osu_percentiles(half_us, done, pct);
      }
    }
    OSU_CHECK(MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD));
    if (half_us != NULL) {
      OSU_CHECK(MPI_Reduce(pct, worst, 3, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
    }
    if (o.rank == 0 && half_us != NULL) {
      printf("%-10zu%18.2f%18.2f%18.2f%18.2f\n", size, sum / o.pairs, worst[0], worst[1], worst[2]);
      fflush(stdout);
    } else if (o.rank == 0) {
      osu_row(size, sum / o.pairs);
    }
  }
  osu_disarm();
  free(half_us);
  MPI_Finalize();
  return 0;
}
