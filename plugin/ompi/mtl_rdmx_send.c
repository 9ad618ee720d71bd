/*
 * Sends in every MPI mode. Standard, ready and buffered (pml cm has already copied a buffered
 * message into the attached buffer) are one rdmx send; synchronous adds RDMX_SEND_SYNC, so the
 * send completes only once the receiver has matched it. Contiguous data goes from the user's
 * buffer; other datatypes are packed once by Open MPI's MTL datatype helper.
 */
#include <stdlib.h>

#include "mtl_rdmx.h"
#include "mtl_rdmx_tag.h"
#include "ompi/mca/mtl/base/mtl_base_datatype.h"
#include "opal/runtime/opal_progress.h"
#include "opal/util/output.h"

static int send_start(struct ompi_communicator_t* comm, int dest, int tag,
                      struct opal_convertor_t* convertor, mca_pml_base_send_mode_t mode,
                      mca_mtl_rdmx_request_t* req) {
  struct ompi_proc_t* proc = ompi_comm_peer_lookup(comm, dest);
  const uint64_t rtag = mtl_rdmx_send_tag(comm->c_contextid, comm->c_my_rank, tag);
  /* MPI_Send returns with its bytes on the wire (and those of earlier MPI_Isends to the peer):
   * a process that computes after it must not hold back what its peer waits for. Bursts of
   * MPI_Isend are coalesced (rdmx_config_t.coalesce) and leave at the next MPI call. */
  const unsigned flags = ((MCA_PML_BASE_SEND_SYNCHRONOUS == mode) ? RDMX_SEND_SYNC : 0u) |
                         (MCA_MTL_RDMX_REQ_BLOCKING_SEND == req->kind ? RDMX_SEND_FLUSH : 0u);
  void* start = NULL;
  size_t length = 0;
  bool free_after = false;
  rdmx_ep_t* ep;
  int rc;

  rc = ompi_mtl_datatype_pack(convertor, &start, &length, &free_after);
  if (OPAL_UNLIKELY(OMPI_SUCCESS != rc)) {
    return rc;
  }
  req->buffer = free_after ? start : NULL;
  req->free_buffer = free_after;
  req->convertor = convertor;
  req->peer = proc;
  req->injected = false;

  /* An MPI_Send that leaves at once (the usual small one) needs no rdmx request: it is done on
   * return. Anything else (a connection being made, a full queue, a rendezvous size, a
   * synchronous send) goes through one. */
  if (MCA_MTL_RDMX_REQ_BLOCKING_SEND == req->kind && 0 == (flags & RDMX_SEND_SYNC)) {
    ep = ompi_mtl_rdmx_ep_of(proc);
    if (NULL != ep && RDMX_OK == rdmx_tag_inject(ep, start, length, rtag, flags)) {
      req->injected = true;
      req->status.error = RDMX_OK;
      return OMPI_SUCCESS;
    }
  }
  for (;;) {
    ep = ompi_mtl_rdmx_ep_of(proc);
    rc =
        (NULL == ep)
            ? RDMX_ERR_UNREACHABLE
            : rdmx_tag_send(
                  ep, start, length, rtag, flags, &req->rdmx,
                  MCA_MTL_RDMX_REQ_BLOCKING_SEND == req->kind ? NULL : ompi_mtl_rdmx_callback, req);
    if (OPAL_LIKELY(RDMX_ERR_NO_RESOURCE != rc)) {
      break;
    }
    ompi_mtl_rdmx_progress(); /* a send queue is full: let completions free it, retry */
  }
  if (OPAL_LIKELY(RDMX_OK == rc)) {
    return OMPI_SUCCESS;
  }

  if (free_after) {
    free(start);
  }
  req->buffer = NULL;
  req->free_buffer = false;
  if (RDMX_ERR_UNREACHABLE == rc) {
    ompi_mtl_rdmx_peer_unreachable(proc);
  } else {
    opal_output_verbose(1, ompi_mtl_rdmx_output,
                        "mtl rdmx: send of %zu bytes to rank %d (tag %d) failed: %s", length, dest,
                        tag, rdmx_strerror(rc));
  }
  return ompi_mtl_rdmx_error(rc);
}

int ompi_mtl_rdmx_send(struct mca_mtl_base_module_t* mtl, struct ompi_communicator_t* comm,
                       int dest, int tag, struct opal_convertor_t* convertor,
                       mca_pml_base_send_mode_t mode) {
  mca_mtl_rdmx_request_t req;
  int rc;
  (void)mtl;
  /* No pml request behind a blocking send: the request lives on this stack until done. Not
   * cleared: send_start sets every field this path reads, rdmx_tag_send writes req.rdmx and
   * rdmx_request_test fills req.status, or rdmx_tag_inject sent it (a memset of the whole request
   * was ~25 instructions of an 8-byte MPI_Send's ~1,250). */
  req.kind = MCA_MTL_RDMX_REQ_BLOCKING_SEND;
  rc = send_start(comm, dest, tag, convertor, mode, &req);
  if (OPAL_UNLIKELY(OMPI_SUCCESS != rc)) {
    return rc;
  }
  /* No callback: an eager send is done when rdmx_tag_send returns (rdmx took the data), so
   * MPI_Send returns without a progress call. Bounded: a peer that died fails the request. */
  while (!req.injected) {
    rc = rdmx_request_test(&req.rdmx, &req.status); /* no lock: rdmx reads the state atomically */
    if (RDMX_INPROGRESS != rc) {
      break;
    }
    opal_progress();
  }
  if (req.free_buffer) {
    free(req.buffer);
  }
  if (OPAL_UNLIKELY(RDMX_ERR_UNREACHABLE == req.status.error)) {
    ompi_mtl_rdmx_peer_unreachable(req.peer);
  }
  return ompi_mtl_rdmx_error(req.status.error);
}

int ompi_mtl_rdmx_isend(struct mca_mtl_base_module_t* mtl, struct ompi_communicator_t* comm,
                        int dest, int tag, struct opal_convertor_t* convertor,
                        mca_pml_base_send_mode_t mode, bool blocking,
                        mca_mtl_request_t* mtl_request) {
  mca_mtl_rdmx_request_t* req = (mca_mtl_rdmx_request_t*)mtl_request;
  (void)mtl;
  (void)blocking;
  req->kind = MCA_MTL_RDMX_REQ_SEND;
  return send_start(comm, dest, tag, convertor, mode, req);
}
