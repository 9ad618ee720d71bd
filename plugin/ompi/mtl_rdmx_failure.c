/*
 * Dead processes and the receives waiting for them.
 *
 * rdmx finds a dead peer by itself, also one that this process only receives from or probes
 * (liveness probes, rdmx.h "Peer failure"); it then fails the receives naming that peer as source
 * and refuses later ones (so MPI_Recv / MPI_Irecv / MPI_Probe from a dead rank end with
 * MPI_ERR_OTHER), and it calls ompi_mtl_rdmx_peer_failed with the peer's uid. rdmx does not know
 * communicators, so the MPI_ANY_SOURCE rule is the MTL's, after ULFM's
 * (MPI_ERR_PROC_FAILED_PENDING; Open MPI 4.1 without ULFM has no such class, so MPI_ERR_OTHER):
 *   - an MPI_ANY_SOURCE receive posted in a communicator that contains the dead process fails
 *     with MPI_ERR_OTHER (nothing received), unless a message has matched it already;
 *   - from then on, an MPI_ANY_SOURCE receive or probe in such a communicator fails too, once
 *     no message it could take is there (4.1 has no MPI_Comm_failure_ack to acknowledge the
 *     failure and go on). Receives from live ranks by name keep working.
 * A process that left cleanly (MPI_Finalize) is not dead: rdmx reports only deaths.
 *
 * The callback runs from rdmx_worker_progress (with no rdmx lock held, so it may take the
 * module lock) and only records the uid; ompi_mtl_rdmx_progress calls
 * ompi_mtl_rdmx_handle_peer_failures once rdmx has returned, because cancelling receives means
 * calling rdmx again.
 */
#include <stdlib.h>

#include "mtl_rdmx.h"
#include "mtl_rdmx_tag.h"
#include "opal/util/output.h"

static void record_dead(uint64_t uid) {
  if (ompi_mtl_rdmx.dead_count == ompi_mtl_rdmx.dead_capacity) {
    const size_t capacity = 0 == ompi_mtl_rdmx.dead_capacity ? 8 : 2 * ompi_mtl_rdmx.dead_capacity;
    uint64_t* uids = realloc(ompi_mtl_rdmx.dead_uids, capacity * sizeof(*uids));
    if (NULL == uids) {
      opal_output(0,
                  "mtl rdmx: out of memory recording a dead process; MPI_ANY_SOURCE "
                  "receives may not see it");
      return;
    }
    ompi_mtl_rdmx.dead_uids = uids;
    ompi_mtl_rdmx.dead_capacity = capacity;
  }
  ompi_mtl_rdmx.dead_uids[ompi_mtl_rdmx.dead_count] = uid;
  __atomic_store_n(&ompi_mtl_rdmx.dead_count, ompi_mtl_rdmx.dead_count + 1, __ATOMIC_RELAXED);
}

void ompi_mtl_rdmx_peer_failed(uint64_t uid, void* arg) {
  (void)arg;
  OPAL_THREAD_LOCK(&ompi_mtl_rdmx.lock);
  record_dead(uid);
  OPAL_THREAD_UNLOCK(&ompi_mtl_rdmx.lock);
}

static bool comm_contains(struct ompi_communicator_t* comm, uint64_t uid) {
  /* Failure path only. An intercommunicator's MPI_ANY_SOURCE means its remote group, which
   * ompi_comm_peer_lookup reads (the local group for intra-communicators, whose
   * ompi_comm_remote_size is 0). */
  const int n = OMPI_COMM_IS_INTER(comm) ? ompi_comm_remote_size(comm) : ompi_comm_size(comm);
  int i;
  for (i = 0; i < n; ++i) {
    const ompi_proc_t* p = ompi_comm_peer_lookup(comm, i);
    if (NULL != p && mtl_rdmx_uid_of(&p->super.proc_name) == uid) {
      return true;
    }
  }
  return false;
}

bool ompi_mtl_rdmx_comm_has_dead(struct ompi_communicator_t* comm) {
  size_t d;
  for (d = 0; d < ompi_mtl_rdmx.dead_count; ++d) {
    if (comm_contains(comm, ompi_mtl_rdmx.dead_uids[d])) {
      return true;
    }
  }
  return false;
}

static mca_mtl_rdmx_endpoint_t* endpoint_of(uint64_t uid) {
  mca_mtl_rdmx_endpoint_t* e;
  for (e = ompi_mtl_rdmx.endpoints; NULL != e; e = e->next) {
    if (mtl_rdmx_uid_of(&e->proc->super.proc_name) == uid) {
      return e;
    }
  }
  return NULL;
}

/* Fails comm's posted MPI_ANY_SOURCE receives: rdmx has them all (their tags carry the context
 * id), so the MTL keeps no list of them and posting one takes no lock while no process has died
 * (ompi_mtl_rdmx_check_any_source). */
static void fail_any_source_recvs_of(struct ompi_communicator_t* comm) {
  uint64_t tag;
  uint64_t mask;
  mtl_rdmx_comm_tag(comm->c_contextid, &tag, &mask);
  (void)rdmx_tag_recv_fail_any_source(ompi_mtl_rdmx.worker, tag, mask);
}

/* Lock held. */
static void fail_any_source_recvs(uint64_t uid) {
  size_t i;
  for (i = 0; i < ompi_mtl_rdmx.comm_count; ++i) {
    if (comm_contains(ompi_mtl_rdmx.comms[i], uid)) {
      fail_any_source_recvs_of(ompi_mtl_rdmx.comms[i]);
    }
  }
}

/* The receive was posted before this reads dead_count: a death recorded after it is handled
 * after it too, and finds it in rdmx (ompi_mtl_rdmx_handle_peer_failures). */
void ompi_mtl_rdmx_check_any_source(struct ompi_communicator_t* comm) {
  if (OPAL_LIKELY(0 == __atomic_load_n(&ompi_mtl_rdmx.dead_count, __ATOMIC_ACQUIRE))) {
    return;
  }
  OPAL_THREAD_LOCK(&ompi_mtl_rdmx.lock);
  if (ompi_mtl_rdmx_comm_has_dead(comm)) {
    fail_any_source_recvs_of(comm);
  }
  OPAL_THREAD_UNLOCK(&ompi_mtl_rdmx.lock);
}

int ompi_mtl_rdmx_comm_added(struct ompi_communicator_t* comm) {
  int rc = OMPI_SUCCESS;
  OPAL_THREAD_LOCK(&ompi_mtl_rdmx.lock);
  if (ompi_mtl_rdmx.comm_count == ompi_mtl_rdmx.comm_capacity) {
    const size_t capacity = 0 == ompi_mtl_rdmx.comm_capacity ? 8 : 2 * ompi_mtl_rdmx.comm_capacity;
    struct ompi_communicator_t** comms = realloc(ompi_mtl_rdmx.comms, capacity * sizeof(*comms));
    if (NULL == comms) {
      opal_output(0, "mtl rdmx: out of memory adding a communicator");
      rc = OMPI_ERR_OUT_OF_RESOURCE;
    } else {
      ompi_mtl_rdmx.comms = comms;
      ompi_mtl_rdmx.comm_capacity = capacity;
    }
  }
  if (OMPI_SUCCESS == rc) {
    ompi_mtl_rdmx.comms[ompi_mtl_rdmx.comm_count++] = comm;
  }
  OPAL_THREAD_UNLOCK(&ompi_mtl_rdmx.lock);
  return rc;
}

/* pml cm's nonblocking and persistent requests hold their communicator: none of those is still
 * posted. A blocking MPI_Recv does not (pml cm makes it on the stack): one left waiting in a
 * communicator that another thread frees meanwhile is not failed by a later death. */
void ompi_mtl_rdmx_comm_removed(struct ompi_communicator_t* comm) {
  size_t i;
  OPAL_THREAD_LOCK(&ompi_mtl_rdmx.lock);
  for (i = 0; i < ompi_mtl_rdmx.comm_count; ++i) {
    if (ompi_mtl_rdmx.comms[i] == comm) {
      ompi_mtl_rdmx.comms[i] = ompi_mtl_rdmx.comms[--ompi_mtl_rdmx.comm_count];
      break;
    }
  }
  OPAL_THREAD_UNLOCK(&ompi_mtl_rdmx.lock);
}

void ompi_mtl_rdmx_handle_peer_failures(void) {
  for (;;) {
    mca_mtl_rdmx_endpoint_t* e;
    uint64_t uid;
    OPAL_THREAD_LOCK(&ompi_mtl_rdmx.lock);
    if (NULL == ompi_mtl_rdmx.worker || ompi_mtl_rdmx.dead_handled >= ompi_mtl_rdmx.dead_count) {
      OPAL_THREAD_UNLOCK(&ompi_mtl_rdmx.lock);
      return;
    }
    uid = ompi_mtl_rdmx.dead_uids[ompi_mtl_rdmx.dead_handled];
    __atomic_store_n(&ompi_mtl_rdmx.dead_handled, ompi_mtl_rdmx.dead_handled + 1, __ATOMIC_RELAXED);
    fail_any_source_recvs(uid);
    e = endpoint_of(uid);
    OPAL_THREAD_UNLOCK(&ompi_mtl_rdmx.lock);
    if (NULL != e) {
      ompi_mtl_rdmx_peer_unreachable(e->proc); /* says so once */
    } else {
      opal_output(0,
                  "mtl rdmx: process [%u,%u] is unreachable (it died or hung; rdmx declares "
                  "a peer dead after mtl_rdmx_peer_timeout_ms): receives from it fail with "
                  "MPI_ERR_OTHER.",
                  (unsigned)(uid >> 32), (unsigned)(uid & 0xffffffffu));
    }
  }
}

void ompi_mtl_rdmx_dead_fini(void) {
  free(ompi_mtl_rdmx.comms);
  ompi_mtl_rdmx.comms = NULL;
  ompi_mtl_rdmx.comm_count = 0;
  ompi_mtl_rdmx.comm_capacity = 0;
  free(ompi_mtl_rdmx.dead_uids);
  ompi_mtl_rdmx.dead_uids = NULL;
  ompi_mtl_rdmx.dead_capacity = 0;
  __atomic_store_n(&ompi_mtl_rdmx.dead_count, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&ompi_mtl_rdmx.dead_handled, 0, __ATOMIC_RELAXED);
}
