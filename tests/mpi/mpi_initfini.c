/*
 * One init/finalize cycle. With RDMX_INITFINI_CHECK=1 it also checks that this process leaves
 * no verbs object behind: it counts its own objects (`rdma -j resource show KIND`, entries with
 * its pid) after traffic with every peer (must be > 0: the count sees rdmx's objects) and after
 * MPI_Finalize (must be 0: the process had none before MPI_Init). Each count starts `rdma` six
 * times (~0.4 s under TCG), so mpi_init_loop.sh asks for it on the first and last cycles only.
 * Prints "PASS mpi_initfini (np N)" from rank 0; a leak prints the kinds and exits 1.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char* const kinds[] = {"ctx", "pd", "cq", "qp", "srq", "mr"};
#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))

/* Entries of `rdma -j resource show KIND` owned by this process; -1 if rdma cannot tell. */
static long count_own(const char* kind) {
  char cmd[128];
  char key[48];
  char* text = NULL;
  size_t len = 0;
  size_t cap = 0;
  long n = 0;
  const char* p;
  FILE* f;
  snprintf(cmd, sizeof(cmd), "rdma -j resource show %s 2>/dev/null", kind);
  f = popen(cmd, "r");
  if (f == NULL) {
    return -1;
  }
  for (;;) {
    if (len + 4096 + 1 > cap) {
      char* t = realloc(text, cap = 2 * cap + 8192);
      if (t == NULL) {
        free(text);
        pclose(f);
        return -1;
      }
      text = t;
    }
    const size_t got = fread(text + len, 1, 4096, f);
    if (got == 0) {
      break;
    }
    len += got;
  }
  if (pclose(f) != 0 || text == NULL) {
    free(text);
    return -1;
  }
  text[len] = '\0';
  snprintf(key, sizeof(key), "\"pid\":%ld,", (long)getpid());
  for (p = text; (p = strstr(p, key)) != NULL; p += strlen(key)) {
    ++n;
  }
  snprintf(key, sizeof(key), "\"pid\":%ld}", (long)getpid());
  for (p = text; (p = strstr(p, key)) != NULL; p += strlen(key)) {
    ++n;
  }
  free(text);
  return n;
}

static void count_all(long* out) {
  size_t i;
  for (i = 0; i < NKINDS; ++i) {
    out[i] = count_own(kinds[i]);
  }
}

int main(int argc, char** argv) {
  long during[NKINDS], after[NKINDS];
  long live = 0;
  int rank, size, i, bad = 0;
  size_t k;
  const char* env = getenv("RDMX_INITFINI_CHECK");
  const int check = env != NULL && strcmp(env, "1") == 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  /* Traffic with every peer, so every endpoint exists. */
  for (i = 1; i < size; ++i) {
    const int to = (rank + i) % size;
    const int from = (rank - i + size) % size;
    int got = -1;
    MPI_Sendrecv(&rank, 1, MPI_INT, to, 7, &got, 1, MPI_INT, from, 7, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    if (got != from) {
      fprintf(stderr, "mpi_initfini rank %d: got %d from %d\n", rank, got, from);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  if (check) {
    count_all(during);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  if (check) {
    count_all(after);
    for (k = 0; k < NKINDS; ++k) {
      if (during[k] < 0 || after[k] < 0) {
        fprintf(stderr, "mpi_initfini rank %d: `rdma -j resource show %s` failed\n", rank,
                kinds[k]);
        bad = 1;
        continue;
      }
      live += during[k];
      if (after[k] != 0) {
        fprintf(stderr,
                "mpi_initfini rank %d: leaked %s: %ld while running, %ld after MPI_Finalize\n",
                rank, kinds[k], during[k], after[k]);
        bad = 1;
      }
    }
    if (!bad && live <= 0) {
      fprintf(stderr,
              "mpi_initfini rank %d: no verbs object of this process seen while running: the "
              "count cannot see rdmx's objects\n",
              rank);
      bad = 1;
    }
  }
  if (!bad && rank == 0) {
    printf("PASS mpi_initfini (np %d)%s\n", size, check ? ", no verbs object left" : "");
  }
  return bad;
}
