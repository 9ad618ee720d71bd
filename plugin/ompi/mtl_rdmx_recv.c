/*
 * Receives, probes (plain and matched) and cancel.
 *
 * Source: a specific source becomes the peer's rdmx uid (its Open MPI name, see
 * mtl_rdmx_uid_of), MPI_ANY_SOURCE becomes RDMX_ANY_SOURCE. MPI_SOURCE of a status comes from
 * the sender's communicator rank in the tag (mtl_rdmx_tag.h), so no reverse lookup is needed.
 */
#include <stdlib.h>

#include "mtl_rdmx.h"
#include "mtl_rdmx_tag.h"
#include "ompi/mca/mtl/base/mtl_base_datatype.h"
#include "ompi/message/message.h"
#include "opal/util/output.h"

static uint64_t rdmx_source(struct ompi_communicator_t* comm, int src) {
  if (MPI_ANY_SOURCE == src) {
    return RDMX_ANY_SOURCE;
  }
  return mtl_rdmx_uid_of(&ompi_comm_peer_lookup(comm, src)->super.proc_name);
}

/* A specific source: connects to it first if this process has no endpoint to it yet (endpoints
 * are made on the first send; a process that only receives from a peer would otherwise have no
 * connection through which rdmx can find the peer dead). Whether the source is unreachable is
 * rdmx's to say, not the MTL's: rdmx still matches what a dead peer sent before dying, and keeps
 * receives from a peer that left cleanly, where a flag here would fail them and lose the message.
 * Takes the lock only to connect. */
static void connect_source(struct ompi_communicator_t* comm, int src) {
  if (MPI_ANY_SOURCE != src) {
    (void)ompi_mtl_rdmx_ep_of(ompi_comm_peer_lookup(comm, src)); /* says why when it cannot */
  }
}

/* Where the message lands: the user's buffer when the datatype is contiguous, else a staging
 * buffer unpacked at completion. */
static int prepare_recv(struct opal_convertor_t* convertor, mca_mtl_rdmx_request_t* req,
                        void** start, size_t* length) {
  bool free_after = false;
  int rc = ompi_mtl_datatype_recv_buf(convertor, start, length, &free_after);
  if (OPAL_UNLIKELY(OMPI_SUCCESS != rc)) {
    return rc;
  }
  if (OPAL_UNLIKELY(*length > 0 && NULL == *start)) {
    return OMPI_ERR_OUT_OF_RESOURCE;
  }
  req->kind = MCA_MTL_RDMX_REQ_RECV;
  req->convertor = convertor;
  req->buffer = free_after ? *start : NULL;
  req->free_buffer = free_after;
  req->capacity = *length;
  return OMPI_SUCCESS;
}

static int post_failed(mca_mtl_rdmx_request_t* req, int rc) {
  if (req->free_buffer) {
    free(req->buffer);
  }
  req->buffer = NULL;
  req->free_buffer = false;
  opal_output_verbose(1, ompi_mtl_rdmx_output, "mtl rdmx: posting a receive failed: %s",
                      rdmx_strerror(rc));
  return ompi_mtl_rdmx_error(rc);
}

int ompi_mtl_rdmx_irecv(struct mca_mtl_base_module_t* mtl, struct ompi_communicator_t* comm,
                        int src, int tag, struct opal_convertor_t* convertor,
                        mca_mtl_request_t* mtl_request) {
  mca_mtl_rdmx_request_t* req = (mca_mtl_rdmx_request_t*)mtl_request;
  const uint64_t source = rdmx_source(comm, src);
  uint64_t match;
  uint64_t mask;
  void* start = NULL;
  size_t length = 0;
  int rc;
  (void)mtl;

  mtl_rdmx_recv_tag(comm->c_contextid, src, tag, &match, &mask);
  rc = prepare_recv(convertor, req, &start, &length);
  if (OPAL_UNLIKELY(OMPI_SUCCESS != rc)) {
    return rc;
  }
  req->source_uid = source;
  /* No lock. A named source: rdmx fails the receive if the source dies, and refuses it if the
   * source is dead and nothing it sent matches. MPI_ANY_SOURCE: the MTL's rule
   * (mtl_rdmx_failure.c) fails it when a process of comm dies, through rdmx. */
  connect_source(comm, src);
  for (;;) {
    rc = rdmx_tag_recv(ompi_mtl_rdmx.worker, start, length, source, match, mask, &req->rdmx,
                       ompi_mtl_rdmx_callback, req);
    if (OPAL_LIKELY(RDMX_ERR_NO_RESOURCE != rc)) {
      break;
    }
    ompi_mtl_rdmx_progress();
  }
  if (OPAL_UNLIKELY(RDMX_ANY_SOURCE == source && RDMX_OK == rc)) {
    ompi_mtl_rdmx_check_any_source(comm); /* a process of comm died before it was posted */
  }
  if (OPAL_UNLIKELY(RDMX_ERR_UNREACHABLE == rc)) {
    /* rdmx refused it: the source is dead and sent nothing that matches. An error, with nothing
     * received. */
    ompi_mtl_rdmx_complete_now(req, RDMX_ERR_UNREACHABLE);
    return OMPI_SUCCESS;
  }
  return OPAL_LIKELY(RDMX_OK == rc) ? OMPI_SUCCESS : post_failed(req, rc);
}

/* A probe's status. MPI_ERROR stays as the caller left it: MPI-3.1 3.2.5, only the calls that
 * complete several requests set it (pml cm hands the user's status straight to the MTL). */
static void fill_status(struct ompi_status_public_t* status, const rdmx_status_t* s) {
  if (MPI_STATUS_IGNORE != status) {
    status->MPI_SOURCE = mtl_rdmx_tag_source(s->tag);
    status->MPI_TAG = mtl_rdmx_tag_mpi_tag(s->tag);
    status->_ucount = s->length;
    status->_cancelled = 0;
  }
}

/* Looks once, progresses rdmx, looks again: a probe loop in the application then always makes
 * progress, as with the other MTLs. Returns 1 found, 0 not, < 0 an rdmx error. */
static int probe(struct ompi_communicator_t* comm, int src, uint64_t match, uint64_t mask,
                 rdmx_status_t* s, rdmx_message_t** message) {
  const uint64_t source = rdmx_source(comm, src);
  int found;
  connect_source(comm, src); /* so that a dead source is found */
  found = rdmx_tag_probe(ompi_mtl_rdmx.worker, source, match, mask, s, message);
  if (0 == found) {
    ompi_mtl_rdmx_progress();
    found = rdmx_tag_probe(ompi_mtl_rdmx.worker, source, match, mask, s, message);
    /* A specific dead source: rdmx says RDMX_ERR_UNREACHABLE. MPI_ANY_SOURCE: the MTL's rule
     * (mtl_rdmx_failure.c), so that an MPI_Probe loop ends instead of waiting for ever. */
    if (OPAL_UNLIKELY(0 == found &&
                      0 != __atomic_load_n(&ompi_mtl_rdmx.dead_count, __ATOMIC_RELAXED)) &&
        RDMX_ANY_SOURCE == source) {
      OPAL_THREAD_LOCK(&ompi_mtl_rdmx.lock);
      if (ompi_mtl_rdmx_comm_has_dead(comm)) {
        found = RDMX_ERR_UNREACHABLE;
      }
      OPAL_THREAD_UNLOCK(&ompi_mtl_rdmx.lock);
    }
  }
  return found;
}

int ompi_mtl_rdmx_iprobe(struct mca_mtl_base_module_t* mtl, struct ompi_communicator_t* comm,
                         int src, int tag, int* flag, struct ompi_status_public_t* status) {
  rdmx_status_t s;
  uint64_t match;
  uint64_t mask;
  int found;
  (void)mtl;
  mtl_rdmx_recv_tag(comm->c_contextid, src, tag, &match, &mask);
  found = probe(comm, src, match, mask, &s, NULL);
  if (OPAL_UNLIKELY(found < 0)) {
    return ompi_mtl_rdmx_error(found);
  }
  *flag = found;
  if (found) {
    fill_status(status, &s);
  }
  return OMPI_SUCCESS;
}

int ompi_mtl_rdmx_improbe(struct mca_mtl_base_module_t* mtl, struct ompi_communicator_t* comm,
                          int src, int tag, int* matched, struct ompi_message_t** message,
                          struct ompi_status_public_t* status) {
  rdmx_status_t s;
  rdmx_message_t* m = NULL;
  uint64_t match;
  uint64_t mask;
  int found;
  (void)mtl;
  *matched = 0;
  *message = MPI_MESSAGE_NULL;
  /* Take the Open MPI message first: once rdmx has removed a message from matching, failing
   * would lose it. */
  struct ompi_message_t* msg = ompi_message_alloc();
  if (OPAL_UNLIKELY(NULL == msg)) {
    return OMPI_ERR_OUT_OF_RESOURCE;
  }
  mtl_rdmx_recv_tag(comm->c_contextid, src, tag, &match, &mask);
  found = probe(comm, src, match, mask, &s, &m);
  if (found <= 0) {
    ompi_message_return(msg);
    return found < 0 ? ompi_mtl_rdmx_error(found) : OMPI_SUCCESS;
  }
  fill_status(status, &s);
  msg->comm = comm;
  msg->req_ptr = m;
  msg->peer = mtl_rdmx_tag_source(s.tag);
  msg->count = s.length;
  *message = msg;
  *matched = 1;
  return OMPI_SUCCESS;
}

int ompi_mtl_rdmx_imrecv(struct mca_mtl_base_module_t* mtl, struct opal_convertor_t* convertor,
                         struct ompi_message_t** message, mca_mtl_request_t* mtl_request) {
  mca_mtl_rdmx_request_t* req = (mca_mtl_rdmx_request_t*)mtl_request;
  rdmx_message_t* m = (rdmx_message_t*)(*message)->req_ptr;
  void* start = NULL;
  size_t length = 0;
  int rc;
  (void)mtl;
  rc = prepare_recv(convertor, req, &start, &length);
  if (OPAL_UNLIKELY(OMPI_SUCCESS != rc)) {
    return rc;
  }
  for (;;) {
    rc = rdmx_tag_msg_recv(ompi_mtl_rdmx.worker, m, start, length, &req->rdmx,
                           ompi_mtl_rdmx_callback, req);
    if (OPAL_LIKELY(RDMX_ERR_NO_RESOURCE != rc)) {
      break;
    }
    ompi_mtl_rdmx_progress();
  }
  if (OPAL_UNLIKELY(RDMX_OK != rc)) {
    return post_failed(req, rc);
  }
  /* pml cm leaves the message object to the MTL (as mtl_mxm and pml ob1 do). */
  ompi_message_return(*message);
  *message = MPI_MESSAGE_NULL;
  return OMPI_SUCCESS;
}

int ompi_mtl_rdmx_cancel(struct mca_mtl_base_module_t* mtl, mca_mtl_request_t* mtl_request,
                         int flag) {
  mca_mtl_rdmx_request_t* req = (mca_mtl_rdmx_request_t*)mtl_request;
  int rc;
  (void)mtl;
  (void)flag;
  if (MCA_MTL_RDMX_REQ_RECV != req->kind) {
    return OMPI_SUCCESS; /* sends are not cancelled: the request completes normally */
  }
  rc = rdmx_request_cancel(ompi_mtl_rdmx.worker, &req->rdmx);
  /* RDMX_OK: it completes with RDMX_ERR_CANCELED (_cancelled = true) on the next progress.
   * RDMX_ERR_BUSY: already matched (or done); it completes normally, not cancelled. */
  if (RDMX_OK != rc && RDMX_ERR_BUSY != rc) {
    opal_output_verbose(1, ompi_mtl_rdmx_output, "mtl rdmx: cancel failed: %s", rdmx_strerror(rc));
  }
  return OMPI_SUCCESS;
}
