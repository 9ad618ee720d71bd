/*
 * Node-local traffic and the shared-memory channel, seen from outside rdmx.
 *
 *   mpi_shm_local device N   every RDMA device's packet counters (sysfs hw_counters sent_pkts
 *                            and rcvd_pkts, all devices summed) are read around checked
 *                            traffic between ranks 0 and 1 (eager 0 B..8 KiB both ways,
 *                            rendezvous 64 KiB..4 MiB, Ssend, any-source, a 1,000-message
 *                            burst): they must move by exactly N packets when N is 0 (shared
 *                            memory on; in one of 3 tries, as background packets of the node
 *                            count too), by more than N otherwise (shared memory off: proves
 *                            the counters see this traffic at all).
 *   mpi_shm_local names      once MPI_Init is over (and a barrier), no rdmx segment name is left
 *                            in /dev/shm: every local peer attached at add_procs and the last
 *                            one removed each name, so a crash from here on leaves nothing.
 *   mpi_shm_local hold       prints "READY <pid>" per rank, then waits to be killed (the
 *                            leftover test kills the whole job with SIGKILL).
 */
#include <dirent.h>

#include "mpi_test.h"

static unsigned long long read_counter(const char* dev, const char* name) {
  char path[512];
  unsigned long long v = 0;
  FILE* f;
  snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/hw_counters/%s", dev, name);
  f = fopen(path, "r");
  if (f == NULL) {
    return 0;
  }
  if (fscanf(f, "%llu", &v) != 1) {
    v = 0;
  }
  fclose(f);
  return v;
}

/* Packets sent and received by every device of the node (one guest: both ranks' devices). */
static unsigned long long device_packets(int* devices) {
  DIR* d = opendir("/sys/class/infiniband");
  const struct dirent* e;
  unsigned long long sum = 0;
  *devices = 0;
  CHECK(d != NULL, "no /sys/class/infiniband");
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') {
      continue;
    }
    sum += read_counter(e->d_name, "sent_pkts") + read_counter(e->d_name, "rcvd_pkts");
    ++*devices;
  }
  closedir(d);
  return sum;
}

static void exchange(int peer, size_t n, uint32_t seed, unsigned char* buf, int sync) {
  if (t_rank == 0) {
    t_fill(buf, n, seed);
    if (sync) {
      CHECK_MPI(MPI_Ssend(buf, (int)n, MPI_BYTE, peer, 7, MPI_COMM_WORLD));
    } else {
      CHECK_MPI(MPI_Send(buf, (int)n, MPI_BYTE, peer, 7, MPI_COMM_WORLD));
    }
    memset(buf, 0, n);
    CHECK_MPI(
        MPI_Recv(buf, (int)n, MPI_BYTE, MPI_ANY_SOURCE, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK_DATA(buf, n, seed + 1);
  } else {
    memset(buf, 0, n);
    CHECK_MPI(MPI_Recv(buf, (int)n, MPI_BYTE, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK_DATA(buf, n, seed);
    t_fill(buf, n, seed + 1);
    CHECK_MPI(MPI_Send(buf, (int)n, MPI_BYTE, peer, 8, MPI_COMM_WORLD));
  }
}

static void traffic(unsigned char* buf) {
  static const size_t sizes[] = {0, 1, 8, 512, 1000, 4096, 8192, 65536, 1 << 20, 4 << 20};
  enum { kBurst = 1000 };
  MPI_Request reqs[kBurst];
  size_t i;
  int k;
  const int peer = 1 - t_rank;
  for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i) {
    exchange(peer, sizes[i], 100u + (uint32_t)i, buf, 0);
    exchange(peer, sizes[i], 200u + (uint32_t)i, buf, 1);
  }
  /* A burst of small messages, received in order. */
  for (k = 0; k < kBurst; ++k) {
    if (t_rank == 0) {
      ((uint32_t*)buf)[k] = (uint32_t)k * 2654435761u;
      CHECK_MPI(
          MPI_Isend(&((uint32_t*)buf)[k], 1, MPI_UINT32_T, peer, 9, MPI_COMM_WORLD, &reqs[k]));
    } else {
      CHECK_MPI(
          MPI_Irecv(&((uint32_t*)buf)[k], 1, MPI_UINT32_T, peer, 9, MPI_COMM_WORLD, &reqs[k]));
    }
  }
  CHECK_MPI(MPI_Waitall(kBurst, reqs, MPI_STATUSES_IGNORE));
  for (k = 0; k < kBurst && t_rank == 1; ++k) {
    CHECK(((uint32_t*)buf)[k] == (uint32_t)k * 2654435761u, "burst message %d out of order", k);
  }
}

static int segment_names(void) {
  DIR* d = opendir("/dev/shm");
  const struct dirent* e;
  int n = 0;
  CHECK(d != NULL, "no /dev/shm");
  while ((e = readdir(d)) != NULL) {
    n += strncmp(e->d_name, "rdmx-", 5) == 0 ? 1 : 0;
  }
  closedir(d);
  return n;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "device";
  t_init(&argc, &argv, "mpi_shm_local");
  CHECK(t_size >= 2, "needs 2 ranks");
  CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
  if (strcmp(mode, "names") == 0) {
    const int n = segment_names();
    CHECK(n == 0, "%d rdmx segment names left in /dev/shm after MPI_Init and a barrier", n);
  } else if (strcmp(mode, "hold") == 0) {
    printf("READY %d\n", (int)getpid());
    fflush(stdout);
    for (;;) {
      pause();
    }
  } else {
    const unsigned long long bound = argc > 2 ? strtoull(argv[2], NULL, 10) : 0;
    unsigned char* buf = malloc(4 << 20);
    unsigned long long before = 0, after = 0;
    int devices = 0;
    int attempt, quiet = 0;
    CHECK(buf != NULL, "malloc");
    /* The counters are the node's: a packet of anything else in the window (another job's QPs
     * torn down just before, a connection handshake of two other ranks still in flight) counts
     * too. With bound 0 the traffic is checked up to 3 times: traffic that went through the
     * device moves packets every time, background only now and then. */
    for (attempt = 0; attempt < (bound == 0 ? 3 : 1) && !quiet; ++attempt) {
      CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
      before = device_packets(&devices);
      CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
      if (t_rank <= 1) {
        traffic(buf);
      }
      CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
      after = device_packets(&devices);
      quiet = after == before;
      CHECK_MPI(MPI_Bcast(&quiet, 1, MPI_INT, 0, MPI_COMM_WORLD));
      if (t_rank == 0) {
        printf("device packets across the traffic: %llu (%d devices)\n", after - before, devices);
      }
    }
    if (t_rank == 0) {
      if (bound == 0) {
        CHECK(quiet, "node-local traffic moved %llu device packets, %d times", after - before,
              attempt);
      } else {
        CHECK(after - before > bound, "only %llu device packets (expected more than %llu)",
              after - before, bound);
      }
    }
    free(buf);
  }
  return t_done();
}
