/*
 * rdmx's counters (include/rdmx/stats.def) for users: MPI_T performance variables
 * mtl_rdmx_<name>, and the opt-in "mtl rdmx stats:" line at finalize.
 *
 * The variables are continuous and read-only, and bound to no MPI object: each read asks the
 * worker for its counters under the module lock. Counters read as what has happened since the
 * MPI_T handle was made (Open MPI subtracts the value at MPI_T_pvar_handle_alloc); levels read as
 * they are now. The worker lives from MPI_Init to MPI_Finalize; should a read come outside it,
 * every variable reads 0.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mtl_rdmx.h"
#include "opal/mca/base/mca_base_pvar.h"
#include "opal/util/proc.h"

#define MTL_RDMX_PVAR_CLASS_COUNTER MCA_BASE_PVAR_CLASS_COUNTER
#define MTL_RDMX_PVAR_CLASS_LEVEL MCA_BASE_PVAR_CLASS_LEVEL

static int read_counter(const struct mca_base_pvar_t* pvar, void* value, void* obj) {
  rdmx_stats_t st;
  const size_t offset = (size_t)(uintptr_t)pvar->ctx;
  (void)obj;
  memset(&st, 0, sizeof(st));
  OPAL_THREAD_LOCK(&ompi_mtl_rdmx.lock);
  if (NULL != ompi_mtl_rdmx.worker) {
    (void)rdmx_worker_stats(ompi_mtl_rdmx.worker, &st);
  }
  OPAL_THREAD_UNLOCK(&ompi_mtl_rdmx.lock);
  memcpy(value, (const char*)&st + offset, sizeof(uint64_t));
  return OPAL_SUCCESS;
}

void ompi_mtl_rdmx_register_pvars(void) {
  /* unsigned long long is uint64_t on every target rdmx builds for (LP64 Linux). */
  _Static_assert(sizeof(unsigned long long) == sizeof(uint64_t), "pvar type");
#define RDMX_STAT(name, kind, help)                                                        \
  (void)mca_base_component_pvar_register(                                                  \
      &mca_mtl_rdmx_component.mtl_version, #name, help, OPAL_INFO_LVL_4,                   \
      MTL_RDMX_PVAR_CLASS_##kind, MCA_BASE_VAR_TYPE_UNSIGNED_LONG_LONG, NULL,              \
      MCA_BASE_VAR_BIND_NO_OBJECT,                                                         \
      (mca_base_pvar_flag_t)(MCA_BASE_PVAR_FLAG_READONLY | MCA_BASE_PVAR_FLAG_CONTINUOUS), \
      read_counter, NULL, NULL, (void*)(uintptr_t)offsetof(rdmx_stats_t, name));
#include "rdmx/stats.def"
#undef RDMX_STAT
}

void ompi_mtl_rdmx_print_stats(void) {
  const char* env = getenv("RDMX_STATS");
  rdmx_stats_t st;
  if (!ompi_mtl_rdmx_params.print_stats && (NULL == env || 0 != strcmp(env, "1"))) {
    return;
  }
  if (NULL == ompi_mtl_rdmx.worker || RDMX_OK != rdmx_worker_stats(ompi_mtl_rdmx.worker, &st)) {
    return;
  }
  /* One line per process, one write: lines of different ranks do not interleave. */
  char line[4096];
  int n =
      snprintf(line, sizeof(line), "mtl rdmx stats: rank %u transport %s",
               (unsigned)OPAL_PROC_MY_NAME.vpid, RDMX_TRANSPORT_UD == st.transport ? "ud" : "rc");
#define RDMX_STAT(name, kind, help)                                      \
  if (n > 0 && (size_t)n < sizeof(line)) {                               \
    n += snprintf(line + n, sizeof(line) - (size_t)n, " " #name " %llu", \
                  (unsigned long long)st.name);                          \
  }
#include "rdmx/stats.def"
#undef RDMX_STAT
  fprintf(stderr, "%s\n", line);
  fflush(stderr);
}
