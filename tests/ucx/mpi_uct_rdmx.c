/* Guest test of the Open MPI hook (plugin/ucx/hook): run under mpirun with pml ucx, each rank
 * asks UCX's public API, after MPI_Init, which UCT components this process has. With
 * mca_hook_rdmx.so on Open MPI's component path, Open MPI has loaded libuct_rdmx.so and rdmx is
 * one of them; without it, it is not (the module is not in UCX 1.13's list of modules). Rank 0
 * prints every rank's list and "PASS mpi_uct_rdmx (np N)" when every rank has rdmx, else a FAIL
 * line naming the ranks without it, and every rank exits 1. The ranks' verdicts travel over the
 * job's own pml ucx. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uct/api/uct.h>

enum { kNamesMax = 256 };

/* This process's UCT component names, space-separated, into names. Returns 1 when rdmx is one of
 * them, 0 when not, -1 when UCT cannot say. */
static int find_rdmx(char names[kNamesMax]) {
  uct_component_h* components;
  unsigned n;
  int found = 0;
  names[0] = '\0';
  if (uct_query_components(&components, &n) != UCS_OK) {
    return -1;
  }
  for (unsigned i = 0; i < n; ++i) {
    uct_component_attr_t attr = {.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME};
    if (uct_component_query(components[i], &attr) != UCS_OK) {
      found = -1;
      break;
    }
    size_t len = strlen(names);
    snprintf(names + len, kNamesMax - len, "%s%s", len > 0 ? " " : "", attr.name);
    if (strcmp(attr.name, "rdmx") == 0 && found == 0) {
      found = 1;
    }
  }
  uct_release_component_list(components);
  return found;
}

int main(int argc, char** argv) {
  int rank, size;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  char names[kNamesMax];
  int found = find_rdmx(names);
  /* Only rank 0 reads them: one list and one verdict per rank. */
  char(*all_names)[kNamesMax] = malloc((size_t)size * kNamesMax);
  int* all_found = malloc((size_t)size * sizeof(int));
  if (all_names == NULL || all_found == NULL) {
    fprintf(stderr, "mpi_uct_rdmx: malloc failed\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Gather(names, kNamesMax, MPI_CHAR, all_names, kNamesMax, MPI_CHAR, 0, MPI_COMM_WORLD);
  MPI_Gather(&found, 1, MPI_INT, all_found, 1, MPI_INT, 0, MPI_COMM_WORLD);

  int ok = 1;
  if (rank == 0) {
    char missing[512] = "";
    for (int r = 0; r < size; ++r) {
      printf("rank %d: UCT components: %s%s\n", r, all_names[r],
             all_found[r] < 0 ? " (query failed)" : "");
      if (all_found[r] != 1) {
        size_t len = strlen(missing);
        snprintf(missing + len, sizeof(missing) - len, " %d", r);
        ok = 0;
      }
    }
    if (ok) {
      printf("PASS mpi_uct_rdmx (np %d)\n", size);
    } else {
      printf("FAIL mpi_uct_rdmx: no UCT component rdmx on rank(s)%s\n", missing);
    }
    fflush(stdout);
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  free(all_found);
  free(all_names);
  MPI_Finalize();
  return ok ? 0 : 1;
}
