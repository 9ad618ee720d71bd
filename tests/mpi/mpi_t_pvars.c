/*
 * rdmx's counters as MPI_T performance variables (MPI-3.1 section 14.3.7), as a tool reads them:
 *  1. every counter of include/rdmx/stats.def is a variable mtl_rdmx_<name>, of its class
 *     (MPI_T_PVAR_CLASS_COUNTER or _LEVEL), MPI_UNSIGNED_LONG_LONG, read-only, continuous, bound
 *     to no object;
 *  2. read in a session around known traffic, they move as that traffic says: the receiver's
 *     eager receives (SRQ or eager ring) by at least the messages sent, one rendezvous each way,
 *     the sender's rendezvous bytes by at least the message's size; counters never fall; nothing
 *     is dropped or refused; levels show the worker's memory and QPs.
 * Rank 0 sends to rank 1 and back; other ranks only read.
 */
#include "mpi_test.h"

#define EAGER_MSGS 200
#define LARGE_BYTES (1 << 20)

enum {
#define RDMX_STAT(name, kind, help) S_##name,
#include "rdmx/stats.def"
#undef RDMX_STAT
  S_COUNT
};
static const char* const stat_name[S_COUNT] = {
#define RDMX_STAT(name, kind, help) "mtl_rdmx_" #name,
#include "rdmx/stats.def"
#undef RDMX_STAT
};
#define PVAR_CLASS_COUNTER MPI_T_PVAR_CLASS_COUNTER
#define PVAR_CLASS_LEVEL MPI_T_PVAR_CLASS_LEVEL
static const int stat_class[S_COUNT] = {
#define RDMX_STAT(name, kind, help) PVAR_CLASS_##kind,
#include "rdmx/stats.def"
#undef RDMX_STAT
};

static MPI_T_pvar_session session;
static MPI_T_pvar_handle handle[S_COUNT];

/* Finds each variable by name, checks its description, and binds a handle to it. */
static void bind_all(void) {
  int num = 0, i, s, found[S_COUNT] = {0};
  CHECK_MPI(MPI_T_pvar_get_num(&num));
  CHECK_MPI(MPI_T_pvar_session_create(&session));
  for (i = 0; i < num; ++i) {
    char name[256], desc[1024];
    int name_len = sizeof(name), desc_len = sizeof(desc), verbosity, var_class, bind, readonly,
        continuous, atomic, count = 0;
    MPI_Datatype type;
    MPI_T_enum enumtype;
    CHECK_MPI(MPI_T_pvar_get_info(i, name, &name_len, &verbosity, &var_class, &type, &enumtype,
                                  desc, &desc_len, &bind, &readonly, &continuous, &atomic));
    for (s = 0; s < S_COUNT && strcmp(name, stat_name[s]) != 0; ++s) {
    }
    if (s == S_COUNT) {
      continue;
    }
    CHECK(!found[s], "%s is registered twice", name);
    found[s] = 1;
    CHECK(var_class == stat_class[s], "%s: class %d, expected %d", name, var_class, stat_class[s]);
    CHECK(type == MPI_UNSIGNED_LONG_LONG, "%s: not MPI_UNSIGNED_LONG_LONG", name);
    CHECK(bind == MPI_T_BIND_NO_OBJECT, "%s: bound to object kind %d", name, bind);
    CHECK(readonly && continuous, "%s: readonly %d continuous %d, expected both", name, readonly,
          continuous);
    CHECK(desc_len > 1, "%s has no description", name);
    CHECK_MPI(MPI_T_pvar_handle_alloc(session, i, NULL, &handle[s], &count));
    CHECK(count == 1, "%s: count %d", name, count);
  }
  for (s = 0; s < S_COUNT; ++s) {
    CHECK(found[s], "no performance variable %s (of %d)", stat_name[s], num);
  }
}

static void read_all(unsigned long long* v) {
  int s;
  for (s = 0; s < S_COUNT; ++s) {
    CHECK_MPI(MPI_T_pvar_read(session, handle[s], &v[s]));
  }
}

/* `from` sends EAGER_MSGS 8-byte messages and one LARGE_BYTES message to `to`, checked. */
static void traffic(int from, int to, unsigned char* big) {
  uint64_t v;
  int i;
  if (t_rank == from) {
    for (i = 0; i < EAGER_MSGS; ++i) {
      v = (uint64_t)i * 977u + 5u;
      CHECK_MPI(MPI_Send(&v, 1, MPI_UINT64_T, to, i, MPI_COMM_WORLD));
    }
    t_fill(big, LARGE_BYTES, 42u + (uint32_t)from);
    CHECK_MPI(MPI_Send(big, LARGE_BYTES, MPI_BYTE, to, EAGER_MSGS, MPI_COMM_WORLD));
  } else if (t_rank == to) {
    for (i = 0; i < EAGER_MSGS; ++i) {
      CHECK_MPI(MPI_Recv(&v, 1, MPI_UINT64_T, from, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
      CHECK(v == (uint64_t)i * 977u + 5u, "eager message %d: %llu", i, (unsigned long long)v);
    }
    memset(big, 0, LARGE_BYTES);
    CHECK_MPI(
        MPI_Recv(big, LARGE_BYTES, MPI_BYTE, from, EAGER_MSGS, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK(t_first_diff(big, LARGE_BYTES, 42u + (uint32_t)from) < 0, "large message differs");
  }
}

int main(int argc, char** argv) {
  unsigned long long before[S_COUNT], after[S_COUNT];
  unsigned char* big;
  int provided, s;
  t_init(&argc, &argv, "mpi_t_pvars");
  CHECK(t_size >= 2, "needs 2 ranks");
  CHECK_MPI(MPI_T_init_thread(MPI_THREAD_SINGLE, &provided));
  big = malloc(LARGE_BYTES);
  CHECK(big != NULL, "malloc");

  t_phase("bind");
  bind_all();
  read_all(before);
  t_phase("traffic");
  traffic(0, 1, big);
  traffic(1, 0, big);
  read_all(after);

  t_phase("check");
  for (s = 0; s < S_COUNT; ++s) {
    /* Open MPI sums a counter's increments in unsigned arithmetic: one that fell wraps. */
    CHECK(stat_class[s] != MPI_T_PVAR_CLASS_COUNTER ||
              (after[s] >= before[s] && after[s] - before[s] < (1ull << 62)),
          "%s fell from %llu to %llu", stat_name[s], before[s], after[s]);
  }
#define DELTA(name) (after[S_##name] - before[S_##name])
  if (t_rank <= 1) {
    CHECK(DELTA(srq_consumed) + DELTA(ring_recvs) + DELTA(shm_recvs) >= EAGER_MSGS,
          "srq_consumed +%llu ring_recvs +%llu shm_recvs +%llu after %d eager receives",
          DELTA(srq_consumed), DELTA(ring_recvs), DELTA(shm_recvs), EAGER_MSGS);
    if (after[S_shm_peers] > 0) { /* node-local peers through shared memory (the default) */
      CHECK(DELTA(shm_recvs) >= EAGER_MSGS && DELTA(shm_sends) >= EAGER_MSGS &&
                DELTA(shm_cma_bytes) >= LARGE_BYTES,
            "shm_sends +%llu shm_recvs +%llu shm_cma_bytes +%llu with %llu shared-memory peers",
            DELTA(shm_sends), DELTA(shm_recvs), DELTA(shm_cma_bytes), after[S_shm_peers]);
    }
    CHECK(DELTA(rndv_sends) >= 1 && DELTA(rndv_recvs) >= 1, "rndv_sends +%llu rndv_recvs +%llu",
          DELTA(rndv_sends), DELTA(rndv_recvs));
    CHECK(DELTA(rndv_zero_copy_bytes) + DELTA(rndv_copied_bytes) >= LARGE_BYTES,
          "rndv_zero_copy_bytes +%llu rndv_copied_bytes +%llu after a %d-byte send",
          DELTA(rndv_zero_copy_bytes), DELTA(rndv_copied_bytes), LARGE_BYTES);
    CHECK(after[S_recv_mem_bytes] > 0 && after[S_num_qps] > 0, "recv_mem_bytes %llu num_qps %llu",
          after[S_recv_mem_bytes], after[S_num_qps]);
  }
  CHECK(DELTA(dropped_malformed) == 0 && DELTA(dropped_foreign) == 0 &&
            DELTA(rnr_retry_exceeded) == 0 && DELTA(rndv_reg_failures) == 0,
        "dropped_malformed +%llu dropped_foreign +%llu rnr_retry_exceeded +%llu "
        "rndv_reg_failures +%llu on a clean run",
        DELTA(dropped_malformed), DELTA(dropped_foreign), DELTA(rnr_retry_exceeded),
        DELTA(rndv_reg_failures));
#undef DELTA
  if (t_rank == 1) {
    for (s = 0; s < S_COUNT; ++s) {
      printf("rank 1 %s: %llu -> %llu\n", stat_name[s], before[s], after[s]);
    }
  }

  for (s = 0; s < S_COUNT; ++s) {
    CHECK_MPI(MPI_T_pvar_handle_free(session, &handle[s]));
  }
  CHECK_MPI(MPI_T_pvar_session_free(&session));
  CHECK_MPI(MPI_T_finalize());
  free(big);
  return t_done();
}
