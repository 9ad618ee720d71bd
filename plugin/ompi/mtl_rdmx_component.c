/*
 * The MCA component: parameters, selection and init (configuration, worker, address publication).
 *
 * Configuration precedence, lowest first (README.md "Parameters"):
 *   1. rdmx's defaults (rdmx_config_init), which are also the MCA parameters' defaults;
 *   2. RDMX_* environment variables (rdmx_config_from_env);
 *   3. every mtl_rdmx_* MCA parameter that was set explicitly (--mca, OMPI_MCA_mtl_rdmx_*, a
 *      parameter file): its source is not "default".
 * uid and expected_peers are always the plugin's: the process's name and the job size.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mtl_rdmx.h"
#include "mtl_rdmx_tag.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/mca/base/mca_base_var_enum.h"
#include "opal/mca/pmix/pmix.h"
#include "opal/runtime/opal_progress.h"
#include "opal/util/output.h"
#include "opal/util/proc.h"

#ifndef RDMX_COMPONENT_VERSION_MAJOR
#define RDMX_COMPONENT_VERSION_MAJOR 0
#define RDMX_COMPONENT_VERSION_MINOR 0
#define RDMX_COMPONENT_VERSION_PATCH 0
#endif

static int component_register(void);
static int component_open(void);
static int component_close(void);
static int component_query(mca_base_module_t** module, int* priority);
static mca_mtl_base_module_t* component_init(bool enable_progress_threads, bool enable_mpi_threads);

__attribute__((visibility("default"))) mca_mtl_base_component_2_0_0_t mca_mtl_rdmx_component = {
    .mtl_version =
        {
            MCA_MTL_BASE_VERSION_2_0_0,
            .mca_component_name = "rdmx",
            MCA_BASE_MAKE_VERSION(component, RDMX_COMPONENT_VERSION_MAJOR,
                                  RDMX_COMPONENT_VERSION_MINOR, RDMX_COMPONENT_VERSION_PATCH),
            .mca_open_component = component_open,
            .mca_close_component = component_close,
            .mca_query_component = component_query,
            .mca_register_component_params = component_register,
        },
    .mtl_data = {MCA_BASE_METADATA_PARAM_NONE},
    .mtl_init = component_init,
};

mca_mtl_rdmx_params_t ompi_mtl_rdmx_params;
int ompi_mtl_rdmx_output = -1;

/* Below the psm2 (40) and ofi (25) MTLs, so installing rdmx does not take over a machine that
 * has them; `--mca mtl rdmx` selects it whatever its priority. */
#define MTL_RDMX_DEFAULT_PRIORITY 20

/* An 8-byte osu_latency's user-space time between two posts (bench/doorbell_split.c) in the
 * Soft-RoCE guest, same-boot rounds: ~9.0 us with 1 poll per call, ~7.8 with 4 on every call
 * (8 did no better), 6.4-7.3 with 32 or 100 on wait-loop turns only (4 of them: 7.3-8.2);
 * osu_bw 8 B to 4 MiB did not move. 32 rather than pml ucx's 100 lets opal_progress's other
 * work run more often. */
#define MTL_RDMX_DEFAULT_PROGRESS_POLLS 32
/* Off by default (single-threaded; threads have their own below): hpcc np 4 (4 ranks on 2 vCPUs)
 * ran 111-113 s against pml ucx 99-101 s with 100, where it had been level without; the osu_bw
 * gain with 100 was ~1 %. Opt in with a value >= 0. */
#define MTL_RDMX_DEFAULT_YIELD_AFTER_US (-1)
/* Under MPI_THREAD_MULTIPLE, Open MPI's waits (pml cm's, as ob1's) let one thread progress and
 * park the others on condition variables; a completion wakes its thread, which then needs a CPU
 * the progressing thread spins on. Soft-RoCE guest, np 2, 2 threads per rank, same-boot rounds:
 * osu_latency_mt 8 B 155-521 us with 20 against 1018-2003 without (pml ucx 134-462), the rate
 * 3x; 100 and 300 were erratic (plugin/ompi/README.md, "Progress"). 20 us is longer than a round
 * trip on a real fabric, so its latency never meets the system call. */
#define MTL_RDMX_DEFAULT_THREADS_YIELD_AFTER_US 20
/* Yields were not enough with more threads than CPUs: a woken thread could still wait ms for the
 * CPU behind the progressing one. Soft-RoCE guest, np 2, 8 B, ci/bench-mt --base (the MTL
 * without naps) in two boots (3 and 2 rounds, medians): osu_mbw_mt 2 threads 7.3x / 4.2x the
 * rate, 4 threads 4.4x / 3.1x; osu_latency_mt 4 threads 17.2 -> 0.9 ms / 14.3 -> 1.6 ms (pml ucx
 * 12.2 / 8.1 ms); 1 thread 0.99x / 0.86x the rate (its rounds spread 152-235 k). Naps after
 * 100 us did about as well at 4 threads and worse at 2. A nap comes only after 1 ms of a wait
 * loop's idle turns and lasts 1/32 of the idle time (at least 50 us): no round trip meets one. */
#define MTL_RDMX_DEFAULT_THREADS_NAP_AFTER_US 1000

/* The mtl_rdmx_* parameters that mirror an rdmx setting (transport/settings.def), in its order
 * (the order ompi_info lists them in). */
enum {
#define RDMX_SETTING(field, env, mca, kind, lo, hi, level, help) MTL_RDMX_IF_MCA_##mca(P_##field, )
#include "transport/settings.def"
#undef RDMX_SETTING
  P_COUNT
};

/* One row per parameter: its name (mtl_rdmx_NAME), the RDMX_* variable it overrides, the
 * ompi_info description, type, level and storage. P_transport also gets an enumerator. */
typedef struct {
  const char* name;
  const char* env;
  const char* description;
  mca_base_var_type_t type;
  mca_base_var_info_lvl_t level;
  void* storage;
} param_t;

#define MTL_RDMX_VAR_TYPE_INT MCA_BASE_VAR_TYPE_INT
#define MTL_RDMX_VAR_TYPE_U32 MCA_BASE_VAR_TYPE_UNSIGNED_INT
#define MTL_RDMX_VAR_TYPE_SIZE32 MCA_BASE_VAR_TYPE_UNSIGNED_INT
#define MTL_RDMX_VAR_TYPE_SIZE MCA_BASE_VAR_TYPE_SIZE_T
#define MTL_RDMX_VAR_TYPE_STRING MCA_BASE_VAR_TYPE_STRING
#define MTL_RDMX_VAR_TYPE_TRANSPORT MCA_BASE_VAR_TYPE_INT
static const param_t params[P_COUNT] = {
#define RDMX_SETTING(field, env, mca, kind, lo, hi, level, help)                                 \
  MTL_RDMX_IF_MCA_##mca([P_##field] = {#field, env, help " (" env ")", MTL_RDMX_VAR_TYPE_##kind, \
                                       OPAL_INFO_LVL_##level, &ompi_mtl_rdmx_params.field}, )
#include "transport/settings.def"
#undef RDMX_SETTING
};
static int param_index[P_COUNT];

static const mca_base_var_enum_value_t transport_values[] = {
    {RDMX_TRANSPORT_AUTO, "auto"}, {RDMX_TRANSPORT_RC, "rc"}, {RDMX_TRANSPORT_UD, "ud"}, {0, NULL}};

static const char* transport_name(int t) {
  return t == RDMX_TRANSPORT_RC ? "rc" : t == RDMX_TRANSPORT_UD ? "ud" : "auto";
}

static void reg(int which, mca_base_var_enum_t* enumerator) {
  const param_t* q = &params[which];
  param_index[which] = mca_base_component_var_register(
      &mca_mtl_rdmx_component.mtl_version, q->name, q->description, q->type, enumerator, 0,
      (mca_base_var_flag_t)0, q->level, MCA_BASE_VAR_SCOPE_READONLY, q->storage);
}

/* One of the MTL's own parameters (not an rdmx setting): read-only, like the others. */
static void reg_own(const char* name, const char* help, mca_base_var_type_t type,
                    mca_base_var_info_lvl_t level, void* storage) {
  (void)mca_base_component_var_register(&mca_mtl_rdmx_component.mtl_version, name, help, type, NULL,
                                        0, (mca_base_var_flag_t)0, level,
                                        MCA_BASE_VAR_SCOPE_READONLY, storage);
}

static int component_register(void) {
  rdmx_config_t d;
  mca_base_var_enum_t* transport_enum = NULL;
  mca_mtl_rdmx_params_t* p = &ompi_mtl_rdmx_params;

  /* The defaults shown by ompi_info are rdmx's own. */
  rdmx_config_init(&d);
  p->priority = MTL_RDMX_DEFAULT_PRIORITY;
#define RDMX_SETTING(field, env, mca, kind, lo, hi, level, help) \
  MTL_RDMX_IF_MCA_##mca(p->field = (MTL_RDMX_CTYPE_##kind)d.field;)
#include "transport/settings.def"
#undef RDMX_SETTING

  reg_own("priority",
          "Priority of the rdmx MTL among MTLs (the highest available is selected; --mca mtl rdmx "
          "selects rdmx whatever its priority)",
          MCA_BASE_VAR_TYPE_INT, OPAL_INFO_LVL_9, &p->priority);
  for (int which = 0; which < P_COUNT; ++which) {
    if (which != P_transport) {
      reg(which, NULL);
    } else if (OPAL_SUCCESS ==
               mca_base_var_enum_create("mtl_rdmx_transport", transport_values, &transport_enum)) {
      reg(which, transport_enum);
      OBJ_RELEASE(transport_enum);
    } else {
      param_index[which] = -1; /* not registered: never "explicitly set" */
    }
  }
  p->print_stats = 0;
  reg_own(
      "print_stats",
      "At MPI_Finalize, before the endpoints go, print one line per process on stderr with rdmx's "
      "counters: 'mtl rdmx stats: rank R transport rc|ud NAME N ...', every counter that is also "
      "a performance variable mtl_rdmx_NAME, in the same order (also RDMX_STATS=1)",
      MCA_BASE_VAR_TYPE_INT, OPAL_INFO_LVL_9, &p->print_stats);
  p->progress_polls = MTL_RDMX_DEFAULT_PROGRESS_POLLS;
  reg_own("progress_polls",
      "Times a progress call polls rdmx while it finds nothing (at least 1) when it follows an "
      "idle one by under " MTL_RDMX_STR(MTL_RDMX_SPIN_GAP_US) " us, i.e. is a turn of a wait "
      "loop: pml cm waits by calling opal_progress, which around each call runs Open MPI's "
      "other progress work and every 8th "
      "call reads the clock, so polling here notices a message sooner. Other calls (an MPI_Test "
      "between compute steps) poll once, and so does every call when Open MPI yields when idle "
      "(oversubscribed) or threads are in use (MPI_THREAD_MULTIPLE)",
          MCA_BASE_VAR_TYPE_UNSIGNED_INT, OPAL_INFO_LVL_6, &p->progress_polls);
  p->yield_after_us = MTL_RDMX_DEFAULT_YIELD_AFTER_US;
  reg_own("yield_after_us",
          "Microseconds of progress calls finding nothing after which each further idle call "
          "yields the CPU (sched_yield), as rdmx's own wait does; -1: never. On a software device "
          "(rxe, siw) the kernel does the RDMA work on the CPUs the ranks spin on; with nothing "
          "else to run a yield returns at once. Not under MPI_THREAD_MULTIPLE, where "
          "threads_yield_after_us applies",
          MCA_BASE_VAR_TYPE_INT, OPAL_INFO_LVL_6, &p->yield_after_us);
  p->threads_yield_after_us = MTL_RDMX_DEFAULT_THREADS_YIELD_AFTER_US;
  reg_own("threads_yield_after_us",
          "Under MPI_THREAD_MULTIPLE, yield_after_us's replacement: Open MPI's "
          "waits let one thread progress while the others sleep until a completion wakes them, and "
          "a woken thread needs the CPU the progressing one spins on; -1: never",
          MCA_BASE_VAR_TYPE_INT, OPAL_INFO_LVL_6, &p->threads_yield_after_us);
  p->threads_nap_after_us = MTL_RDMX_DEFAULT_THREADS_NAP_AFTER_US;
  reg_own(
      "threads_nap_after_us",
      "Under MPI_THREAD_MULTIPLE, microseconds of progress calls finding nothing after which "
      "each further idle call sleeps instead of yielding, for 1/32 of the time idle so far "
      "(50 us to 1 ms): a thread Open MPI woke gets the CPU at once, where a yield may leave it "
      "queued behind the progressing thread for milliseconds. Counted from the same start as "
      "threads_yield_after_us, and only past it (so threads_yield_after_us -1 turns it off "
      "too); -1: never",
      MCA_BASE_VAR_TYPE_INT, OPAL_INFO_LVL_6, &p->threads_nap_after_us);
  ompi_mtl_rdmx_register_pvars();
  return OMPI_SUCCESS;
}

/* Explicitly set: on the command line, in the environment as OMPI_MCA_mtl_rdmx_*, in a file. */
static bool mca_explicit(int which, mca_base_var_source_t* source) {
  mca_base_var_source_t s = MCA_BASE_VAR_SOURCE_DEFAULT;
  if (param_index[which] < 0 ||
      OPAL_SUCCESS != mca_base_var_get_value(param_index[which], NULL, &s, NULL)) {
    return false;
  }
  if (source != NULL) {
    *source = s;
  }
  return s != MCA_BASE_VAR_SOURCE_DEFAULT;
}

static int env_verbose(void) {
  const char* v = getenv("RDMX_VERBOSE");
  return (v != NULL && *v != '\0') ? atoi(v) : 0;
}

static int component_open(void) {
  int verbose = ompi_mtl_rdmx_params.verbose;
  /* An explicit mtl_rdmx_verbose wins, as for every parameter; else RDMX_VERBOSE. */
  if (!mca_explicit(P_verbose, NULL) && env_verbose() > verbose) {
    verbose = env_verbose();
  }
  ompi_mtl_rdmx_output = opal_output_open(NULL);
  opal_output_set_verbosity(ompi_mtl_rdmx_output, verbose);
  OBJ_CONSTRUCT(&ompi_mtl_rdmx.lock, opal_mutex_t);
  return OMPI_SUCCESS;
}

static int component_close(void) {
  OBJ_DESTRUCT(&ompi_mtl_rdmx.lock);
  if (ompi_mtl_rdmx_output >= 0) {
    opal_output_close(ompi_mtl_rdmx_output);
    ompi_mtl_rdmx_output = -1;
  }
  return OMPI_SUCCESS;
}

static int component_query(mca_base_module_t** module, int* priority) {
  *priority = ompi_mtl_rdmx_params.priority;
  *module = (mca_base_module_t*)&ompi_mtl_rdmx.super;
  return OMPI_SUCCESS;
}

static const char* source_name(mca_base_var_source_t s) {
  switch (s) {
    case MCA_BASE_VAR_SOURCE_COMMAND_LINE:
      return "command line";
    case MCA_BASE_VAR_SOURCE_ENV:
      return "--mca or OMPI_MCA_mtl_rdmx_*"; /* mpirun hands --mca on as OMPI_MCA_ variables */
    case MCA_BASE_VAR_SOURCE_FILE:
      return "parameter file";
    default:
      return "set";
  }
}

/* Where a parameter's value came from, for the verbose report. */
static const char* origin(int which, char* buf, size_t len) {
  mca_base_var_source_t s;
  const char* e;
  if (mca_explicit(which, &s)) {
    snprintf(buf, len, "mtl_rdmx_%s, %s", params[which].name, source_name(s));
  } else if ((e = getenv(params[which].env)) != NULL && *e != '\0') {
    snprintf(buf, len, "%s", params[which].env);
  } else {
    snprintf(buf, len, "default");
  }
  return buf;
}

/* Step 3 of the precedence: explicit MCA values over RDMX_* and defaults. */
static void apply_mca(rdmx_config_t* c) {
  const mca_mtl_rdmx_params_t* p = &ompi_mtl_rdmx_params;
#define RDMX_SETTING(field, env, mca, kind, lo, hi, level, help) \
  MTL_RDMX_IF_MCA_##mca(                                         \
      if (mca_explicit(P_##field, NULL)) { c->field = (__typeof__(c->field))p->field; })
#include "transport/settings.def"
#undef RDMX_SETTING
  /* An explicit empty device is "the first device with an active port". */
  if (NULL != c->device && '\0' == *c->device) {
    c->device = NULL;
  }
}

/* Processes in this job, from PMIx (works for mpirun and direct launch), else mpirun's
 * OMPI_COMM_WORLD_SIZE; 0 when unknown. */
static uint32_t job_size(void) {
  uint32_t size = 0;
  uint32_t* ptr = &size;
  int rc;
  opal_process_name_t wildcard = OPAL_PROC_MY_NAME;
  const char* env;
  wildcard.vpid = OPAL_VPID_WILDCARD;
  OPAL_MODEX_RECV_VALUE_OPTIONAL(rc, OPAL_PMIX_JOB_SIZE, &wildcard, &ptr, OPAL_UINT32);
  if (OPAL_SUCCESS == rc && size > 0) {
    return size;
  }
  env = getenv("OMPI_COMM_WORLD_SIZE");
  return (env != NULL) ? (uint32_t)strtoul(env, NULL, 10) : 0;
}

/* Worker creation failed: say what was asked for (and where each value came from) and what to
 * set. MTL selection has no fallback, so this is the message the user sees. rdmx printed the
 * device it tried and the exact cause just before ("rdmx: worker creation failed ..."). */
static void report_open_failure(const rdmx_config_t* c, int code) {
  char dev[160];
  char port[96];
  char gid[96];
  char o[3][96];
  const char* why;
  if (c->device != NULL) {
    snprintf(dev, sizeof(dev), "RDMA device '%s' [%s]", c->device, origin(P_device, o[0], 96));
  } else {
    snprintf(dev, sizeof(dev), "the first RDMA device with an active port [%s]",
             origin(P_device, o[0], 96));
  }
  if (c->port > 0) {
    snprintf(port, sizeof(port), "port %d [%s]", c->port, origin(P_port, o[1], 96));
  } else {
    snprintf(port, sizeof(port), "its first active port [%s]", origin(P_port, o[1], 96));
  }
  if (c->gid_index >= 0) {
    snprintf(gid, sizeof(gid), "GID index %d [%s]", c->gid_index, origin(P_gid_index, o[2], 96));
  } else {
    snprintf(gid, sizeof(gid), "the RoCE v2 IPv4 GID [%s]", origin(P_gid_index, o[2], 96));
  }
  switch (code) {
    case RDMX_ERR_NO_DEVICE:
      why = "the device, port or GID does not exist or is not usable";
      break;
    case RDMX_ERR_UNSUPPORTED:
    case RDMX_ERR_IO:
      why = "the device refused a query or a setting";
      break;
    case RDMX_ERR_NO_MEMORY:
      why = "out of memory: usually the locked-memory limit (ulimit -l unlimited)";
      break;
    case RDMX_ERR_INVALID_PARAM:
      why = "a configuration value is invalid";
      break;
    default:
      why = rdmx_strerror(code);
      break;
  }
  opal_output(0,
              "mtl rdmx: cannot open %s, %s, %s on %s: %s; rdmx's line above names the device "
              "and the cause.\n"
              "  Set mtl_rdmx_device (--mca mtl_rdmx_device NAME, or RDMX_DEVICE=NAME) to a "
              "device with an active port (ibv_devices, ibv_devinfo), mtl_rdmx_port (RDMX_PORT) "
              "to one of its active ports or 0 for the first active one and, on RoCE, "
              "mtl_rdmx_gid_index (RDMX_GID_INDEX) to a RoCE v2 GID or -1 to find it (see "
              "/sys/class/infiniband/DEV/ports/PORT/gids and gid_attrs/types).\n"
              "  The rdmx MTL is not usable in this process and Open MPI does not fall back to "
              "another MTL: fix the setting, or run with another PML (e.g. --mca pml ob1).",
              dev, port, gid, OPAL_PROC_MY_HOSTNAME != NULL ? OPAL_PROC_MY_HOSTNAME : "this host",
              why);
}

static void report_choices(const rdmx_config_t* c, uint32_t nprocs) {
  rdmx_stats_t st;
  char o[4][96];
  const char* chosen = "?";
  char why[192];
  if (RDMX_OK == rdmx_worker_stats(ompi_mtl_rdmx.worker, &st)) {
    chosen = transport_name((int)st.transport);
  }
  if (c->transport == RDMX_TRANSPORT_AUTO) {
    snprintf(why, sizeof(why), "auto [%s]: %u peers %s auto_ud_peers %u [%s]",
             origin(P_transport, o[0], sizeof(o[0])), c->expected_peers,
             c->expected_peers >= c->auto_ud_peers ? ">=" : "<", c->auto_ud_peers,
             origin(P_auto_ud_peers, o[1], sizeof(o[1])));
  } else {
    snprintf(why, sizeof(why), "asked for [%s]", origin(P_transport, o[0], sizeof(o[0])));
  }
  opal_output_verbose(1, ompi_mtl_rdmx_output,
                      "mtl rdmx: rank %u of %u, uid %016llx; values [from where]; precedence: "
                      "explicit mtl_rdmx_* > RDMX_* > default",
                      (unsigned)OPAL_PROC_MY_NAME.vpid, nprocs, (unsigned long long)c->uid);
  opal_output_verbose(1, ompi_mtl_rdmx_output,
                      "mtl rdmx: device %s [%s], port %d [%s], gid index %d [%s] (the rdmx line "
                      "above shows what was found on the device)",
                      c->device != NULL ? c->device : "(first with an active port)",
                      origin(P_device, o[0], 96), c->port, origin(P_port, o[1], 96), c->gid_index,
                      origin(P_gid_index, o[2], 96));
  opal_output_verbose(1, ompi_mtl_rdmx_output, "mtl rdmx: transport %s: %s", chosen, why);
  opal_output_verbose(1, ompi_mtl_rdmx_output,
                      "mtl rdmx: eager limit %zu [%s], rendezvous from %zu [%s], size classes "
                      "%u [%s] / %u B [%s]",
                      c->eager_limit, origin(P_eager_limit, o[0], 96), c->rndv_thresh,
                      origin(P_rndv_thresh, o[1], 96), c->small_buf_size,
                      origin(P_small_buf_size, o[2], 96), c->large_buf_size,
                      origin(P_large_buf_size, o[3], 96));
  opal_output_verbose(1, ompi_mtl_rdmx_output,
                      "mtl rdmx: eager rings (rc only) for %u peers [%s] of %u slots [%s] x %u B "
                      "[%s]",
                      c->ring_peers, origin(P_ring_peers, o[0], 96), c->ring_slots,
                      origin(P_ring_slots, o[1], 96), c->ring_slot_size,
                      origin(P_ring_slot_size, o[2], 96));
  opal_output_verbose(1, ompi_mtl_rdmx_output,
                      "mtl rdmx: srq depth %u [%s], low watermark %u [%s] (0: depth / 4)",
                      c->srq_depth, origin(P_srq_depth, o[0], 96), c->srq_low_watermark,
                      origin(P_srq_low_watermark, o[1], 96));
  const bool multi = c->thread_mode == RDMX_THREAD_MODE_MULTI;
  opal_output_verbose(1, ompi_mtl_rdmx_output,
                      "mtl rdmx: thread mode %s; idle progress yields after %d us (-1: never) "
                      "[mtl_rdmx_%syield_after_us], sleeps after %d us (-1: never) [%s]",
                      multi ? "multi" : "single", ompi_mtl_rdmx.idle_yield_us,
                      multi ? "threads_" : "",
                      ompi_mtl_rdmx.idle_yield_us < 0 ? -1 : ompi_mtl_rdmx.idle_nap_us,
                      multi ? "mtl_rdmx_threads_nap_after_us" : "never: single-threaded");
}

static mca_mtl_base_module_t* component_init(bool enable_progress_threads,
                                             bool enable_mpi_threads) {
  rdmx_config_t config;
  const void* address = NULL;
  size_t address_length = 0;
  uint32_t nprocs;
  int rc;
  (void)enable_progress_threads;

  rdmx_config_init(&config);
  if (RDMX_OK != rdmx_config_from_env(&config)) {
    opal_output(0,
                "mtl rdmx: an RDMX_* environment variable cannot be parsed (rdmx named it above); "
                "the rdmx MTL is disabled.");
    return NULL;
  }
  apply_mca(&config);
  if (opal_output_get_verbosity(ompi_mtl_rdmx_output) > config.verbose) {
    config.verbose = opal_output_get_verbosity(ompi_mtl_rdmx_output);
  }
  /* MPI_THREAD_MULTIPLE: rdmx locks its worker and gives each thread its own send context; the
   * MTL's lock then guards only the MTL's own lists (mtl_rdmx.h). Otherwise no lock at all. */
  config.thread_mode = enable_mpi_threads ? RDMX_THREAD_MODE_MULTI : RDMX_THREAD_MODE_SINGLE;
  ompi_mtl_rdmx.idle_yield_us = enable_mpi_threads ? ompi_mtl_rdmx_params.threads_yield_after_us
                                                   : ompi_mtl_rdmx_params.yield_after_us;
  ompi_mtl_rdmx.idle_nap_us = enable_mpi_threads ? ompi_mtl_rdmx_params.threads_nap_after_us : -1;
  config.uid = mtl_rdmx_uid_of(&OPAL_PROC_MY_NAME);
  if (0 == config.uid || RDMX_ANY_SOURCE == config.uid) {
    opal_output(0, "mtl rdmx: process name %s gives no usable rdmx uid; rdmx MTL disabled.",
                OPAL_NAME_PRINT(OPAL_PROC_MY_NAME));
    return NULL;
  }
  nprocs = job_size();
  config.expected_peers = nprocs > 0 ? nprocs - 1 : 0;
  /* add_procs attaches every node-local peer's segment; the last to attach removes its name. */
  config.shm_local_peers =
      opal_process_info.num_local_peers > 0 ? (uint32_t)opal_process_info.num_local_peers : 0;

  rc = rdmx_worker_create(&config, &ompi_mtl_rdmx.worker);
  if (RDMX_OK != rc) {
    ompi_mtl_rdmx.worker = NULL;
    report_open_failure(&config, rc);
    return NULL;
  }
  rc = rdmx_worker_address(ompi_mtl_rdmx.worker, &address, &address_length);
  if (RDMX_OK == rc) {
    OPAL_MODEX_SEND(rc, OPAL_PMIX_GLOBAL, &mca_mtl_rdmx_component.mtl_version, address,
                    address_length);
  }
  if (OPAL_SUCCESS != rc) {
    opal_output(0, "mtl rdmx: cannot publish the worker address (%d); rdmx MTL disabled.", rc);
    rdmx_worker_destroy(ompi_mtl_rdmx.worker);
    ompi_mtl_rdmx.worker = NULL;
    return NULL;
  }

  ompi_mtl_rdmx.done = NULL;
  ompi_mtl_rdmx.endpoints = NULL;
  /* Dead peers: fail the MPI_ANY_SOURCE receives they could have satisfied (mtl_rdmx_failure.c). */
  (void)rdmx_worker_set_peer_failure_callback(ompi_mtl_rdmx.worker, ompi_mtl_rdmx_peer_failed,
                                              NULL);
  opal_progress_register(ompi_mtl_rdmx_progress);
  report_choices(&config, nprocs);
  return &ompi_mtl_rdmx.super;
}
