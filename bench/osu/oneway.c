/* mpi_oneway: the user-space instructions of one 8-byte message's critical path, sender's
 * MPI_Send plus receiver's MPI_Recv, without the receiver's wait (ci/bench-mpi --instr).
 *
 * osu_latency's MPI_Recv spins until the message lands, and how often it polls depends on the
 * emulator's timing, not on the stack. Here rank 1 sleeps (-s, microseconds) before each
 * MPI_Recv, long enough for the message to be there, so its MPI_Recv is the receive's own work
 * and the one progress call that finds it. Rank 0 sends, then waits for the reply (that wait
 * spins and is not the figure). Under valgrind --tool=callgrind --toggle-collect=oneway_measured
 * only the -i measured round trips are counted, after -x warm-up ones (connection set-up, the
 * first ring offers): rank 0's inclusive MPI_Send and rank 1's inclusive MPI_Recv, divided by
 * -i, are the send and the receive of one message. Not a timing benchmark: at full speed it
 * measures the sleep.
 *
 *   mpi_oneway [-i ITERATIONS (200)] [-x WARMUP (50)] [-s SLEEP_US (20000)], 2 ranks */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char buf[8];

static void round_trips(int rank, int n, unsigned sleep_us) {
  for (int i = 0; i < n; ++i) {
    if (rank == 0) {
      MPI_Send(buf, sizeof buf, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
      MPI_Recv(buf, sizeof buf, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      usleep(sleep_us);
      MPI_Recv(buf, sizeof buf, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buf, sizeof buf, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
    }
  }
}

/* The function callgrind toggles on. noipa: never merged with, nor inlined into, the warm-up
 * call, which would then be counted too. */
__attribute__((noipa)) void oneway_measured(int rank, int n, unsigned sleep_us) {
  round_trips(rank, n, sleep_us);
}

int main(int argc, char** argv) {
  int iterations = 200, warmup = 50, sleep_us = 20000, c;
  while ((c = getopt(argc, argv, "i:x:s:")) != -1) {
    switch (c) {
      case 'i':
        iterations = atoi(optarg);
        break;
      case 'x':
        warmup = atoi(optarg);
        break;
      case 's':
        sleep_us = atoi(optarg);
        break;
      default:
        fprintf(stderr, "usage: mpi_oneway [-i ITERATIONS] [-x WARMUP] [-s SLEEP_US]\n");
        return 2;
    }
  }
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2 || iterations < 1 || warmup < 0 || sleep_us < 0) {
    if (rank == 0) {
      fprintf(stderr, "mpi_oneway: needs exactly 2 ranks, -i >= 1, -x >= 0, -s >= 0\n");
    }
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  round_trips(rank, warmup, (unsigned)sleep_us);
  MPI_Barrier(MPI_COMM_WORLD);
  oneway_measured(rank, iterations, (unsigned)sleep_us);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    printf("mpi_oneway: %d round trips of 8 bytes after %d warm-up, receiver sleeping %d us\n",
           iterations, warmup, sleep_us);
  }
  MPI_Finalize();
  return 0;
}
