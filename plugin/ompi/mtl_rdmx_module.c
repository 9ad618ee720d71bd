/*
 * The module: procs and endpoints, communicators, progress and completion, finalize.
 *
 * Completion is two-step. rdmx runs a request's callback inside rdmx_worker_progress();
 * ompi_mtl_rdmx_callback only records the status and queues the request. Once rdmx has returned,
 * ompi_mtl_rdmx_progress hands each queued request to pml cm (unpack, status,
 * completion_callback). pml cm may then recycle the request, even repost it from a completion
 * hook, without rdmx still holding its storage, and no rdmx call is ever made from inside rdmx.
 * Under MPI_THREAD_MULTIPLE the queue is a lock-free stack (done_push, done_take): the thread
 * whose progress ran a callback pushes the request, any thread's progress takes all there are and
 * delivers them in the order they came. A progress call that finds it empty costs one load.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mtl_rdmx.h"
#include "mtl_rdmx_tag.h"
#include "ompi/mca/mtl/base/mtl_base_datatype.h"
#include "ompi/mca/pml/pml.h"
#include "opal/mca/pmix/pmix.h"
#include "opal/runtime/opal_progress.h"
#include "opal/util/output.h"
#include "opal/util/proc.h"

mca_mtl_rdmx_module_t ompi_mtl_rdmx = {
    .super =
        {
            .mtl_max_contextid = MTL_RDMX_MAX_CONTEXTID,
            .mtl_max_tag = MTL_RDMX_MAX_TAG,
            /* pml cm reserves this much after its request's req_mtl, which our request extends. */
            .mtl_request_size = sizeof(mca_mtl_rdmx_request_t) - sizeof(struct mca_mtl_request_t),
            .mtl_flags = 0, /* endpoints are made lazily: no need for the whole world at init */
            .mtl_add_procs = ompi_mtl_rdmx_add_procs,
            .mtl_del_procs = ompi_mtl_rdmx_del_procs,
            .mtl_finalize = ompi_mtl_rdmx_finalize,
            .mtl_send = ompi_mtl_rdmx_send,
            .mtl_isend = ompi_mtl_rdmx_isend,
            .mtl_irecv = ompi_mtl_rdmx_irecv,
            .mtl_iprobe = ompi_mtl_rdmx_iprobe,
            .mtl_imrecv = ompi_mtl_rdmx_imrecv,
            .mtl_improbe = ompi_mtl_rdmx_improbe,
            .mtl_cancel = ompi_mtl_rdmx_cancel,
            .mtl_add_comm = ompi_mtl_rdmx_add_comm,
            .mtl_del_comm = ompi_mtl_rdmx_del_comm,
        },
    .idle_yield_us = -1, /* component_init sets them */
    .idle_nap_us = -1,
};

int ompi_mtl_rdmx_error(int rdmx_code) {
  switch (rdmx_code) {
    case RDMX_OK:
      return OMPI_SUCCESS;
    case RDMX_ERR_NO_MEMORY:
    case RDMX_ERR_NO_RESOURCE:
      return OMPI_ERR_OUT_OF_RESOURCE;
    case RDMX_ERR_UNREACHABLE:
      return MPI_ERR_OTHER; /* a dead or departed peer; Open MPI 4.1 has no MPI_ERR_PROC_FAILED */
    case RDMX_ERR_UNSUPPORTED:
      return OMPI_ERR_NOT_SUPPORTED;
    case RDMX_ERR_INVALID_PARAM:
      return OMPI_ERR_BAD_PARAM;
    case RDMX_ERR_TRUNCATED:
      return MPI_ERR_TRUNCATE;
    default:
      return OMPI_ERROR;
  }
}

/* ---- procs and endpoints ------------------------------------------------------------------- */

static void endpoint_unlink(mca_mtl_rdmx_endpoint_t* e) {
  if (e->prev != NULL) {
    e->prev->next = e->next;
  } else {
    ompi_mtl_rdmx.endpoints = e->next;
  }
  if (e->next != NULL) {
    e->next->prev = e->prev;
  }
  e->prev = e->next = NULL;
}

int ompi_mtl_rdmx_add_procs(struct mca_mtl_base_module_t* mtl, size_t nprocs,
                            struct ompi_proc_t** procs) {
  size_t i;
  (void)mtl;
  for (i = 0; i < nprocs; ++i) {
    mca_mtl_rdmx_endpoint_t* e;
    void* address = NULL;
    size_t length = 0;
    char why[640];
    int rc;
    if (NULL != procs[i]->proc_endpoints[OMPI_PROC_ENDPOINT_TAG_MTL]) {
      continue; /* known already */
    }
    OPAL_MODEX_RECV(rc, &mca_mtl_rdmx_component.mtl_version, &procs[i]->super.proc_name, &address,
                    &length);
    if (OPAL_SUCCESS != rc || NULL == address || 0 == length) {
      opal_output(0,
                  "mtl rdmx: no rdmx address from process %s (modex error %d): every process "
                  "of the job must run the rdmx MTL (--mca pml cm --mca mtl rdmx).",
                  OPAL_NAME_PRINT(procs[i]->super.proc_name), rc);
      free(address);
      return OMPI_ERR_UNREACH;
    }
    /* Reachability, for every process and without traffic: a peer this process cannot reach
     * fails add_procs (MPI_Init, or the first message to a process added later) with rdmx's
     * reason, instead of a connection that times out. The endpoint itself is still made at the
     * first message (ompi_mtl_rdmx_get_ep): rdmx_ep_create starts the connection handshake at
     * once (a message, and RC QPs), which a process that never talks to a peer should not pay. */
    rc = rdmx_worker_check_peer(ompi_mtl_rdmx.worker, address, length, why, sizeof(why));
    if (RDMX_OK != rc) {
      const char* host = opal_get_proc_hostname(&procs[i]->super);
      opal_output(0, "mtl rdmx: process %s on host %s cannot reach process %s on host %s: %s",
                  OPAL_NAME_PRINT(OPAL_PROC_MY_NAME),
                  NULL != OPAL_PROC_MY_HOSTNAME ? OPAL_PROC_MY_HOSTNAME : "?",
                  OPAL_NAME_PRINT(procs[i]->super.proc_name), NULL != host ? host : "?", why);
      free(address);
      return OMPI_ERR_UNREACH;
    }
    e = calloc(1, sizeof(*e));
    if (NULL == e) {
      free(address);
      return OMPI_ERR_OUT_OF_RESOURCE;
    }
    e->address = address;
    e->address_length = length;
    e->proc = procs[i];
    e->next = ompi_mtl_rdmx.endpoints;
    if (e->next != NULL) {
      e->next->prev = e;
    }
    ompi_mtl_rdmx.endpoints = e;
    procs[i]->proc_endpoints[OMPI_PROC_ENDPOINT_TAG_MTL] = e;
    if (OPAL_PROC_ON_LOCAL_NODE(procs[i]->super.proc_flags)) {
      /* Node-local: attach its shared-memory segment now rather than at the first message, so
       * every segment's name is gone from /dev/shm once MPI_Init is over (the peer's count of
       * attached processes reaches num_local_peers). Connecting is cheap on this node. */
      OPAL_THREAD_LOCK(&ompi_mtl_rdmx.lock);
      (void)ompi_mtl_rdmx_get_ep(procs[i]);
      OPAL_THREAD_UNLOCK(&ompi_mtl_rdmx.lock);
    }
  }
  return OMPI_SUCCESS;
}

static void endpoint_free(mca_mtl_rdmx_endpoint_t* e) {
  if (NULL != e->ep) {
    rdmx_ep_destroy(e->ep);
  }
  e->proc->proc_endpoints[OMPI_PROC_ENDPOINT_TAG_MTL] = NULL;
  endpoint_unlink(e);
  free(e->address);
  free(e);
}

int ompi_mtl_rdmx_del_procs(struct mca_mtl_base_module_t* mtl, size_t nprocs,
                            struct ompi_proc_t** procs) {
  size_t i;
  (void)mtl;
  OPAL_THREAD_LOCK(&ompi_mtl_rdmx.lock);
  for (i = 0; i < nprocs; ++i) {
    if (NULL != procs[i] && NULL != procs[i]->proc_endpoints[OMPI_PROC_ENDPOINT_TAG_MTL]) {
      endpoint_free(procs[i]->proc_endpoints[OMPI_PROC_ENDPOINT_TAG_MTL]);
    }
  }
  OPAL_THREAD_UNLOCK(&ompi_mtl_rdmx.lock);
  return OMPI_SUCCESS;
}

void ompi_mtl_rdmx_peer_unreachable(struct ompi_proc_t* proc) {
  mca_mtl_rdmx_endpoint_t* e =
      NULL != proc ? proc->proc_endpoints[OMPI_PROC_ENDPOINT_TAG_MTL] : NULL;
  if (NULL == e) {
    return;
  }
  OPAL_THREAD_LOCK(&ompi_mtl_rdmx.lock);
  if (e->unreachable) {
    OPAL_THREAD_UNLOCK(&ompi_mtl_rdmx.lock);
    return;
  }
  /* Only said once: receives from it are rdmx's to fail (it refuses them once the peer is dead,
   * but still matches what the peer sent before dying or leaving). */
  e->unreachable = true;
  OPAL_THREAD_UNLOCK(&ompi_mtl_rdmx.lock);
  opal_output(0,
              "mtl rdmx: process %s (MPI_COMM_WORLD rank %u) on %s is unreachable (it died, hung "
              "or left; rdmx declares a peer dead after mtl_rdmx_peer_timeout_ms): sends to it "
              "fail with MPI_ERR_OTHER, and so do receives from it that nothing it sent before "
              "matches.",
              OPAL_NAME_PRINT(proc->super.proc_name), (unsigned)proc->super.proc_name.vpid,
              NULL != proc->super.proc_hostname ? proc->super.proc_hostname : "?");
}

/* Called with the module lock held. */
rdmx_ep_t* ompi_mtl_rdmx_get_ep(struct ompi_proc_t* proc) {
  mca_mtl_rdmx_endpoint_t* e = proc->proc_endpoints[OMPI_PROC_ENDPOINT_TAG_MTL];
  int rc;
  if (OPAL_UNLIKELY(NULL == e)) {
    /* A process pml cm was not told about yet (as in mtl_ofi: add it on first use). Open MPI
     * adds the processes of other hosts this way, at their first message. A failure here ends
     * the job, as in mtl_ofi: the error code of a send started inside a collective (libnbc) is
     * dropped, and the job would wait for a peer it can never reach. add_procs said why. */
    if (OMPI_SUCCESS != MCA_PML_CALL(add_procs(&proc, 1))) {
      opal_output(0, "mtl rdmx: process %s cannot add process %s (above): aborting the job",
                  OPAL_NAME_PRINT(OPAL_PROC_MY_NAME), OPAL_NAME_PRINT(proc->super.proc_name));
      exit(1);
    }
    e = proc->proc_endpoints[OMPI_PROC_ENDPOINT_TAG_MTL];
    if (NULL == e) {
      return NULL;
    }
  }
  if (OPAL_LIKELY(NULL != e->ep)) {
    return e->ep;
  }
  rdmx_ep_t* ep = NULL;
  rc = rdmx_ep_create(ompi_mtl_rdmx.worker, e->address, e->address_length, &ep);
  /* Published whole: ompi_mtl_rdmx_ep_of reads it without the lock. */
  __atomic_store_n(&e->ep, RDMX_OK == rc ? ep : NULL, __ATOMIC_RELEASE);
  if (RDMX_OK != rc) {
    opal_output(0, "mtl rdmx: cannot connect to process %s on %s: %s",
                OPAL_NAME_PRINT(proc->super.proc_name),
                NULL != proc->super.proc_hostname ? proc->super.proc_hostname : "?",
                rdmx_strerror(rc));
    return NULL;
  }
  return e->ep;
}

rdmx_ep_t* ompi_mtl_rdmx_ep_of(struct ompi_proc_t* proc) {
  const mca_mtl_rdmx_endpoint_t* e = proc->proc_endpoints[OMPI_PROC_ENDPOINT_TAG_MTL];
  rdmx_ep_t* ep = NULL != e ? __atomic_load_n(&e->ep, __ATOMIC_ACQUIRE) : NULL;
  if (OPAL_UNLIKELY(NULL == ep)) {
    OPAL_THREAD_LOCK(&ompi_mtl_rdmx.lock);
    ep = ompi_mtl_rdmx_get_ep(proc);
    OPAL_THREAD_UNLOCK(&ompi_mtl_rdmx.lock);
  }
  return ep;
}

/* ---- communicators ------------------------------------------------------------------------- */

int ompi_mtl_rdmx_add_comm(struct mca_mtl_base_module_t* mtl, struct ompi_communicator_t* comm) {
  (void)mtl;
  if (comm->c_contextid > (uint32_t)MTL_RDMX_MAX_CONTEXTID) {
    opal_output(0, "mtl rdmx: communicator context id %u exceeds the %d bits of the tag layout",
                comm->c_contextid, MTL_RDMX_CID_BITS);
    return OMPI_ERR_OUT_OF_RESOURCE;
  }
  if (ompi_comm_size(comm) > MTL_RDMX_MAX_COMM_SIZE ||
      ompi_comm_remote_size(comm) > MTL_RDMX_MAX_COMM_SIZE) {
    opal_output(0, "mtl rdmx: communicators of more than %d processes are not supported",
                MTL_RDMX_MAX_COMM_SIZE);
    return OMPI_ERR_OUT_OF_RESOURCE;
  }
  return ompi_mtl_rdmx_comm_added(comm);
}

int ompi_mtl_rdmx_del_comm(struct mca_mtl_base_module_t* mtl, struct ompi_communicator_t* comm) {
  (void)mtl;
  ompi_mtl_rdmx_comm_removed(comm);
  return OMPI_SUCCESS;
}

/* ---- completion ---------------------------------------------------------------------------- */

/* Queues a completion: pushed onto the stack of done requests, with release so that whoever
 * takes it sees the status. The setup-time choice opal_using_threads() is the same branch
 * OPAL_THREAD_LOCK makes. */
static void done_push(mca_mtl_rdmx_request_t* r, const rdmx_status_t* status) {
  r->status = *status;
  if (opal_using_threads()) {
    mca_mtl_rdmx_request_t* head = __atomic_load_n(&ompi_mtl_rdmx.done, __ATOMIC_RELAXED);
    do {
      r->next_done = head;
    } while (!__atomic_compare_exchange_n(&ompi_mtl_rdmx.done, &head, r, true, __ATOMIC_RELEASE,
                                          __ATOMIC_RELAXED));
  } else {
    r->next_done = ompi_mtl_rdmx.done;
    ompi_mtl_rdmx.done = r;
  }
}

/* Takes every queued completion, oldest first. */
static mca_mtl_rdmx_request_t* done_take(void) {
  mca_mtl_rdmx_request_t* r;
  mca_mtl_rdmx_request_t* fifo = NULL;
  if (opal_using_threads()) {
    r = NULL == __atomic_load_n(&ompi_mtl_rdmx.done, __ATOMIC_RELAXED)
            ? NULL
            : __atomic_exchange_n(&ompi_mtl_rdmx.done, NULL, __ATOMIC_ACQUIRE);
  } else {
    r = ompi_mtl_rdmx.done;
    ompi_mtl_rdmx.done = NULL;
  }
  while (NULL != r) { /* newest first: reverse */
    mca_mtl_rdmx_request_t* next = r->next_done;
    r->next_done = fifo;
    fifo = r;
    r = next;
  }
  return fifo;
}

void ompi_mtl_rdmx_callback(rdmx_request_t* request, const rdmx_status_t* status, void* user_data) {
  mca_mtl_rdmx_request_t* r = user_data;
  (void)request;
  done_push(r, status);
}

void ompi_mtl_rdmx_complete_now(mca_mtl_rdmx_request_t* r, int error) {
  rdmx_status_t s = {.error = error, .tag = 0, .source = r->source_uid, .length = 0};
  done_push(r, &s);
}

static int mpi_error_of(const rdmx_status_t* s) {
  switch (s->error) {
    case RDMX_OK:
      return MPI_SUCCESS;
    case RDMX_ERR_TRUNCATED:
      return MPI_ERR_TRUNCATE;
    case RDMX_ERR_UNREACHABLE:
      return MPI_ERR_OTHER; /* said once per peer by ompi_mtl_rdmx_peer_unreachable */
    default:
      opal_output_verbose(1, ompi_mtl_rdmx_output, "mtl rdmx: request failed: %s",
                          rdmx_strerror(s->error));
      return MPI_ERR_INTERN;
  }
}

static void complete_recv(mca_mtl_rdmx_request_t* r) {
  ompi_status_public_t* st = &r->super.ompi_req->req_status;
  const rdmx_status_t* s = &r->status;
  if (OPAL_UNLIKELY(RDMX_ERR_UNREACHABLE == s->error)) {
    /* Its source is unreachable: an error, with nothing received. */
    st->_ucount = 0;
    st->MPI_ERROR = MPI_ERR_OTHER;
    if (r->free_buffer) {
      free(r->buffer);
    }
  } else if (RDMX_ERR_CANCELED == s->error) {
    st->_cancelled = true;
    if (r->free_buffer) {
      free(r->buffer);
    }
  } else {
    /* Bytes that landed in the buffer: all of them, or on truncation as many as fit. */
    const size_t received = s->length < r->capacity ? s->length : r->capacity;
    st->MPI_SOURCE = mtl_rdmx_tag_source(s->tag);
    st->MPI_TAG = mtl_rdmx_tag_mpi_tag(s->tag);
    st->_ucount = received;
    st->MPI_ERROR = mpi_error_of(s);
    if (r->free_buffer) {
      if (received > 0 && (RDMX_OK == s->error || RDMX_ERR_TRUNCATED == s->error)) {
        ompi_mtl_datatype_unpack(r->convertor, r->buffer, received); /* frees the buffer */
      } else {
        free(r->buffer);
      }
    }
  }
  r->buffer = NULL;
  r->free_buffer = false;
  r->super.completion_callback(&r->super);
}

static void complete(mca_mtl_rdmx_request_t* r) {
  switch (r->kind) {
    case MCA_MTL_RDMX_REQ_RECV:
      complete_recv(r);
      break;
    case MCA_MTL_RDMX_REQ_SEND:
      if (r->free_buffer) {
        free(r->buffer);
        r->buffer = NULL;
        r->free_buffer = false;
      }
      if (OPAL_UNLIKELY(RDMX_ERR_UNREACHABLE == r->status.error)) {
        ompi_mtl_rdmx_peer_unreachable(r->peer);
      }
      r->super.ompi_req->req_status.MPI_ERROR = mpi_error_of(&r->status);
      r->super.completion_callback(&r->super);
      break;
    case MCA_MTL_RDMX_REQ_BLOCKING_SEND:
      break; /* posted without a callback: ompi_mtl_rdmx_send tests it, never queued here */
  }
}

int ompi_mtl_rdmx_progress(void) {
  mca_mtl_rdmx_request_t* r;
  int events;
  int completed = 0;
  bool dead_news;
  if (OPAL_UNLIKELY(NULL == ompi_mtl_rdmx.worker)) {
    return 0;
  }
  /* pml cm's waits spin on opal_progress, which costs more than an idle rdmx poll (its other
   * callbacks, and every 8th call a clock read: a system call where the clocksource is hpet).
   * A call that comes right after an idle one is such a turn: while nothing happens it polls
   * again, up to mtl_rdmx_progress_polls times, and finds a message sooner. An MPI_Test between
   * compute steps polls once. Not when Open MPI yields after every idle call (oversubscribed, or
   * mpi_yield_when_idle): that yield is what gives the other ranks the CPU; nor with threads,
   * whose sends would wait for the lock through all the polls. */
  events = rdmx_worker_poll(ompi_mtl_rdmx.worker,
                            (opal_progress_yield_when_idle || opal_using_threads())
                                ? 1
                                : ompi_mtl_rdmx_params.progress_polls,
                            MTL_RDMX_SPIN_GAP_US);
  r = done_take();
  dead_news = __atomic_load_n(&ompi_mtl_rdmx.dead_handled, __ATOMIC_RELAXED) !=
              __atomic_load_n(&ompi_mtl_rdmx.dead_count, __ATOMIC_RELAXED);
  /* A long wait yields the CPU, which a software device's kernel work needs (rdmx_worker_idle),
   * and under threads sleeps too, for the threads Open MPI woke. A call that found the worker busy
   * with another thread's poll counts as idle here: that thread progresses for this one. */
  if (ompi_mtl_rdmx.idle_yield_us >= 0) {
    rdmx_worker_idle(
        ompi_mtl_rdmx.worker, (events > 0 || NULL != r) ? 1 : 0,
        (uint32_t)ompi_mtl_rdmx.idle_yield_us,
        ompi_mtl_rdmx.idle_nap_us >= 0 ? (uint32_t)ompi_mtl_rdmx.idle_nap_us : RDMX_IDLE_NEVER);
  }
  if (OPAL_UNLIKELY(dead_news)) {
    ompi_mtl_rdmx_handle_peer_failures(); /* mtl_rdmx_failure.c: calls rdmx, so not inside it */
  }
  if (OPAL_UNLIKELY(events < 0) &&
      !__atomic_exchange_n(&ompi_mtl_rdmx.warned_progress, true, __ATOMIC_RELAXED)) {
    opal_output(0, "mtl rdmx: progress failed: %s", rdmx_strerror(events));
  }
  while (NULL != r) {
    mca_mtl_rdmx_request_t* next = r->next_done;
    complete(r);
    ++completed;
    r = next;
  }
  /* opal_progress yields the CPU (when idle-yield is on) only if every callback reports 0. */
  return completed + (events > 0 ? events : 0);
}

/* ---- finalize ------------------------------------------------------------------------------ */

int ompi_mtl_rdmx_finalize(struct mca_mtl_base_module_t* mtl) {
  mca_mtl_rdmx_request_t* r;
  (void)mtl;
  opal_progress_unregister(ompi_mtl_rdmx_progress);
  OPAL_THREAD_LOCK(&ompi_mtl_rdmx.lock);
  ompi_mtl_rdmx_print_stats(); /* before the endpoints go */
  while (NULL != ompi_mtl_rdmx.endpoints) {
    endpoint_free(ompi_mtl_rdmx.endpoints);
  }
  OPAL_THREAD_UNLOCK(&ompi_mtl_rdmx.lock);
  if (NULL != ompi_mtl_rdmx.worker) {
    /* Fails what is still active; those callbacks only queue. Not under the lock: destroy runs
     * callbacks (the lock is never held across one, mtl_rdmx.h). */
    rdmx_worker_destroy(ompi_mtl_rdmx.worker);
    ompi_mtl_rdmx.worker = NULL;
  }
  OPAL_THREAD_LOCK(&ompi_mtl_rdmx.lock);
  /* Requests nobody waited for: pml cm is going away, release only what is ours. */
  for (r = done_take(); NULL != r; r = r->next_done) {
    if (r->free_buffer) {
      free(r->buffer);
      r->free_buffer = false;
    }
  }
  ompi_mtl_rdmx_dead_fini();
  OPAL_THREAD_UNLOCK(&ompi_mtl_rdmx.lock);
  return OMPI_SUCCESS;
}
