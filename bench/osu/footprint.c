/*
 * mpi_footprint: what one MPI process costs per connected peer, for the demo's scale figures.
 * Every rank exchanges a small (8 B) and a medium (512 B) message with every other rank, so
 * that every connection any stack makes lazily exists; then, while all of them are alive, each
 * rank reads its resident memory (/proc/self/status) and rank 0 asks the kernel for the verbs
 * objects of every rank's pid (`rdma resource show qp` and `... mr`: QPs and registered bytes).
 * Output (rank 0): one row per rank, then `# summary` with the per-process maximum and mean.
 * Works over any pml/mtl; a stack without verbs shows 0 QPs.
 *
 * The rdma tool runs through posix_spawn (vfork semantics: no copy of the registered pages).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "osu_common.h"

extern char** environ;

typedef struct {
  long pid;
  long rss_kb;
  long hwm_kb;
  long qps;
  long mrs;
  long mr_bytes;
} proc_t;

static long status_kb(const char* key) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  const size_t n = strlen(key);
  if (f == NULL) {
    return -1;
  }
  while (fgets(line, sizeof(line), f) != NULL) {
    if (strncmp(line, key, n) == 0 && line[n] == ':') {
      v = strtol(line + n + 1, NULL, 10);
      break;
    }
  }
  fclose(f);
  return v;
}

/* Runs `rdma resource show WHAT` into path; 0 on success. */
static int rdma_show(const char* what, const char* path) {
  posix_spawn_file_actions_t fa;
  char* argv[] = {"rdma", "resource", "show", (char*)what, NULL};
  pid_t pid;
  int st = 0, rc;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  rc = posix_spawnp(&pid, "rdma", &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    fprintf(stderr, "mpi_footprint: cannot run rdma (iproute2): %s\n", strerror(rc));
    return -1;
  }
  if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "mpi_footprint: `rdma resource show %s` failed\n", what);
    return -1;
  }
  return 0;
}

/* Value of the token after `key` in a line of rdma's output, or -1. */
static long token(const char* line, const char* key) {
  const size_t n = strlen(key);
  const char* p = line;
  while ((p = strstr(p, key)) != NULL) {
    if ((p == line || p[-1] == ' ') && p[n] == ' ') {
      return strtol(p + n + 1, NULL, 10);
    }
    p += n;
  }
  return -1;
}

static void count_objects(proc_t* procs, int np, const char* what, const char* path) {
  FILE* f;
  char line[512];
  if (rdma_show(what, path) != 0 || (f = fopen(path, "r")) == NULL) {
    return;
  }
  while (fgets(line, sizeof(line), f) != NULL) {
    const long pid = token(line, "pid");
    int r;
    for (r = 0; r < np; ++r) {
      if (procs[r].pid == pid) {
        if (what[0] == 'q') {
          procs[r].qps++;
        } else {
          const long len = token(line, "mrlen");
          procs[r].mrs++;
          procs[r].mr_bytes += len > 0 ? len : 0;
        }
      }
    }
  }
  fclose(f);
}

int main(int argc, char** argv) {
  osu_opts_t o;
  proc_t me, *all = NULL;
  char *sbuf, *rbuf;
  MPI_Request* reqs;
  int p, n = 0, round;
  MPI_Init(&argc, &argv);
  osu_defaults(&o, "mpi_footprint", "Footprint per process with every peer connected", 1);
  o.timeout_s = 300;
  /* Any np >= 2: the pair rule of osu_setup does not apply here. */
  MPI_Comm_size(MPI_COMM_WORLD, &o.size);
  if (osu_setup(&o, argc, argv, o.size >= 2 ? o.size : 2) != 0) {
    MPI_Finalize();
    return 1;
  }
  osu_arm(&o, 512, "all-pairs exchange");
  sbuf = osu_alloc(512 * (size_t)o.size);
  rbuf = osu_alloc(512 * (size_t)o.size);
  reqs = calloc(2 * (size_t)o.size, sizeof(*reqs));
  if (reqs == NULL) {
    osu_die("calloc", MPI_ERR_NO_MEM, __FILE__, __LINE__);
  }
  for (round = 0; round < 2; ++round) {
    const int len = round == 0 ? 8 : 512;
    n = 0;
    for (p = 0; p < o.size; ++p) {
      if (p != o.rank) {
        OSU_CHECK(MPI_Irecv(rbuf + 512 * p, len, MPI_CHAR, p, 7, MPI_COMM_WORLD, &reqs[n++]));
      }
    }
    for (p = 0; p < o.size; ++p) {
      if (p != o.rank) {
        OSU_CHECK(MPI_Isend(sbuf + 512 * p, len, MPI_CHAR, p, 7, MPI_COMM_WORLD, &reqs[n++]));
      }
    }
    OSU_CHECK(MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE));
  }
  OSU_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  osu_arm(&o, 0, "sampling");
  memset(&me, 0, sizeof(me));
  me.pid = (long)getpid();
  me.rss_kb = status_kb("VmRSS");
  me.hwm_kb = status_kb("VmHWM");
  if (o.rank == 0) {
    all = calloc((size_t)o.size, sizeof(*all));
    if (all == NULL) {
      osu_die("calloc", MPI_ERR_NO_MEM, __FILE__, __LINE__);
    }
  }
  OSU_CHECK(MPI_Gather(&me, (int)(sizeof(me) / sizeof(long)), MPI_LONG, all,
                       (int)(sizeof(me) / sizeof(long)), MPI_LONG, 0, MPI_COMM_WORLD));
  if (o.rank == 0) {
    char path[64];
    long qmax = 0, mmax = 0, rmax = 0;
    double qsum = 0, msum = 0, rsum = 0;
    int r;
    snprintf(path, sizeof(path), "/tmp/mpi_footprint.%ld", me.pid);
    count_objects(all, o.size, "qp", path);
    count_objects(all, o.size, "mr", path);
    unlink(path);
    printf("%-6s%10s%8s%8s%14s%12s%12s\n", "# rank", "pid", "QPs", "MRs", "MR bytes", "RSS kB",
           "HWM kB");
    for (r = 0; r < o.size; ++r) {
      const proc_t* x = &all[r];
      printf("%-6d%10ld%8ld%8ld%14ld%12ld%12ld\n", r, x->pid, x->qps, x->mrs, x->mr_bytes,
             x->rss_kb, x->hwm_kb);
      qmax = x->qps > qmax ? x->qps : qmax;
      mmax = x->mr_bytes > mmax ? x->mr_bytes : mmax;
      rmax = x->rss_kb > rmax ? x->rss_kb : rmax;
      qsum += (double)x->qps;
      msum += (double)x->mr_bytes;
      rsum += (double)x->rss_kb;
    }
    printf(
        "# summary np %d qps_max %ld qps_mean %.1f mr_bytes_max %ld mr_bytes_mean %.0f "
        "rss_kb_max %ld rss_kb_mean %.0f\n",
        o.size, qmax, qsum / o.size, mmax, msum / o.size, rmax, rsum / o.size);
    fflush(stdout);
    free(all);
  }
  OSU_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  osu_disarm();
  free(reqs);
  MPI_Finalize();
  return 0;
}
