/*
 * The UCT transports rdmx_rc and rdmx_ud: one rdmx worker (include/rdmx/rdmx.h) per UCT
 * interface, of transport RC or UD, and UCT's active messages carried as rdmx messages.
 *
 *   tag            bits 0..7 the AM id; bit 8 set: a flush marker (no AM, never delivered)
 *   send           am_short hands header and payload to rdmx_tag_inject_header, am_bcopy
 *                  builds the AM in the next free send descriptor of the interface's pool
 *                  (tx_queue_len of seg_size bytes) and hands it to rdmx_tag_inject: either
 *                  sends it at once with no request (the descriptor stays free); when rdmx
 *                  cannot (a burst it packs, a full queue, a connection being made) a
 *                  descriptor is taken, holding the AM, and sent with rdmx_tag_send:
 *                  usually done inside the post, else (an AM larger than the worker sends
 *                  eagerly goes by rdmx's rendezvous, an RDMA write into the peer's posted
 *                  receive) it waits in the in-flight queue until progress finds it done.
 *                  Descriptors are reused last in, first out. An empty pool is
 *                  UCS_ERR_NO_RESOURCE, and UCP's pending requests run as descriptors come
 *                  back.
 *   receive        rx_queue_len descriptors of seg_size bytes in a ring, given to rdmx as its
 *                  receive sink (rdmx_worker_set_recv_sink): each arriving message takes the next
 *                  one as its receive, with no matching and no receive posted ahead. Progress
 *                  runs the worker, then hands the finished receives to the AM handlers in ring
 *                  order, which is arrival order: rdmx delivers one sender's messages in order
 *                  (MPI's non-overtaking rule), so each endpoint's AMs arrive in order, a
 *                  rendezvous one (an AM larger than rdmx sends eagerly) holding back those
 *                  behind it until its data is in. With every descriptor taken, a message waits
 *                  in rdmx's unexpected queue (nothing is dropped), and descriptors coming back
 *                  are posted as wildcard receives for them, oldest first, until none waits;
 *                  rdmx gives the sink no message while one waits, so order holds.
 *   flush          a zero-byte synchronous send (RDMX_SEND_SYNC) after the endpoint's messages:
 *                  it completes once the peer has matched it, so every message before it has
 *                  been matched there too; and the endpoint's sends rdmx still holds (a
 *                  rendezvous writing its data) must be done (remote completion, as UCT's flush
 *                  promises). With UCT_FLUSH_FLAG_CANCEL (UCP discarding the endpoint) no
 *                  marker: only the sends rdmx still holds must end.
 *   peer failure   rdmx's peer-failure callback (a peer found dead: a send that failed or made no
 *                  progress, liveness probes unanswered, within RDMX_PEER_TIMEOUT_MS) records
 *                  the uid; progress then fails the endpoints to that peer (their flushes, and
 *                  every later one, end with UCS_ERR_ENDPOINT_TIMEOUT) and reports each through
 *                  uct_iface_handle_ep_err, outside rdmx, since UCP's handler discards them.
 *   address        the worker's blob split into a device and an interface address (tl_address.h),
 *                  the interface's SEG_SIZE after the latter: a peer whose AMs would not fit in
 *                  this one's receives (or the other way) is unreachable, with a message, rather
 *                  than a source of truncated AMs. Connect-to-interface: rdmx sets RC
 *                  connections up on demand itself.
 *
 *   put / get      put_zcopy and get_zcopy are rdmx_put and rdmx_get (an RDMA write or read on
 *                  the peer's RC connection; over rdmx_ud on rdmx's on-demand RC connection to
 *                  the peer, as its rendezvous writes), so UCP's rendezvous moves data zero-copy.
 *                  The interface attaches its worker's PD to the MD (domain.h): a memh's lkey in
 *                  that PD, and the rkey of the peer's worker from the unpacked key. put_short,
 *                  put_bcopy and get_bcopy (UCP's put/get API for small sizes) go through the
 *                  interface's bounce buffers, registered in the worker's PD. Each is an
 *                  operation descriptor whose rdmx callback (inside rdmx's progress) only
 *                  queues it; progress then runs the UCT completion (a get_bcopy's unpack
 *                  first). A connection still being set up or a full send queue is
 *                  UCS_ERR_NO_RESOURCE, and the endpoint takes pending requests until the next
 *                  progress. They count in the endpoint's in-flight sends, which a flush waits
 *                  for.
 *   fence          a flush without completion: later sends, puts and gets on the endpoint wait
 *                  (UCS_ERR_NO_RESOURCE, pending) until everything before the fence is done at
 *                  the peer (an AM and a put go on different QPs, so nothing orders them else).
 *
 * Handlers run from uct_iface_progress, never from inside rdmx (rdmx callbacks must not call
 * rdmx; a handler sends). am_zcopy over rdmx_rc only (rdmx_tag_send_zcopy): one SEND gathers
 * rdmx's header and UCP's from a bounce buffer and the payload from the caller's registered
 * memory, and completes on its work completion. Over UD, rdmx keeps a copy of every message to
 * resend it, so a zcopy would be a bcopy by another name. What rdmx cannot send that way at once
 * (earlier AMs waiting in rdmx, the peer's credits, a full send queue, no free operation
 * descriptor) goes by a copy, as am_bcopy, and completes at once. UCP's rendezvous takes the
 * larger ones zero-copy by get_zcopy. No get_short (rc_verbs has none).
 */
/* UCX's internal headers read their build configuration (ENABLE_DEBUG_DATA ...). */
#include "config.h"
/* clang-format off: config.h must come first. */
#include <ucs/debug/log.h>
#include <ucs/sys/string.h>
#include <ucs/type/class.h>
#include <uct/base/uct_iface.h>
#include <uct/base/uct_md.h>
/* clang-format on */

#include <inttypes.h>
#include <limits.h>
#include <rdmx/rdmx.h>
#include <stdlib.h>
#include <string.h>

#include <uct/base/uct_iov.inl>

#include "plugin/ucx/tl_glue.h"

#define RDMX_TAG_FLUSH (1ull << 8)
#define RDMX_TAG_AM_MASK 0xffull
/* Descriptors start on cache lines: rdmx copies into and out of their data. */
#define RDMX_DESC_ALIGN 64
/* Put/get short and bcopy go through bounce buffers registered in the worker's PD: this many
 * of this size. UCP takes bcopy only below its zcopy threshold (a few KiB), so UCX rc_verbs's
 * default SEG_SIZE; put_short up to RDMX_RMA_SHORT, as rc_verbs's inline puts on adapters. */
#define RDMX_RMA_BOUNCE_SIZE 8192
#define RDMX_RMA_BOUNCES 64
#define RDMX_RMA_SHORT 256

typedef struct uct_rdmx_iface_config {
  uct_iface_config_t super;
  size_t seg_size;
  unsigned rx_queue_len;
  unsigned tx_queue_len;
} uct_rdmx_iface_config_t;

/* A send descriptor: the request rdmx owns while the send is active, then seg_size bytes. */
typedef struct uct_rdmx_tx_desc {
  rdmx_request_t req;
  ucs_queue_elem_t elem; /* the free list or the in-flight queue */
  struct uct_rdmx_ep* ep;
} uct_rdmx_tx_desc_t;

typedef struct uct_rdmx_rx_desc {
  rdmx_request_t req;
} uct_rdmx_rx_desc_t;

/* A flush marker in flight, and a flush call waiting for one. */
typedef struct uct_rdmx_marker {
  rdmx_request_t req;
  ucs_queue_elem_t elem;
  uint64_t seq;
} uct_rdmx_marker_t;

/* A put, get or am_zcopy in flight, or done and queued for progress to complete. */
typedef struct uct_rdmx_rma_op {
  rdmx_request_t req;
  ucs_queue_elem_t elem; /* the free list or the done queue */
  struct uct_rdmx_iface* iface;
  struct uct_rdmx_ep* ep; /* NULL once the endpoint is gone */
  uct_completion_t* comp;
  ucs_status_t status;             /* once done */
  void* bounce;                    /* short and bcopy: the bounce buffer it holds; else NULL */
  uct_unpack_callback_t unpack_cb; /* get_bcopy: hands the data over; NULL once the ep is gone */
  void* unpack_arg;
  size_t length;
} uct_rdmx_rma_op_t;

typedef struct uct_rdmx_flush_waiter {
  ucs_queue_elem_t elem;
  uct_completion_t* comp;
  uint64_t seq;
  ucs_status_t status; /* once done */
} uct_rdmx_flush_waiter_t;

typedef struct uct_rdmx_iface {
  uct_base_iface_t super;
  rdmx_worker_t* worker;
  rdmx_transport_t transport;
  size_t seg_size;   /* the largest AM (am_bcopy) */
  size_t short_size; /* the largest AM rdmx sends eagerly (am_short) */
  size_t desc_size;  /* bytes per descriptor, data included */
  char* tx_mem;      /* tx_queue_len descriptors */
  ucs_queue_head_t tx_free;
  ucs_queue_head_t tx_inflight;
  char* rx_mem; /* rx_queue_len descriptors */
  unsigned rx_count;
  unsigned rx_head; /* the oldest receive not handed over */
  unsigned rx_tail; /* the next descriptor to receive into */
  unsigned rx_used; /* descriptors from rx_head to rx_tail */
  int rx_starved;   /* the sink had none: messages may wait in rdmx's unexpected queue */
  ucs_list_link_t eps;
  unsigned pending_count;          /* pending requests on all endpoints */
  uint64_t progress_epoch;         /* progress calls, from 1 */
  unsigned flushing_eps;           /* endpoints with markers or waiters */
  ucs_queue_head_t orphan_markers; /* of destroyed endpoints, until rdmx is done with them */
  uint8_t device_addr[32];
  uint8_t iface_addr[64]; /* the worker's part (tl_address.h); SEG_SIZE follows */
  int warned_seg_size;
  double bandwidth;
  uint64_t* dead_uids; /* peers rdmx found dead, not yet handled by progress */
  unsigned dead_count;
  unsigned dead_capacity;
  /* Put and get (with an MD slot; else md_slot -1 and no operations). */
  int md_slot;
  size_t max_rma; /* the port's largest message */
  uct_rdmx_rma_op_t* rma_ops;
  unsigned rma_count;
  ucs_queue_head_t rma_free;
  ucs_queue_head_t rma_done;
  char* bounce_mem; /* RDMX_RMA_BOUNCES buffers; NULL: no put/get short or bcopy */
  void* bounce_mr;  /* its registration in the worker's PD */
  uint32_t bounce_lkey;
  void* bounce_free[RDMX_RMA_BOUNCES]; /* a stack: the warm ones first */
  unsigned bounce_top;
  uint64_t am_zcopy_copied; /* am_zcopys rdmx_tag_send_zcopy refused, sent by a copy */
} uct_rdmx_iface_t;

typedef struct uct_rdmx_ep {
  uct_base_ep_t super;
  rdmx_ep_t* ep;
  uint64_t peer_uid;         /* the source rdmx names the peer by */
  ucs_status_t status;       /* UCS_OK, or why the endpoint failed (its peer found dead) */
  ucs_status_t flush_status; /* what its flushes end with: a failed marker's status sticks */
  ucs_list_link_t list;
  ucs_queue_head_t pending;
  int unflushed;      /* a message went since the last marker */
  unsigned inflight;  /* its sends rdmx still holds (rendezvous, queued), puts and gets */
  int fenced;         /* a fence waits for marker fence_seq and no inflight */
  int fence_rma;      /* the fence has puts or gets before it: AMs after it wait too */
  int rma_posted;     /* a put or get went since the last fence */
  uint64_t fence_seq; /* marker_seq + 1 while rdmx refused the fence's marker */
  /* rdmx refused an operation for want of a resource in this progress epoch: pending requests
   * wait for the next progress (which may bring the connection up or empty the queue). */
  uint64_t blocked_epoch;
  uint64_t marker_seq;  /* markers posted */
  uint64_t marker_done; /* markers matched by the peer (in order) */
  ucs_queue_head_t markers;
  ucs_queue_head_t waiters;
} uct_rdmx_ep_t;

static ucs_config_field_t uct_rdmx_iface_config_table[] = {
    {"", "", NULL, ucs_offsetof(uct_rdmx_iface_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_iface_config_table)},
    {"SEG_SIZE", "64k",
     "Largest active message (am_bcopy), and the size of each send and receive buffer of the "
     "interface. AMs up to what the rdmx worker sends eagerly (RDMX_LARGE_BUF over RC, the path "
     "MTU less rdmx's header over UD; also the largest am_short) go in its receive buffers; "
     "larger ones by its rendezvous, an RDMA write into the posted receive: UCP fragments "
     "large messages into AMs of this size, so it sets the bandwidth (on rxe: 8k 0.6x UCX's "
     "rc_verbs at 1 MiB, 64k 1.1x, 256k 1.2x). Buffers are used last-in first-out: their "
     "pages cost memory only once used. All peers must use the same value.",
     ucs_offsetof(uct_rdmx_iface_config_t, seg_size), UCS_CONFIG_TYPE_MEMUNITS},
    {"RX_QUEUE_LEN", "64",
     "Receives kept posted for incoming active messages; more wait in rdmx's unexpected queue.",
     ucs_offsetof(uct_rdmx_iface_config_t, rx_queue_len), UCS_CONFIG_TYPE_UINT},
    {"TX_QUEUE_LEN", "256",
     "Send buffers: sends beyond them are refused with UCS_ERR_NO_RESOURCE until some finish.",
     ucs_offsetof(uct_rdmx_iface_config_t, tx_queue_len), UCS_CONFIG_TYPE_UINT},
    {NULL}};

static uct_iface_ops_t uct_rdmx_iface_ops;

static ucs_status_t uct_rdmx_status(int code) {
  switch (code) {
    case RDMX_OK:
      return UCS_OK;
    case RDMX_INPROGRESS:
      return UCS_INPROGRESS;
    case RDMX_ERR_NO_RESOURCE:
      return UCS_ERR_NO_RESOURCE;
    case RDMX_ERR_NO_MEMORY:
      return UCS_ERR_NO_MEMORY;
    case RDMX_ERR_UNREACHABLE:
      return UCS_ERR_UNREACHABLE;
    case RDMX_ERR_CANCELED:
      return UCS_ERR_CANCELED;
    case RDMX_ERR_TIMED_OUT:
      return UCS_ERR_ENDPOINT_TIMEOUT;
    case RDMX_ERR_INVALID_PARAM:
    case RDMX_ERR_BAD_ADDRESS:
      return UCS_ERR_INVALID_PARAM;
    case RDMX_ERR_NO_DEVICE:
      return UCS_ERR_NO_DEVICE;
    case RDMX_ERR_UNSUPPORTED:
      return UCS_ERR_UNSUPPORTED;
    case RDMX_ERR_TRUNCATED:
      return UCS_ERR_MESSAGE_TRUNCATED;
    default:
      return UCS_ERR_IO_ERROR;
  }
}

/* The interface address: the worker's part, then SEG_SIZE (32 bits, little-endian). */
static size_t uct_rdmx_iface_addr_len(void) {
  return rdmx_ucx_tl_iface_address_size() + 4;
}

static uint32_t uct_rdmx_addr_seg_size(const void* iface_addr) {
  const uint8_t* p = (const uint8_t*)iface_addr + rdmx_ucx_tl_iface_address_size();
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* 1 when the peer's AMs and this interface's fit in each other's receives; else 0, and the
 * first time a message that names the setting. */
static int uct_rdmx_seg_size_matches(uct_rdmx_iface_t* iface, const void* iface_addr) {
  const uint32_t peer = uct_rdmx_addr_seg_size(iface_addr);
  if (peer == iface->seg_size) {
    return 1;
  }
  if (!iface->warned_seg_size) {
    iface->warned_seg_size = 1;
    ucs_warn(
        "rdmx_%s: a peer's SEG_SIZE is %u bytes, this process's %zu: the peer is not "
        "reached over rdmx_%s (its active messages would not fit the receives). Set the "
        "same UCX_RDMX_%s_SEG_SIZE in every process.",
        iface->transport == RDMX_TRANSPORT_RC ? "rc" : "ud", peer, iface->seg_size,
        iface->transport == RDMX_TRANSPORT_RC ? "rc" : "ud",
        iface->transport == RDMX_TRANSPORT_RC ? "RC" : "UD");
  }
  return 0;
}

static void* uct_rdmx_tx_data(uct_rdmx_tx_desc_t* desc) {
  return desc + 1;
}

static uct_rdmx_rx_desc_t* uct_rdmx_rx_desc(uct_rdmx_iface_t* iface, unsigned i) {
  return (uct_rdmx_rx_desc_t*)(iface->rx_mem + (size_t)i * iface->desc_size);
}

/* The descriptor the next message goes into, or NULL while every one is in use. */
static uct_rdmx_rx_desc_t* uct_rdmx_rx_next(uct_rdmx_iface_t* iface) {
  if (iface->rx_used == iface->rx_count) {
    return NULL;
  }
  return uct_rdmx_rx_desc(iface, iface->rx_tail);
}

/* The descriptor uct_rdmx_rx_next gave now receives a message. */
static void uct_rdmx_rx_taken(uct_rdmx_iface_t* iface) {
  iface->rx_tail = (iface->rx_tail + 1 == iface->rx_count) ? 0 : iface->rx_tail + 1;
  ++iface->rx_used;
}

/* rdmx's receive sink, inside rdmx's progress: an arriving message's receive. */
static rdmx_request_t* uct_rdmx_rx_sink(void* arg, void** buffer, size_t* capacity) {
  uct_rdmx_iface_t* iface = arg;
  uct_rdmx_rx_desc_t* rx = uct_rdmx_rx_next(iface);
  if (rx == NULL) {
    iface->rx_starved = 1;
    return NULL;
  }
  uct_rdmx_rx_taken(iface);
  *buffer = rx + 1;
  *capacity = iface->seg_size;
  return &rx->req;
}

/* After the sink had no descriptor: the messages waiting unexpected take free descriptors, as
 * wildcard receives posted for them (each matches the oldest at once), until none waits; then the
 * sink takes the next message again (rdmx gives it none while one waits, for order). */
static void uct_rdmx_rx_drain(uct_rdmx_iface_t* iface) {
  rdmx_status_t st;
  while (rdmx_tag_probe(iface->worker, RDMX_ANY_SOURCE, 0, 0, &st, NULL) == 1) {
    uct_rdmx_rx_desc_t* rx = uct_rdmx_rx_next(iface);
    int rc;
    if (rx == NULL) {
      return; /* more come back as the handlers run */
    }
    rc = rdmx_tag_recv(iface->worker, rx + 1, iface->seg_size, RDMX_ANY_SOURCE, 0, 0, &rx->req,
                       NULL, NULL);
    if (rc != RDMX_OK) {
      ucs_error(
          "rdmx: posting a receive for active messages failed: %s (retried at the next "
          "progress)",
          rdmx_strerror(rc));
      return;
    }
    uct_rdmx_rx_taken(iface);
  }
  iface->rx_starved = 0;
}

/* ---- sends ------------------------------------------------------------------------------- */

/* Last in, first out: the descriptors in use stay few and warm, and the pages of the others are
 * never touched (a large SEG_SIZE costs address space, not memory). */
static void uct_rdmx_tx_put(uct_rdmx_iface_t* iface, uct_rdmx_tx_desc_t* desc) {
  ucs_queue_push_head(&iface->tx_free, &desc->elem);
}

static uct_rdmx_tx_desc_t* uct_rdmx_tx_get(uct_rdmx_iface_t* iface) {
  if (ucs_queue_is_empty(&iface->tx_free)) {
    return NULL;
  }
  return ucs_queue_pull_elem_non_empty(&iface->tx_free, uct_rdmx_tx_desc_t, elem);
}

/* The next free descriptor, left in the pool: an AM that rdmx injects needs it only while the AM
 * is built in it (uct_rdmx_tx_send). */
static uct_rdmx_tx_desc_t* uct_rdmx_tx_peek(uct_rdmx_iface_t* iface) {
  if (ucs_queue_is_empty(&iface->tx_free)) {
    return NULL;
  }
  return ucs_queue_head_elem_non_empty(&iface->tx_free, uct_rdmx_tx_desc_t, elem);
}

static ucs_status_t uct_rdmx_ep_mark(uct_ep_h tl_ep, unsigned flags, uct_completion_t* comp);

/* uct_rdmx_ep_fence_blocked's answer for an endpoint with a fence set. */
static UCS_F_NOINLINE int uct_rdmx_ep_fence_wait(uct_rdmx_ep_t* ep, int rma) {
  if (ep->marker_seq < ep->fence_seq) {
    (void)uct_rdmx_ep_mark(&ep->super.super, 0, NULL);
  }
  if (ep->marker_done >= ep->fence_seq && ep->inflight == 0) {
    ep->fenced = 0;
    ep->fence_rma = 0;
    return 0;
  }
  return rma || ep->fence_rma;
}

/* Whether an operation (a put or get when `rma`, else an AM or a flush) must wait for the
 * endpoint's fence, which ends when everything before it is done at the peer. AMs arrive in
 * order by themselves (rdmx keeps MPI's order per peer), so an AM waits only for the puts and
 * gets before the fence, which go on another QP; a put or get waits for everything. A fence whose
 * marker rdmx refused posts it here. The test is inline, the fenced case out of line: every AM,
 * put and get asks (-6 instructions per am_short, callgrind). */
static UCS_F_ALWAYS_INLINE int uct_rdmx_ep_fence_blocked(uct_rdmx_ep_t* ep, int rma) {
  return ucs_unlikely(ep->fenced) ? uct_rdmx_ep_fence_wait(ep, rma) : 0;
}

/* Sends `length` bytes of the descriptor's data as AM `id`. The descriptor is the interface's
 * again when this returns, unless the send is still active. */
static ucs_status_t uct_rdmx_tx_post(uct_rdmx_iface_t* iface, uct_rdmx_ep_t* ep,
                                     uct_rdmx_tx_desc_t* desc, size_t length, uint8_t id) {
  rdmx_status_t st;
  int rc = rdmx_tag_send(ep->ep, uct_rdmx_tx_data(desc), length, id, 0, &desc->req, NULL, NULL);
  if (rc != RDMX_OK) {
    uct_rdmx_tx_put(iface, desc);
    if (rc == RDMX_ERR_NO_RESOURCE) {
      ep->blocked_epoch = iface->progress_epoch; /* connection not up yet, or queue full */
    }
    return uct_rdmx_status(rc);
  }
  ep->unflushed = 1;
  rc = rdmx_request_test(&desc->req, &st);
  if (rc == RDMX_INPROGRESS) {
    desc->ep = ep;
    ++ep->inflight;
    ucs_queue_push(&iface->tx_inflight, &desc->elem);
  } else {
    if (rc != RDMX_OK) {
      ucs_error("rdmx: an active message (id %u, %zu bytes) failed: %s", id, length,
                rdmx_strerror(rc));
    }
    uct_rdmx_tx_put(iface, desc);
  }
  return UCS_OK;
}

/* An injected AM's result other than RDMX_OK and RDMX_ERR_NO_RESOURCE. */
static ucs_status_t uct_rdmx_inject_failed(int rc, uint8_t id, size_t length) {
  if (rc == RDMX_ERR_IO) { /* a dead peer's status (unreachable) says enough by itself */
    ucs_error("rdmx: an active message (id %u, %zu bytes) failed: %s", id, length,
              rdmx_strerror(rc));
  }
  return uct_rdmx_status(rc);
}

/* Sends `length` bytes built in `desc`, the pool's next free descriptor (uct_rdmx_tx_peek), as
 * AM `id`. Injected when rdmx sends it at once, with no request: the descriptor stays free. Else
 * (a burst rdmx packs, a connection still being made, a full queue, a rendezvous size) through a
 * request, which holds the descriptor until the send is done. */
static ucs_status_t uct_rdmx_tx_send(uct_rdmx_iface_t* iface, uct_rdmx_ep_t* ep,
                                     uct_rdmx_tx_desc_t* desc, size_t length, uint8_t id) {
  const int rc = rdmx_tag_inject(ep->ep, uct_rdmx_tx_data(desc), length, id, 0);
  if (ucs_likely(rc == RDMX_OK)) {
    ep->unflushed = 1;
    return UCS_OK;
  }
  if (rc == RDMX_ERR_NO_RESOURCE) {
    return uct_rdmx_tx_post(iface, ep, uct_rdmx_tx_get(iface), length, id);
  }
  return uct_rdmx_inject_failed(rc, id, length);
}

/* Header and payload go from the caller straight into rdmx's image of the message
 * (rdmx_tag_inject_header: a ping-pong's every AM), with no descriptor; one is built only when
 * rdmx cannot send the AM at once, and then goes as in uct_rdmx_tx_send. */
static ucs_status_t uct_rdmx_ep_am_short(uct_ep_h tl_ep, uint8_t id, uint64_t header,
                                         const void* payload, unsigned length) {
  uct_rdmx_ep_t* ep = ucs_derived_of(tl_ep, uct_rdmx_ep_t);
  uct_rdmx_iface_t* iface = ucs_derived_of(tl_ep->iface, uct_rdmx_iface_t);
  uct_rdmx_tx_desc_t* desc;
  const size_t total = sizeof(header) + length;
  int rc;

  UCT_CHECK_AM_ID(id);
  UCT_CHECK_LENGTH(total, 0, iface->short_size, "am_short");
  /* An empty pool refuses even an AM that needs no descriptor: UCP's pending requests, which
   * wait for descriptors, must not be overtaken. */
  if (uct_rdmx_ep_fence_blocked(ep, 0) || ucs_queue_is_empty(&iface->tx_free)) {
    return UCS_ERR_NO_RESOURCE;
  }
  UCT_TL_EP_STAT_OP(&ep->super, AM, SHORT, total);
  rc = rdmx_tag_inject_header(ep->ep, header, payload, length, id, 0);
  if (ucs_likely(rc == RDMX_OK)) {
    ep->unflushed = 1;
    return UCS_OK;
  }
  if (rc != RDMX_ERR_NO_RESOURCE) {
    return uct_rdmx_inject_failed(rc, id, total);
  }
  desc = uct_rdmx_tx_get(iface);
  uct_am_short_fill_data(uct_rdmx_tx_data(desc), header, payload, length);
  return uct_rdmx_tx_post(iface, ep, desc, total, id);
}

static ssize_t uct_rdmx_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id, uct_pack_callback_t pack_cb,
                                    void* arg, unsigned flags) {
  uct_rdmx_ep_t* ep = ucs_derived_of(tl_ep, uct_rdmx_ep_t);
  uct_rdmx_iface_t* iface = ucs_derived_of(tl_ep->iface, uct_rdmx_iface_t);
  uct_rdmx_tx_desc_t* desc;
  ucs_status_t status;
  size_t length;

  (void)flags;
  UCT_CHECK_AM_ID(id);
  if (uct_rdmx_ep_fence_blocked(ep, 0)) {
    return UCS_ERR_NO_RESOURCE;
  }
  desc = uct_rdmx_tx_peek(iface);
  if (desc == NULL) {
    return UCS_ERR_NO_RESOURCE;
  }
  length = pack_cb(uct_rdmx_tx_data(desc), arg);
  /* The caller packed past max_bcopy: a bug of its own, which has already written past the
   * descriptor's data (into the next descriptor's header at most by what it overran). */
  ucs_assertv_always(length <= iface->seg_size, "rdmx: am_bcopy packed %zu bytes, max_bcopy %zu",
                     length, iface->seg_size);
  UCT_TL_EP_STAT_OP(&ep->super, AM, BCOPY, length);
  status = uct_rdmx_tx_send(iface, ep, desc, length, id);
  return (status == UCS_OK) ? (ssize_t)length : status;
}

/* ---- put and get ------------------------------------------------------------------------- */

/* rdmx's callback of a put, get or am_zcopy, inside rdmx_worker_progress: only queues it (rdmx must
 * not be called from here, and a UCT completion may send). */
static void uct_rdmx_rma_done(rdmx_request_t* req, const rdmx_status_t* status, void* arg) {
  uct_rdmx_rma_op_t* op = arg;
  (void)req;
  op->status = uct_rdmx_status(status->error);
  ucs_queue_push(&op->iface->rma_done, &op->elem);
}

/* Completes the puts, gets and am_zcopys rdmx finished: the endpoints' counts first, then the UCT
 * completions (which may post, or destroy endpoints). */
static unsigned uct_rdmx_rma_progress(uct_rdmx_iface_t* iface) {
  ucs_queue_head_t done;
  unsigned count = 0;

  if (ucs_queue_is_empty(&iface->rma_done)) {
    return 0;
  }
  ucs_queue_head_init(&done);
  ucs_queue_splice(&done, &iface->rma_done);
  while (!ucs_queue_is_empty(&done)) {
    uct_rdmx_rma_op_t* op = ucs_queue_pull_elem_non_empty(&done, uct_rdmx_rma_op_t, elem);
    uct_completion_t* comp = op->comp;
    const ucs_status_t status = op->status;
    if (op->ep != NULL) {
      --op->ep->inflight;
    }
    if (status != UCS_OK) {
      ucs_debug("rdmx: a put, get or am_zcopy failed: %s", ucs_status_string(status));
    } else if (op->unpack_cb != NULL) {
      op->unpack_cb(op->unpack_arg, op->bounce, op->length);
    }
    if (op->bounce != NULL) {
      iface->bounce_free[iface->bounce_top++] = op->bounce;
    }
    op->ep = NULL;
    op->bounce = NULL;
    op->unpack_cb = NULL;
    ucs_queue_push_head(&iface->rma_free, &op->elem);
    if (comp != NULL) {
      uct_invoke_completion(comp, status);
    }
    ++count;
  }
  return count;
}

/* Takes an operation descriptor for a put or get of `length` bytes (max `max`) at the peer's
 * `rkey`, and a bounce buffer when `bounce`: UCS_OK with *op_p and the peer worker's rkey, or why
 * not (UCS_ERR_NO_RESOURCE: the endpoint takes pending requests). */
static ucs_status_t uct_rdmx_rma_begin(uct_rdmx_ep_t* ep, uct_rdmx_iface_t* iface, const char* name,
                                       size_t length, size_t max, uct_rkey_t rkey, int bounce,
                                       uct_rdmx_rma_op_t** op_p, uint32_t* peer_rkey) {
  uct_rdmx_rma_op_t* op;

  if (iface->rma_ops == NULL || (bounce && iface->bounce_mem == NULL)) {
    return UCS_ERR_UNSUPPORTED; /* not offered (iface_query): no MD slot */
  }
  UCT_CHECK_LENGTH(length, 0, max, name);
  if (ep->status != UCS_OK) {
    return ep->status;
  }
  if (!rdmx_ucx_rkey_for(rkey, ep->peer_uid, peer_rkey)) {
    ucs_error("rdmx: %s: the remote key has no entry for the peer's worker (uid 0x%" PRIx64
              "): it was packed by a process whose MD has more than %d rdmx interfaces",
              name, ep->peer_uid, RDMX_UCX_MAX_RMA_IFACES);
    return UCS_ERR_INVALID_PARAM;
  }
  if (uct_rdmx_ep_fence_blocked(ep, 1) || ucs_queue_is_empty(&iface->rma_free) ||
      (bounce && iface->bounce_top == 0)) {
    return UCS_ERR_NO_RESOURCE;
  }
  op = ucs_queue_pull_elem_non_empty(&iface->rma_free, uct_rdmx_rma_op_t, elem);
  op->bounce = bounce ? iface->bounce_free[--iface->bounce_top] : NULL;
  op->unpack_cb = NULL;
  *op_p = op;
  return UCS_OK;
}

/* Gives an operation taken by uct_rdmx_rma_begin back unused. */
static void uct_rdmx_rma_drop(uct_rdmx_iface_t* iface, uct_rdmx_rma_op_t* op) {
  if (op->bounce != NULL) {
    iface->bounce_free[iface->bounce_top++] = op->bounce;
    op->bounce = NULL;
  }
  ucs_queue_push_head(&iface->rma_free, &op->elem);
}

/* Posts the operation: an RDMA read into, or write from, [buffer, +length) (lkey in the worker's
 * PD) at the peer's remote_addr. UCS_INPROGRESS, or why not (the operation dropped). */
static ucs_status_t uct_rdmx_rma_post(uct_rdmx_ep_t* ep, uct_rdmx_rma_op_t* op, int get,
                                      void* buffer, size_t length, uint32_t lkey,
                                      uint64_t remote_addr, uint32_t peer_rkey,
                                      uct_completion_t* comp) {
  const int rc = get ? rdmx_get(ep->ep, buffer, length, lkey, remote_addr, peer_rkey, &op->req,
                                uct_rdmx_rma_done, op)
                     : rdmx_put(ep->ep, buffer, length, lkey, remote_addr, peer_rkey, &op->req,
                                uct_rdmx_rma_done, op);
  if (rc != RDMX_OK) {
    uct_rdmx_rma_drop(op->iface, op);
    if (rc == RDMX_ERR_NO_RESOURCE) {
      ep->blocked_epoch = op->iface->progress_epoch; /* connection not up yet, or queue full */
    }
    return uct_rdmx_status(rc);
  }
  op->ep = ep;
  op->comp = comp;
  op->length = length;
  ++ep->inflight;
  ep->rma_posted = 1;
  return UCS_INPROGRESS;
}

static ucs_status_t uct_rdmx_ep_rma_zcopy(uct_ep_h tl_ep, int get, const uct_iov_t* iov,
                                          size_t iovcnt, uint64_t remote_addr, uct_rkey_t rkey,
                                          uct_completion_t* comp) {
  uct_rdmx_ep_t* ep = ucs_derived_of(tl_ep, uct_rdmx_ep_t);
  uct_rdmx_iface_t* iface = ucs_derived_of(tl_ep->iface, uct_rdmx_iface_t);
  const char* name = get ? "get_zcopy" : "put_zcopy";
  const size_t length = uct_iov_total_length(iov, iovcnt);
  uct_rdmx_rma_op_t* op;
  uint32_t lkey = 0, peer_rkey;
  ucs_status_t status;

  UCT_CHECK_IOV_SIZE(iovcnt, 1, name);
  if (length == 0) {
    return UCS_OK; /* nothing moves */
  }
  if (iov[0].count > 1) {
    ucs_error("rdmx: %s: a strided iov (count %u) is not supported", name, iov[0].count);
    return UCS_ERR_UNSUPPORTED;
  }
  if (iface->rma_ops != NULL && !rdmx_ucx_memh_lkey(iov[0].memh, iface->md_slot, &lkey)) {
    ucs_error("rdmx: %s: the local buffer's memh is not a registration of this MD", name);
    return UCS_ERR_INVALID_PARAM;
  }
  status = uct_rdmx_rma_begin(ep, iface, name, length, iface->max_rma, rkey, 0, &op, &peer_rkey);
  if (status != UCS_OK) {
    return status;
  }
  status =
      uct_rdmx_rma_post(ep, op, get, iov[0].buffer, length, lkey, remote_addr, peer_rkey, comp);
  if (status == UCS_INPROGRESS) {
    if (get) {
      UCT_TL_EP_STAT_OP(&ep->super, GET, ZCOPY, length);
    } else {
      UCT_TL_EP_STAT_OP(&ep->super, PUT, ZCOPY, length);
    }
  }
  return status;
}

static ucs_status_t uct_rdmx_ep_put_zcopy(uct_ep_h tl_ep, const uct_iov_t* iov, size_t iovcnt,
                                          uint64_t remote_addr, uct_rkey_t rkey,
                                          uct_completion_t* comp) {
  return uct_rdmx_ep_rma_zcopy(tl_ep, 0, iov, iovcnt, remote_addr, rkey, comp);
}

static ucs_status_t uct_rdmx_ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t* iov, size_t iovcnt,
                                          uint64_t remote_addr, uct_rkey_t rkey,
                                          uct_completion_t* comp) {
  return uct_rdmx_ep_rma_zcopy(tl_ep, 1, iov, iovcnt, remote_addr, rkey, comp);
}

/* The header and the caller's registered payload go as one message by rdmx_tag_send_zcopy (a
 * SEND of two SGEs: the payload is not copied), completed by its send completion as a put is
 * (an operation descriptor; progress runs `comp`). Where rdmx cannot send it at once (earlier AMs
 * wait in rdmx, the peer's credits, a full send queue) or no operation descriptor is free (puts
 * and gets hold them all), the AM is copied into a send descriptor and goes as am_bcopy's does:
 * UCS_OK, the buffer is the caller's again at once. So an AM is refused only for what refuses
 * every AM (no send descriptor, a fence), and a pending one is never overtaken by a later
 * am_short. */
static ucs_status_t uct_rdmx_ep_am_zcopy(uct_ep_h tl_ep, uint8_t id, const void* header,
                                         unsigned header_length, const uct_iov_t* iov,
                                         size_t iovcnt, unsigned flags, uct_completion_t* comp) {
  uct_rdmx_ep_t* ep = ucs_derived_of(tl_ep, uct_rdmx_ep_t);
  uct_rdmx_iface_t* iface = ucs_derived_of(tl_ep->iface, uct_rdmx_iface_t);
  const size_t length = uct_iov_total_length(iov, iovcnt);
  const size_t total = header_length + length;
  const void* payload = (iovcnt != 0) ? iov[0].buffer : NULL;
  uct_rdmx_tx_desc_t* desc;
  uct_rdmx_rma_op_t* op;
  uint32_t lkey = 0;
  int rc;

  (void)flags;
  UCT_CHECK_AM_ID(id);
  UCT_CHECK_IOV_SIZE(iovcnt, 1, "am_zcopy");
  UCT_CHECK_LENGTH(header_length, 0, RDMX_ZCOPY_MAX_HEAD, "am_zcopy header");
  UCT_CHECK_LENGTH(total, 0, iface->short_size, "am_zcopy");
  if (iovcnt != 0 && iov[0].count > 1) {
    ucs_error("rdmx: am_zcopy: a strided iov (count %u) is not supported", iov[0].count);
    return UCS_ERR_UNSUPPORTED;
  }
  if (iface->rma_ops == NULL) {
    return UCS_ERR_UNSUPPORTED; /* no MD slot: iface_query did not offer it */
  }
  if (length != 0 && !rdmx_ucx_memh_lkey(iov[0].memh, iface->md_slot, &lkey)) {
    ucs_error("rdmx: am_zcopy: the payload's memh is not a registration of this MD");
    return UCS_ERR_INVALID_PARAM;
  }
  if (uct_rdmx_ep_fence_blocked(ep, 0)) {
    return UCS_ERR_NO_RESOURCE;
  }
  /* The send descriptor the copy fallback takes: it stays the pool's head until then (rdmx runs
   * no UCT callback outside progress). */
  desc = uct_rdmx_tx_peek(iface);
  if (desc == NULL) {
    return UCS_ERR_NO_RESOURCE;
  }
  UCT_TL_EP_STAT_OP(&ep->super, AM, ZCOPY, total);
  if (ucs_likely(!ucs_queue_is_empty(&iface->rma_free))) {
    op = ucs_queue_pull_elem_non_empty(&iface->rma_free, uct_rdmx_rma_op_t, elem);
    op->bounce = NULL;
    op->unpack_cb = NULL;
    rc = rdmx_tag_send_zcopy(ep->ep, header, header_length, payload, length, lkey, id, &op->req,
                             uct_rdmx_rma_done, op);
    if (ucs_likely(rc == RDMX_OK)) {
      op->ep = ep;
      op->comp = comp;
      ++ep->inflight;
      ep->unflushed = 1;
      return UCS_INPROGRESS;
    }
    uct_rdmx_rma_drop(iface, op);
    if (rc != RDMX_ERR_NO_RESOURCE && rc != RDMX_ERR_UNSUPPORTED) {
      return uct_rdmx_inject_failed(rc, id, total);
    }
  }
  ++iface->am_zcopy_copied;
  if (header_length != 0) {
    memcpy(uct_rdmx_tx_data(desc), header, header_length);
  }
  if (length != 0) {
    memcpy(UCS_PTR_BYTE_OFFSET(uct_rdmx_tx_data(desc), header_length), payload, length);
  }
  return uct_rdmx_tx_send(iface, ep, desc, total, id);
}

/* put_short and put_bcopy: the data copied into a bounce buffer, which the write reads after
 * the call returns (the caller's buffer is free at once, as UCT promises); flush waits for it. */
static ucs_status_t uct_rdmx_ep_put_short(uct_ep_h tl_ep, const void* buffer, unsigned length,
                                          uint64_t remote_addr, uct_rkey_t rkey) {
  uct_rdmx_ep_t* ep = ucs_derived_of(tl_ep, uct_rdmx_ep_t);
  uct_rdmx_iface_t* iface = ucs_derived_of(tl_ep->iface, uct_rdmx_iface_t);
  uct_rdmx_rma_op_t* op;
  uint32_t peer_rkey;
  ucs_status_t status;

  status =
      uct_rdmx_rma_begin(ep, iface, "put_short", length, RDMX_RMA_SHORT, rkey, 1, &op, &peer_rkey);
  if (status != UCS_OK) {
    return status;
  }
  memcpy(op->bounce, buffer, length);
  status = uct_rdmx_rma_post(ep, op, 0, op->bounce, length, iface->bounce_lkey, remote_addr,
                             peer_rkey, NULL);
  if (status != UCS_INPROGRESS) {
    return status;
  }
  UCT_TL_EP_STAT_OP(&ep->super, PUT, SHORT, length);
  return UCS_OK;
}

static ssize_t uct_rdmx_ep_put_bcopy(uct_ep_h tl_ep, uct_pack_callback_t pack_cb, void* arg,
                                     uint64_t remote_addr, uct_rkey_t rkey) {
  uct_rdmx_ep_t* ep = ucs_derived_of(tl_ep, uct_rdmx_ep_t);
  uct_rdmx_iface_t* iface = ucs_derived_of(tl_ep->iface, uct_rdmx_iface_t);
  uct_rdmx_rma_op_t* op;
  uint32_t peer_rkey;
  ucs_status_t status;
  size_t length;

  status =
      uct_rdmx_rma_begin(ep, iface, "put_bcopy", 0, RDMX_RMA_BOUNCE_SIZE, rkey, 1, &op, &peer_rkey);
  if (status != UCS_OK) {
    return status;
  }
  length = pack_cb(op->bounce, arg);
  /* As am_bcopy: packing past max_bcopy is the caller's bug, and has overrun the buffer. */
  ucs_assertv_always(length <= RDMX_RMA_BOUNCE_SIZE,
                     "rdmx: put_bcopy packed %zu bytes, max_bcopy %d", length,
                     RDMX_RMA_BOUNCE_SIZE);
  status = uct_rdmx_rma_post(ep, op, 0, op->bounce, length, iface->bounce_lkey, remote_addr,
                             peer_rkey, NULL);
  if (status != UCS_INPROGRESS) {
    return status;
  }
  UCT_TL_EP_STAT_OP(&ep->super, PUT, BCOPY, length);
  return (ssize_t)length;
}

/* get_bcopy: read into a bounce buffer; progress hands the data to unpack_cb, then completes. */
static ucs_status_t uct_rdmx_ep_get_bcopy(uct_ep_h tl_ep, uct_unpack_callback_t unpack_cb,
                                          void* arg, size_t length, uint64_t remote_addr,
                                          uct_rkey_t rkey, uct_completion_t* comp) {
  uct_rdmx_ep_t* ep = ucs_derived_of(tl_ep, uct_rdmx_ep_t);
  uct_rdmx_iface_t* iface = ucs_derived_of(tl_ep->iface, uct_rdmx_iface_t);
  uct_rdmx_rma_op_t* op;
  uint32_t peer_rkey;
  ucs_status_t status;

  status = uct_rdmx_rma_begin(ep, iface, "get_bcopy", length, RDMX_RMA_BOUNCE_SIZE, rkey, 1, &op,
                              &peer_rkey);
  if (status != UCS_OK) {
    return status;
  }
  status = uct_rdmx_rma_post(ep, op, 1, op->bounce, length, iface->bounce_lkey, remote_addr,
                             peer_rkey, comp);
  if (status == UCS_INPROGRESS) {
    op->unpack_cb = unpack_cb;
    op->unpack_arg = arg;
    UCT_TL_EP_STAT_OP(&ep->super, GET, BCOPY, length);
  }
  return status;
}

/* ---- fence ------------------------------------------------------------------------------- */

/* A flush without completion whose end later operations wait for (uct_rdmx_ep_fence_blocked).
 * Nothing to order without puts and gets (AMs arrive in order); nothing to wait for when
 * everything before is done. It orders what was posted before it, as UCX's rc transports' fence
 * (IBV_SEND_FENCE on the next work request) does: not requests still in the pending queue. */
static ucs_status_t uct_rdmx_ep_fence(uct_ep_h tl_ep, unsigned flags) {
  uct_rdmx_ep_t* ep = ucs_derived_of(tl_ep, uct_rdmx_ep_t);
  uct_rdmx_iface_t* iface = ucs_derived_of(tl_ep->iface, uct_rdmx_iface_t);
  ucs_status_t status;

  (void)flags;
  if (ep->status != UCS_OK) {
    return ep->status;
  }
  UCT_TL_EP_STAT_FENCE(&ep->super);
  if (iface->rma_ops == NULL) {
    return UCS_OK;
  }
  status = uct_rdmx_ep_mark(tl_ep, 0, NULL); /* a marker after what went since the last */
  if (status == UCS_OK) {
    ep->rma_posted = 0; /* all done */
    return UCS_OK;
  }
  if (status == UCS_ERR_NO_RESOURCE) {
    ep->fence_seq = ep->marker_seq + 1; /* owed: the next operation posts it */
  } else if (status == UCS_INPROGRESS) {
    ep->fence_seq = ep->marker_seq;
  } else {
    return status;
  }
  ep->fence_rma |= ep->rma_posted;
  ep->rma_posted = 0;
  ep->fenced = 1;
  return UCS_OK;
}

static ucs_status_t uct_rdmx_iface_fence(uct_iface_h tl_iface, unsigned flags) {
  uct_rdmx_iface_t* iface = ucs_derived_of(tl_iface, uct_rdmx_iface_t);
  uct_rdmx_ep_t* ep;

  ucs_list_for_each(ep, &iface->eps, list) {
    const ucs_status_t status = uct_rdmx_ep_fence(&ep->super.super, flags);
    if (status != UCS_OK && status != UCS_ERR_UNREACHABLE && status != UCS_ERR_ENDPOINT_TIMEOUT) {
      return status;
    } /* else its peer is gone: nothing of it is left to order */
  }
  return UCS_OK;
}

/* ---- pending ----------------------------------------------------------------------------- */

static int uct_rdmx_ep_blocked(const uct_rdmx_iface_t* iface, const uct_rdmx_ep_t* ep) {
  return ep->blocked_epoch == iface->progress_epoch;
}

/* Whether the interface has what every operation needs: a send descriptor, and an operation
 * descriptor and a bounce buffer where puts and gets are offered. */
static int uct_rdmx_iface_has_resources(const uct_rdmx_iface_t* iface) {
  return !ucs_queue_is_empty(&iface->tx_free) &&
         (iface->rma_ops == NULL || !ucs_queue_is_empty(&iface->rma_free)) &&
         (iface->bounce_mem == NULL || iface->bounce_top > 0);
}

static ucs_status_t uct_rdmx_ep_pending_add(uct_ep_h tl_ep, uct_pending_req_t* req,
                                            unsigned flags) {
  uct_rdmx_ep_t* ep = ucs_derived_of(tl_ep, uct_rdmx_ep_t);
  uct_rdmx_iface_t* iface = ucs_derived_of(tl_ep->iface, uct_rdmx_iface_t);

  (void)flags;
  /* Resources free and nothing holding the endpoint back: the caller may send now, and must
   * (nothing would wake the request). */
  if (!uct_rdmx_ep_blocked(iface, ep) && !uct_rdmx_ep_fence_blocked(ep, 1) &&
      uct_rdmx_iface_has_resources(iface)) {
    return UCS_ERR_BUSY;
  }
  uct_pending_req_queue_push(&ep->pending, req);
  ++iface->pending_count;
  return UCS_OK;
}

static void uct_rdmx_ep_pending_purge(uct_ep_h tl_ep, uct_pending_purge_callback_t cb, void* arg) {
  uct_rdmx_ep_t* ep = ucs_derived_of(tl_ep, uct_rdmx_ep_t);
  uct_rdmx_iface_t* iface = ucs_derived_of(tl_ep->iface, uct_rdmx_iface_t);
  uct_pending_req_priv_queue_t* priv;

  uct_pending_queue_purge(priv, &ep->pending, (--iface->pending_count, 1), cb, arg);
}

static void uct_rdmx_dispatch_pending(uct_rdmx_iface_t* iface) {
  uct_pending_req_priv_queue_t* priv;
  uct_rdmx_ep_t* ep;

  ucs_list_for_each(ep, &iface->eps, list) {
    const size_t before = ucs_queue_length(&ep->pending);
    uct_pending_queue_dispatch(priv, &ep->pending,
                               uct_rdmx_iface_has_resources(iface) &&
                                   !uct_rdmx_ep_blocked(iface, ep) &&
                                   !uct_rdmx_ep_fence_blocked(ep, 1));
    iface->pending_count -= (unsigned)(before - ucs_queue_length(&ep->pending));
    if (iface->pending_count == 0 || !uct_rdmx_iface_has_resources(iface)) {
      break;
    }
  }
}

/* ---- flush ------------------------------------------------------------------------------- */

/* Runs the completions of flushes that are done, moved to `done` first: a completion may destroy
 * endpoints, so no endpoint is touched after one. */
static void uct_rdmx_complete_flushes(ucs_queue_head_t* done) {
  while (!ucs_queue_is_empty(done)) {
    uct_rdmx_flush_waiter_t* w = ucs_queue_pull_elem_non_empty(done, uct_rdmx_flush_waiter_t, elem);
    uct_invoke_completion(w->comp, w->status);
    ucs_free(w);
  }
}

/* Retires the endpoint's finished markers and moves its flushes now done to `done`. */
static void uct_rdmx_ep_flush_progress(uct_rdmx_ep_t* ep, ucs_queue_head_t* done) {
  while (!ucs_queue_is_empty(&ep->markers)) {
    uct_rdmx_marker_t* m = ucs_queue_head_elem_non_empty(&ep->markers, uct_rdmx_marker_t, elem);
    rdmx_status_t st;
    const int rc = rdmx_request_test(&m->req, &st);
    if (rc == RDMX_INPROGRESS) {
      break;
    }
    if (rc != RDMX_OK && ep->flush_status == UCS_OK) {
      /* The peer left cleanly (a dead one's flushes were failed by uct_rdmx_handle_dead_peers):
       * what went before the marker may not have arrived. Later flushes rdmx refuses itself. */
      ucs_debug("rdmx: a flush marker failed: %s", rdmx_strerror(rc));
      ep->flush_status = uct_rdmx_status(rc);
    }
    ep->marker_done = m->seq;
    ucs_queue_pull_non_empty(&ep->markers);
    ucs_free(m);
  }
  while (!ucs_queue_is_empty(&ep->waiters)) {
    uct_rdmx_flush_waiter_t* w =
        ucs_queue_head_elem_non_empty(&ep->waiters, uct_rdmx_flush_waiter_t, elem);
    if (w->seq > ep->marker_done || ep->inflight > 0) {
      break;
    }
    ucs_queue_pull_non_empty(&ep->waiters);
    w->status = ep->flush_status;
    ucs_queue_push(done, &w->elem);
  }
}

static int uct_rdmx_ep_is_flushing(const uct_rdmx_ep_t* ep) {
  return !ucs_queue_is_empty(&ep->markers) || !ucs_queue_is_empty(&ep->waiters);
}

/* The flush of everything posted so far (uct_rdmx_ep_flush without its pending check; a fence's
 * marker too). */
static ucs_status_t uct_rdmx_ep_mark(uct_ep_h tl_ep, unsigned flags, uct_completion_t* comp) {
  static const char zero;
  uct_rdmx_ep_t* ep = ucs_derived_of(tl_ep, uct_rdmx_ep_t);
  uct_rdmx_iface_t* iface = ucs_derived_of(tl_ep->iface, uct_rdmx_iface_t);
  const int was_flushing = uct_rdmx_ep_is_flushing(ep);
  uct_rdmx_flush_waiter_t* w;
  uct_rdmx_marker_t* m;
  int rc;

  if (ep->status != UCS_OK) {
    return ep->status;
  }
  if (flags & UCT_FLUSH_FLAG_CANCEL) {
    /* The endpoint is being discarded (UCP, e.g. after its peer failed on another interface):
     * what is on the wire need not be confirmed, so no marker, which a dead peer would hold for
     * the peer timeout. Only the sends rdmx still holds must end (it fails them if need be). */
    ep->unflushed = 0;
    if (ep->inflight == 0) {
      return UCS_OK;
    }
  }
  if (!ep->unflushed && ep->marker_done == ep->marker_seq && ep->inflight == 0) {
    return UCS_OK;
  }
  if (ep->unflushed) {
    m = ucs_malloc(sizeof(*m), "rdmx flush marker");
    if (m == NULL) {
      return UCS_ERR_NO_MEMORY;
    }
    rc = rdmx_tag_send(ep->ep, &zero, 0, RDMX_TAG_FLUSH, RDMX_SEND_SYNC, &m->req, NULL, NULL);
    if (rc != RDMX_OK) {
      ucs_free(m);
      if (rc == RDMX_ERR_NO_RESOURCE) {
        ep->blocked_epoch = iface->progress_epoch; /* as a send: the flush waits, pending */
      }
      return uct_rdmx_status(rc);
    }
    ep->unflushed = 0;
    m->seq = ++ep->marker_seq;
    ucs_queue_push(&ep->markers, &m->elem);
  }
  if (comp != NULL) {
    w = ucs_malloc(sizeof(*w), "rdmx flush waiter");
    if (w == NULL) {
      return UCS_ERR_NO_MEMORY;
    }
    w->comp = comp;
    /* Cancel: the markers already posted need not be matched either. */
    w->seq = (flags & UCT_FLUSH_FLAG_CANCEL) ? ep->marker_done : ep->marker_seq;
    ucs_queue_push(&ep->waiters, &w->elem);
  }
  if (!was_flushing && uct_rdmx_ep_is_flushing(ep)) {
    ++iface->flushing_eps;
  }
  UCT_TL_EP_STAT_FLUSH_WAIT(&ep->super);
  return UCS_INPROGRESS;
}

/* Requests still pending were issued before the flush, and UCT's flush covers them: the caller
 * adds its flush to the pending queue, behind them (as UCX's rc transports do). */
static ucs_status_t uct_rdmx_ep_flush(uct_ep_h tl_ep, unsigned flags, uct_completion_t* comp) {
  uct_rdmx_ep_t* ep = ucs_derived_of(tl_ep, uct_rdmx_ep_t);
  if (!(flags & UCT_FLUSH_FLAG_CANCEL) && !ucs_queue_is_empty(&ep->pending) &&
      ep->status == UCS_OK) {
    return UCS_ERR_NO_RESOURCE;
  }
  return uct_rdmx_ep_mark(tl_ep, flags, comp);
}

static ucs_status_t uct_rdmx_iface_flush(uct_iface_h tl_iface, unsigned flags,
                                         uct_completion_t* comp) {
  uct_rdmx_iface_t* iface = ucs_derived_of(tl_iface, uct_rdmx_iface_t);
  ucs_status_t result = UCS_OK;
  uct_rdmx_ep_t* ep;

  if (comp != NULL) {
    return UCS_ERR_UNSUPPORTED; /* as UCT's own transports: the caller polls */
  }
  ucs_list_for_each(ep, &iface->eps, list) {
    const ucs_status_t status = uct_rdmx_ep_flush(&ep->super.super, flags, NULL);
    if (status == UCS_INPROGRESS) {
      result = UCS_INPROGRESS;
    } else if (status != UCS_OK && status != UCS_ERR_UNREACHABLE &&
               status != UCS_ERR_ENDPOINT_TIMEOUT) {
      return status;
    } /* else its peer is gone: nothing of it is left to complete, the others still flush */
  }
  return result;
}

/* ---- peer failure ------------------------------------------------------------------------ */

/* rdmx's peer-failure callback: it runs inside rdmx_worker_progress, where rdmx must not be
 * called, so it only records the uid for uct_rdmx_handle_dead_peers. */
static void uct_rdmx_peer_failed(uint64_t uid, void* arg) {
  uct_rdmx_iface_t* iface = arg;
  if (iface->dead_count == iface->dead_capacity) {
    const unsigned capacity = iface->dead_capacity ? 2 * iface->dead_capacity : 4;
    uint64_t* uids = ucs_realloc(iface->dead_uids, capacity * sizeof(*uids), "rdmx dead peers");
    if (uids == NULL) {
      ucs_error("rdmx: out of memory recording a dead peer (uid 0x%" PRIx64
                "): its endpoints' failure is not reported",
                uid);
      return;
    }
    iface->dead_uids = uids;
    iface->dead_capacity = capacity;
  }
  iface->dead_uids[iface->dead_count++] = uid;
}

/* The endpoint's peer is gone: its waiting flushes, moved to `done`, end with `status`, and so
 * does every later one (its sends rdmx fails itself). */
static void uct_rdmx_ep_fail(uct_rdmx_iface_t* iface, uct_rdmx_ep_t* ep, ucs_status_t status,
                             ucs_queue_head_t* done) {
  const int was_flushing = uct_rdmx_ep_is_flushing(ep);
  ep->status = status;
  ep->flush_status = status;
  while (!ucs_queue_is_empty(&ep->waiters)) {
    uct_rdmx_flush_waiter_t* w =
        ucs_queue_pull_elem_non_empty(&ep->waiters, uct_rdmx_flush_waiter_t, elem);
    w->status = status;
    ucs_queue_push(done, &w->elem);
  }
  if (was_flushing && !uct_rdmx_ep_is_flushing(ep)) {
    --iface->flushing_eps;
  }
}

/* Each endpoint to a peer rdmx found dead fails and goes to the interface's error handler
 * (UCP's discards it, and may destroy endpoints: the list is searched again after each call). */
static void uct_rdmx_handle_dead_peers(uct_rdmx_iface_t* iface) {
  while (iface->dead_count > 0) {
    const uint64_t uid = iface->dead_uids[--iface->dead_count];
    for (;;) {
      uct_rdmx_ep_t* ep;
      uct_rdmx_ep_t* failed = NULL;
      ucs_list_for_each(ep, &iface->eps, list) {
        if (ep->peer_uid == uid && ep->status == UCS_OK) {
          failed = ep;
          break;
        }
      }
      if (failed == NULL) {
        break;
      }
      ucs_queue_head_t done;
      ucs_status_t status;
      ucs_queue_head_init(&done);
      ucs_debug("rdmx: endpoint %p: its peer (uid 0x%" PRIx64 ") is found dead", failed, uid);
      uct_rdmx_ep_fail(iface, failed, UCS_ERR_ENDPOINT_TIMEOUT, &done);
      status = uct_iface_handle_ep_err(&iface->super.super, &failed->super.super,
                                       UCS_ERR_ENDPOINT_TIMEOUT);
      if (status != UCS_OK) { /* no handler took it (a UCT user that set none) */
        ucs_error("rdmx: the peer of endpoint %p (uid 0x%" PRIx64
                  ") is found dead; its sends and flushes fail: %s",
                  failed, uid, ucs_status_string(status));
      }
      uct_rdmx_complete_flushes(&done);
    }
  }
}

/* ---- progress ---------------------------------------------------------------------------- */

static unsigned uct_rdmx_iface_progress(uct_iface_h tl_iface) {
  uct_rdmx_iface_t* iface = ucs_derived_of(tl_iface, uct_rdmx_iface_t);
  unsigned count = 0;
  ucs_queue_iter_t iter;
  uct_rdmx_tx_desc_t* desc;
  uct_rdmx_marker_t* m;
  uct_rdmx_ep_t* ep;
  int events;

  ++iface->progress_epoch; /* no endpoint is blocked any more */
  events = rdmx_worker_progress(iface->worker);
  if (events > 0) {
    count += (unsigned)events;
  }
  if (ucs_unlikely(iface->rx_starved)) {
    uct_rdmx_rx_drain(iface);
  }
  /* Arrivals, in ring order (see the top of the file). */
  while (iface->rx_used > 0) {
    uct_rdmx_rx_desc_t* rx = uct_rdmx_rx_desc(iface, iface->rx_head);
    rdmx_status_t st;
    int rc = rdmx_request_test(&rx->req, &st);
    if (rc == RDMX_INPROGRESS) {
      break;
    }
    iface->rx_head = (iface->rx_head + 1 == iface->rx_count) ? 0 : iface->rx_head + 1;
    if (rc == RDMX_OK && !(st.tag & RDMX_TAG_FLUSH)) {
      ++count;
      uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_RECV,
                         (uint8_t)(st.tag & RDMX_TAG_AM_MASK), rx + 1, st.length, "RX: AM");
      uct_iface_invoke_am(&iface->super, (uint8_t)(st.tag & RDMX_TAG_AM_MASK), rx + 1, st.length,
                          0);
    } else if (rc == RDMX_ERR_TRUNCATED) {
      ucs_error(
          "rdmx: an active message of %zu bytes (id %u) came to receive buffers of %zu: "
          "it is lost. Set the same UCX_%s_SEG_SIZE on every process.",
          st.length, (unsigned)(st.tag & RDMX_TAG_AM_MASK), iface->seg_size,
          iface->transport == RDMX_TRANSPORT_RC ? "RDMX_RC" : "RDMX_UD");
    } else if (rc != RDMX_OK) {
      ucs_debug("rdmx: a receive ended: %s", rdmx_strerror(rc));
    }
    --iface->rx_used; /* the descriptor is free once its handler has returned */
  }
  /* After the arrivals: what a dead peer sent before it died reaches the handlers first. */
  if (iface->dead_count > 0) {
    uct_rdmx_handle_dead_peers(iface);
  }
  /* Sends that were still active when posted. */
  ucs_queue_for_each_safe(desc, iter, &iface->tx_inflight, elem) {
    if (rdmx_request_test(&desc->req, NULL) != RDMX_INPROGRESS) {
      ucs_queue_del_iter(&iface->tx_inflight, iter);
      if (desc->ep != NULL) {
        --desc->ep->inflight;
      }
      uct_rdmx_tx_put(iface, desc);
    }
  }
  count += uct_rdmx_rma_progress(iface);
  if (iface->pending_count > 0 && uct_rdmx_iface_has_resources(iface)) {
    uct_rdmx_dispatch_pending(iface);
  }
  if (iface->flushing_eps > 0) {
    ucs_queue_head_t done;
    ucs_queue_head_init(&done);
    ucs_list_for_each(ep, &iface->eps, list) {
      if (uct_rdmx_ep_is_flushing(ep)) {
        uct_rdmx_ep_flush_progress(ep, &done);
        if (!uct_rdmx_ep_is_flushing(ep)) {
          --iface->flushing_eps;
        }
      }
    }
    uct_rdmx_complete_flushes(&done);
  }
  ucs_queue_for_each_safe(m, iter, &iface->orphan_markers, elem) {
    if (rdmx_request_test(&m->req, NULL) != RDMX_INPROGRESS) {
      ucs_queue_del_iter(&iface->orphan_markers, iter);
      ucs_free(m);
    }
  }
  return count;
}

/* ---- events (UCP_FEATURE_WAKEUP: ucp_worker_arm, ucp_worker_wait) ------------------------ */

static ucs_status_t uct_rdmx_iface_event_fd_get(uct_iface_h tl_iface, int* fd_p) {
  uct_rdmx_iface_t* iface = ucs_derived_of(tl_iface, uct_rdmx_iface_t);
  return uct_rdmx_status(rdmx_worker_event_fd(iface->worker, fd_p));
}

/* Whether progress has work of this interface's own that no completion would announce: an
 * arrival, put or get completed but not handed over, dead peers, requests waiting for resources,
 * flushes. */
static int uct_rdmx_iface_has_work(uct_rdmx_iface_t* iface) {
  if (iface->rx_starved || iface->dead_count > 0 || iface->pending_count > 0 ||
      iface->flushing_eps > 0 || !ucs_queue_is_empty(&iface->rma_done)) {
    return 1;
  }
  return iface->rx_used > 0 &&
         rdmx_request_test(&uct_rdmx_rx_desc(iface, iface->rx_head)->req, NULL) != RDMX_INPROGRESS;
}

/* Sends and receives share one completion channel: any completion wakes, whichever events
 * were asked for. rdmx refuses to arm while it has work of its own, and while peers may still
 * write into the eager rings it gave and one holds a message (its first arming takes them back;
 * until each writer has answered it sleeps on a 1-ms timer that looks at them). */
static ucs_status_t uct_rdmx_iface_event_arm(uct_iface_h tl_iface, unsigned events) {
  uct_rdmx_iface_t* iface = ucs_derived_of(tl_iface, uct_rdmx_iface_t);
  int rc;
  (void)events;
  if (uct_rdmx_iface_has_work(iface)) {
    return UCS_ERR_BUSY;
  }
  rc = rdmx_worker_arm(iface->worker);
  return (rc == RDMX_ERR_BUSY) ? UCS_ERR_BUSY : uct_rdmx_status(rc);
}

/* ---- endpoints --------------------------------------------------------------------------- */

static UCS_CLASS_INIT_FUNC(uct_rdmx_ep_t, const uct_ep_params_t* params) {
  uct_rdmx_iface_t* iface = ucs_derived_of(params->iface, uct_rdmx_iface_t);
  uint8_t blob[128];
  int rc;

  UCS_CLASS_CALL_SUPER_INIT(uct_base_ep_t, &iface->super);
  if (!(params->field_mask & UCT_EP_PARAM_FIELD_DEV_ADDR) ||
      !(params->field_mask & UCT_EP_PARAM_FIELD_IFACE_ADDR)) {
    ucs_error("rdmx: an endpoint needs the peer's device and interface addresses");
    return UCS_ERR_INVALID_PARAM;
  }
  ucs_assert(rdmx_ucx_tl_blob_size() <= sizeof(blob));
  if (!rdmx_ucx_tl_address_join(params->dev_addr, params->iface_addr, blob)) {
    ucs_error("rdmx: the peer's address is not an rdmx worker's");
    return UCS_ERR_INVALID_ADDR;
  }
  if (!uct_rdmx_seg_size_matches(iface, params->iface_addr)) {
    return UCS_ERR_UNREACHABLE;
  }
  /* An unreachable peer is refused with the reason on stderr (rdmx_worker_check_peer's). */
  rc = rdmx_ep_create(iface->worker, blob, rdmx_ucx_tl_blob_size(), &self->ep);
  if (rc != RDMX_OK) {
    ucs_error("rdmx: connecting to a peer failed: %s", rdmx_strerror(rc));
    return uct_rdmx_status(rc);
  }
  self->peer_uid = rdmx_ucx_tl_blob_uid(blob);
  self->status = UCS_OK;
  self->flush_status = UCS_OK;
  ucs_queue_head_init(&self->pending);
  ucs_queue_head_init(&self->markers);
  ucs_queue_head_init(&self->waiters);
  self->unflushed = 0;
  self->inflight = 0;
  self->fenced = 0;
  self->fence_rma = 0;
  self->rma_posted = 0;
  self->fence_seq = 0;
  self->blocked_epoch = 0;
  self->marker_seq = 0;
  self->marker_done = 0;
  ucs_list_add_tail(&iface->eps, &self->list);
  return UCS_OK;
}

static UCS_CLASS_CLEANUP_FUNC(uct_rdmx_ep_t) {
  uct_rdmx_iface_t* iface = ucs_derived_of(self->super.super.iface, uct_rdmx_iface_t);
  uct_rdmx_tx_desc_t* desc;
  ucs_queue_iter_t iter;
  unsigned i;

  if (uct_rdmx_ep_is_flushing(self)) {
    --iface->flushing_eps;
  }
  /* rdmx fails what it has not sent; requests it still holds stay valid until it is done. */
  rdmx_ep_destroy(self->ep);
  ucs_queue_for_each_safe(desc, iter, &iface->tx_inflight, elem) {
    if (desc->ep == self) {
      desc->ep = NULL;
    }
  }
  for (i = 0; i < iface->rma_count; ++i) { /* in flight, or done and not yet completed */
    if (iface->rma_ops[i].ep == self) {
      iface->rma_ops[i].ep = NULL;
      iface->rma_ops[i].comp = NULL; /* UCT's contract: no completion after ep_destroy */
      iface->rma_ops[i].unpack_cb = NULL;
    }
  }
  while (!ucs_queue_is_empty(&self->markers)) {
    ucs_queue_push(&iface->orphan_markers, ucs_queue_pull_non_empty(&self->markers));
  }
  while (!ucs_queue_is_empty(&self->waiters)) {
    uct_rdmx_flush_waiter_t* w =
        ucs_queue_pull_elem_non_empty(&self->waiters, uct_rdmx_flush_waiter_t, elem);
    uct_invoke_completion(w->comp, UCS_ERR_CANCELED);
    ucs_free(w);
  }
  if (!ucs_queue_is_empty(&self->pending)) {
    ucs_warn("rdmx: endpoint %p destroyed with %zu pending requests (not purged)", self,
             ucs_queue_length(&self->pending));
    iface->pending_count -= (unsigned)ucs_queue_length(&self->pending);
  }
  ucs_list_del(&self->list);
}

UCS_CLASS_DEFINE(uct_rdmx_ep_t, uct_base_ep_t);
static UCS_CLASS_DEFINE_NEW_FUNC(uct_rdmx_ep_t, uct_ep_t, const uct_ep_params_t*);
static UCS_CLASS_DEFINE_DELETE_FUNC(uct_rdmx_ep_t, uct_ep_t);

/* ---- interface --------------------------------------------------------------------------- */

static ucs_status_t uct_rdmx_iface_query(uct_iface_h tl_iface, uct_iface_attr_t* attr) {
  uct_rdmx_iface_t* iface = ucs_derived_of(tl_iface, uct_rdmx_iface_t);
  const int ud = (iface->transport == RDMX_TRANSPORT_UD);

  uct_base_iface_query(&iface->super, attr);
  attr->iface_addr_len = uct_rdmx_iface_addr_len();
  attr->device_addr_len = rdmx_ucx_tl_device_address_size();
  attr->ep_addr_len = 0;
  attr->max_conn_priv = 0;
  attr->cap.flags = UCT_IFACE_FLAG_CONNECT_TO_IFACE | UCT_IFACE_FLAG_AM_SHORT |
                    UCT_IFACE_FLAG_AM_BCOPY | UCT_IFACE_FLAG_PENDING | UCT_IFACE_FLAG_CB_SYNC |
                    UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE;
  attr->cap.event_flags =
      UCT_IFACE_FLAG_EVENT_SEND_COMP | UCT_IFACE_FLAG_EVENT_RECV | UCT_IFACE_FLAG_EVENT_FD;
  attr->cap.am.max_short = iface->short_size;
  attr->cap.am.max_bcopy = iface->seg_size;
  attr->cap.am.min_zcopy = 0;
  attr->cap.am.max_zcopy = 0;
  attr->cap.am.opt_zcopy_align = 1;
  attr->cap.am.align_mtu = 1;
  attr->cap.am.max_hdr = 0;
  attr->cap.am.max_iov = 1;
  if (iface->rma_ops != NULL && !ud && iface->short_size > 2 * RDMX_ZCOPY_MAX_HEAD) {
    /* rdmx_tag_send_zcopy: header and payload in one eager message, over RC only. max_zcopy is
     * the total with UCP's header (uct.h; UCP sends max_zcopy - its header of payload). */
    attr->cap.flags |= UCT_IFACE_FLAG_AM_ZCOPY;
    attr->cap.am.max_hdr = RDMX_ZCOPY_MAX_HEAD;
    attr->cap.am.max_zcopy = iface->short_size;
  }
  if (iface->rma_ops != NULL) {
    attr->cap.flags |= UCT_IFACE_FLAG_PUT_ZCOPY | UCT_IFACE_FLAG_GET_ZCOPY;
    attr->cap.put.min_zcopy = 0;
    attr->cap.put.max_zcopy = iface->max_rma;
    attr->cap.put.opt_zcopy_align = 1;
    attr->cap.put.align_mtu = 1;
    attr->cap.put.max_iov = 1;
    attr->cap.get.min_zcopy = 0;
    attr->cap.get.max_zcopy = iface->max_rma;
    attr->cap.get.opt_zcopy_align = 1;
    attr->cap.get.align_mtu = 1;
    attr->cap.get.max_iov = 1;
  }
  if (iface->bounce_mem != NULL) {
    attr->cap.flags |=
        UCT_IFACE_FLAG_PUT_SHORT | UCT_IFACE_FLAG_PUT_BCOPY | UCT_IFACE_FLAG_GET_BCOPY;
    attr->cap.put.max_short = RDMX_RMA_SHORT;
    attr->cap.put.max_bcopy = RDMX_RMA_BOUNCE_SIZE;
    attr->cap.get.max_bcopy = RDMX_RMA_BOUNCE_SIZE;
  }
  /* UCX's model of the same device and transport (uct_ib_iface_query: 700 ns on a recent
   * adapter, UD 200 ns more for its software reliability) plus rdmx's API and matching on each
   * side; the bandwidth is the port's data rate. */
  attr->latency = ucs_linear_func_make(ud ? 1200e-9 : 1000e-9, 0);
  attr->bandwidth.dedicated = 0;
  attr->bandwidth.shared = iface->bandwidth;
  attr->overhead = 150e-9;
  attr->priority = 0;
  return UCS_OK;
}

static ucs_status_t uct_rdmx_iface_get_device_address(uct_iface_h tl_iface,
                                                      uct_device_addr_t* addr) {
  uct_rdmx_iface_t* iface = ucs_derived_of(tl_iface, uct_rdmx_iface_t);
  memcpy(addr, iface->device_addr, rdmx_ucx_tl_device_address_size());
  return UCS_OK;
}

static ucs_status_t uct_rdmx_iface_get_address(uct_iface_h tl_iface, uct_iface_addr_t* addr) {
  uct_rdmx_iface_t* iface = ucs_derived_of(tl_iface, uct_rdmx_iface_t);
  uint8_t* seg = (uint8_t*)addr + rdmx_ucx_tl_iface_address_size();
  memcpy(addr, iface->iface_addr, rdmx_ucx_tl_iface_address_size());
  seg[0] = (uint8_t)iface->seg_size;
  seg[1] = (uint8_t)(iface->seg_size >> 8);
  seg[2] = (uint8_t)(iface->seg_size >> 16);
  seg[3] = (uint8_t)(iface->seg_size >> 24);
  return UCS_OK;
}

static int uct_rdmx_iface_is_reachable(const uct_iface_h tl_iface,
                                       const uct_device_addr_t* dev_addr,
                                       const uct_iface_addr_t* iface_addr) {
  uct_rdmx_iface_t* iface = ucs_derived_of(tl_iface, uct_rdmx_iface_t);
  uint8_t blob[128];

  /* A worker of the other transport is not: rdmx's workers of one job must agree. */
  if (dev_addr == NULL || iface_addr == NULL ||
      rdmx_ucx_tl_address_transport(iface_addr) != (int)iface->transport ||
      !rdmx_ucx_tl_address_join(dev_addr, iface_addr, blob) ||
      !uct_rdmx_seg_size_matches(iface, iface_addr)) {
    return 0;
  }
  return rdmx_worker_check_peer(iface->worker, blob, rdmx_ucx_tl_blob_size(), NULL, 0) == RDMX_OK;
}

/* Attaches the worker's PD to the MD and makes the operation descriptors. Without a slot or
 * memory the interface offers no put/get (UCP then moves rendezvous data in AMs). */
static void uct_rdmx_rma_init(uct_rdmx_iface_t* iface, uct_md_h md, int port, size_t count) {
  size_t i;

  iface->md_slot = -1;
  iface->max_rma = 0;
  iface->rma_ops = NULL;
  iface->rma_count = 0;
  iface->bounce_mem = NULL;
  iface->bounce_mr = NULL;
  iface->bounce_top = 0;
  ucs_queue_head_init(&iface->rma_free);
  ucs_queue_head_init(&iface->rma_done);
  iface->max_rma = rdmx_ucx_md_port_max_msg(md, port);
  iface->md_slot =
      rdmx_ucx_md_attach(md, rdmx_worker_uid(iface->worker), rdmx_worker_pd(iface->worker));
  if (iface->md_slot < 0 || iface->max_rma == 0) {
    ucs_diag(
        "%s: no put/get on this interface (its memory domain has %d interfaces with "
        "them, or registering its memory for this one failed)",
        iface->transport == RDMX_TRANSPORT_RC ? "rdmx_rc" : "rdmx_ud", RDMX_UCX_MAX_RMA_IFACES);
    if (iface->md_slot >= 0) {
      rdmx_ucx_md_detach(md, iface->md_slot);
      iface->md_slot = -1;
    }
    return;
  }
  iface->rma_ops = ucs_calloc(count, sizeof(*iface->rma_ops), "rdmx put/get descriptors");
  if (iface->rma_ops == NULL) {
    rdmx_ucx_md_detach(md, iface->md_slot);
    iface->md_slot = -1;
    return;
  }
  iface->rma_count = (unsigned)count;
  for (i = 0; i < count; ++i) {
    iface->rma_ops[i].iface = iface;
    ucs_queue_push(&iface->rma_free, &iface->rma_ops[i].elem);
  }
  /* Without them, put and get are zero-copy only (UCP then takes AMs for small ones). */
  if (posix_memalign((void**)&iface->bounce_mem, RDMX_DESC_ALIGN,
                     RDMX_RMA_BOUNCES * RDMX_RMA_BOUNCE_SIZE) != 0) {
    iface->bounce_mem = NULL;
    return;
  }
  iface->bounce_mr = rdmx_ucx_pd_reg(rdmx_worker_pd(iface->worker), iface->bounce_mem,
                                     RDMX_RMA_BOUNCES * RDMX_RMA_BOUNCE_SIZE, &iface->bounce_lkey);
  if (iface->bounce_mr == NULL) {
    free(iface->bounce_mem);
    iface->bounce_mem = NULL;
    return;
  }
  for (i = 0; i < RDMX_RMA_BOUNCES; ++i) {
    iface->bounce_free[i] = iface->bounce_mem + (RDMX_RMA_BOUNCES - 1 - i) * RDMX_RMA_BOUNCE_SIZE;
  }
  iface->bounce_top = RDMX_RMA_BOUNCES;
}

static UCS_CLASS_INIT_FUNC(uct_rdmx_iface_t, rdmx_transport_t transport, uct_md_h md,
                           uct_worker_h worker, const uct_iface_params_t* params,
                           const uct_iface_config_t* tl_config) {
  const uct_rdmx_iface_config_t* config = ucs_derived_of(tl_config, uct_rdmx_iface_config_t);
  const ucs_thread_mode_t mode = ucs_derived_of(worker, uct_priv_worker_t)->thread_mode;
  const char* tl_name = (transport == RDMX_TRANSPORT_RC) ? "rdmx_rc" : "rdmx_ud";
  rdmx_config_t rc_config;
  const void* blob;
  size_t blob_len, capacity, tx_count;
  const char* colon;
  int port = 1, rc;
  unsigned i;

  UCS_CLASS_CALL_SUPER_INIT(
      uct_base_iface_t, &uct_rdmx_iface_ops, &uct_base_iface_internal_ops, md, worker, params,
      tl_config UCS_STATS_ARG(
          (params->field_mask & UCT_IFACE_PARAM_FIELD_STATS_ROOT) ? params->stats_root : NULL)
          UCS_STATS_ARG(tl_name));

  UCT_CHECK_PARAM(params->field_mask & UCT_IFACE_PARAM_FIELD_OPEN_MODE,
                  "UCT_IFACE_PARAM_FIELD_OPEN_MODE is not defined");
  if (!(params->open_mode & UCT_IFACE_OPEN_MODE_DEVICE)) {
    ucs_error("%s supports only UCT_IFACE_OPEN_MODE_DEVICE", tl_name);
    return UCS_ERR_UNSUPPORTED;
  }
  if (mode == UCS_THREAD_MODE_MULTI) {
    ucs_error(
        "%s: a UCT worker in UCS_THREAD_MODE_MULTI is not supported (UCP serializes its "
        "workers' calls: use its worker lock)",
        tl_name);
    return UCS_ERR_INVALID_PARAM;
  }
  colon = strchr(params->mode.device.dev_name, ':');
  if (colon != NULL) {
    port = atoi(colon + 1);
  }
  if (config->rx_queue_len == 0 || config->tx_queue_len == 0) {
    ucs_error("%s: RX_QUEUE_LEN and TX_QUEUE_LEN must be at least 1", tl_name);
    return UCS_ERR_INVALID_PARAM;
  }

  rdmx_config_init(&rc_config);
  if (rdmx_config_from_env(&rc_config) != RDMX_OK) {
    return UCS_ERR_INVALID_PARAM; /* rdmx named the variable on stderr */
  }
  rc_config.device = rdmx_ucx_md_device(md);
  rc_config.port = port;
  rc_config.transport = transport;
  rc_config.shm = 0; /* UCX has its own shared-memory transports; this one is the device's */
  rc_config.thread_mode =
      (mode == UCS_THREAD_MODE_SERIALIZED) ? RDMX_THREAD_MODE_SERIALIZED : RDMX_THREAD_MODE_SINGLE;
  rc = rdmx_worker_create(&rc_config, &self->worker);
  if (rc != RDMX_OK) {
    ucs_error("%s on %s: creating the rdmx worker failed: %s", tl_name,
              params->mode.device.dev_name, rdmx_strerror(rc));
    return uct_rdmx_status(rc);
  }
  self->transport = transport;
  rdmx_worker_address(self->worker, &blob, &blob_len);
  if (!rdmx_ucx_tl_address_split(blob, blob_len, self->device_addr, self->iface_addr)) {
    ucs_error("%s: the rdmx worker's address cannot be split for UCP", tl_name);
    rdmx_worker_destroy(self->worker);
    return UCS_ERR_INVALID_ADDR;
  }
  capacity = rdmx_ucx_tl_eager_capacity(blob, blob_len);
  if (config->seg_size < 64 || config->seg_size > UINT32_MAX) {
    ucs_error("%s: SEG_SIZE %zu is out of range (64 bytes to 4 GiB)", tl_name, config->seg_size);
    rdmx_worker_destroy(self->worker);
    return UCS_ERR_INVALID_PARAM;
  }
  self->seg_size = config->seg_size;
  self->warned_seg_size = 0;
  self->short_size = ucs_min(config->seg_size, capacity);
  self->desc_size = ucs_align_up(sizeof(uct_rdmx_tx_desc_t) + self->seg_size, RDMX_DESC_ALIGN);
  ucs_assert(sizeof(uct_rdmx_rx_desc_t) <= sizeof(uct_rdmx_tx_desc_t));
  self->bandwidth = rdmx_ucx_md_port_bandwidth(md, port);
  if (self->bandwidth <= 0) {
    self->bandwidth = 1e9;
  }

  tx_count = config->tx_queue_len;
  self->rx_count = config->rx_queue_len;
  self->tx_mem = ucs_calloc(tx_count, self->desc_size, "rdmx tx descriptors");
  self->rx_mem = ucs_calloc(self->rx_count, self->desc_size, "rdmx rx descriptors");
  if (self->tx_mem == NULL || self->rx_mem == NULL) {
    ucs_free(self->tx_mem);
    ucs_free(self->rx_mem);
    rdmx_worker_destroy(self->worker);
    return UCS_ERR_NO_MEMORY;
  }
  ucs_queue_head_init(&self->tx_free);
  ucs_queue_head_init(&self->tx_inflight);
  ucs_queue_head_init(&self->orphan_markers);
  ucs_list_head_init(&self->eps);
  self->pending_count = 0;
  self->progress_epoch = 1;
  self->dead_uids = NULL;
  self->dead_count = 0;
  self->dead_capacity = 0;
  self->am_zcopy_copied = 0;
  rdmx_worker_set_peer_failure_callback(self->worker, uct_rdmx_peer_failed, self);
  self->flushing_eps = 0;
  self->rx_head = 0;
  self->rx_tail = 0;
  self->rx_used = 0;
  self->rx_starved = 0;
  for (i = 0; i < tx_count; ++i) {
    uct_rdmx_tx_put(self, (uct_rdmx_tx_desc_t*)(self->tx_mem + (size_t)i * self->desc_size));
  }
  rdmx_worker_set_recv_sink(self->worker, uct_rdmx_rx_sink, self);
  uct_rdmx_rma_init(self, md, port, tx_count);
  ucs_debug("%s on %s: seg_size %zu, %u receives, %zu send buffers", tl_name,
            params->mode.device.dev_name, self->seg_size, self->rx_count, tx_count);
  return UCS_OK;
}

static UCS_CLASS_CLEANUP_FUNC(uct_rdmx_iface_t) {
  uct_base_iface_progress_disable(&self->super.super, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
  /* The MD's registrations leave the worker's PD before the worker frees it (a put or get
   * still in flight then fails, as destroy would fail it). */
  if (self->md_slot >= 0) {
    rdmx_ucx_md_detach(self->super.md, self->md_slot);
  }
  if (self->bounce_mr != NULL) {
    rdmx_ucx_pd_dereg(self->bounce_mr);
  }
  if (self->rma_ops != NULL && ucs_log_is_enabled(UCS_LOG_LEVEL_INFO)) {
    /* How UCP's eager AMs went: what UCX_ZCOPY_THRESH changes shows here (UCX_LOG_LEVEL=info) */
    rdmx_stats_t st;
    if (rdmx_worker_stats(self->worker, &st) == RDMX_OK &&
        st.zcopy_sends + self->am_zcopy_copied != 0) {
      ucs_info("rdmx: interface closed: %" PRIu64 " am_zcopy from the caller's memory, %" PRIu64
               " by a copy",
               st.zcopy_sends, self->am_zcopy_copied);
    }
  }
  /* Fails every active request (the receives, sends in flight, markers, puts, gets and
   * am_zcopys): then their storage, ours, may go. */
  rdmx_worker_destroy(self->worker);
  while (!ucs_queue_is_empty(&self->orphan_markers)) {
    ucs_free(ucs_queue_pull_elem_non_empty(&self->orphan_markers, uct_rdmx_marker_t, elem));
  }
  ucs_free(self->tx_mem);
  ucs_free(self->rx_mem);
  ucs_free(self->rma_ops);
  free(self->bounce_mem);
  ucs_free(self->dead_uids);
}

UCS_CLASS_DEFINE(uct_rdmx_iface_t, uct_base_iface_t);
static UCS_CLASS_DEFINE_DELETE_FUNC(uct_rdmx_iface_t, uct_iface_t);

static ucs_status_t uct_rdmx_rc_iface_open(uct_md_h md, uct_worker_h worker,
                                           const uct_iface_params_t* params,
                                           const uct_iface_config_t* config, uct_iface_h* iface_p) {
  return UCS_CLASS_NEW(uct_rdmx_iface_t, iface_p, RDMX_TRANSPORT_RC, md, worker, params, config);
}

static ucs_status_t uct_rdmx_ud_iface_open(uct_md_h md, uct_worker_h worker,
                                           const uct_iface_params_t* params,
                                           const uct_iface_config_t* config, uct_iface_h* iface_p) {
  return UCS_CLASS_NEW(uct_rdmx_iface_t, iface_p, RDMX_TRANSPORT_UD, md, worker, params, config);
}

/* One device per active port, named as UCX's ib transports name them: <ibdev>:<port>. */
static ucs_status_t uct_rdmx_query_devices(uct_md_h md, uct_tl_device_resource_t** devices_p,
                                           unsigned* num_devices_p) {
  const int ports = rdmx_ucx_md_port_count(md);
  uct_tl_device_resource_t* devices;
  unsigned n = 0;
  int p;

  devices = ucs_calloc(ports > 0 ? (size_t)ports : 1, sizeof(*devices), "rdmx devices");
  if (devices == NULL) {
    return UCS_ERR_NO_MEMORY;
  }
  for (p = 1; p <= ports; ++p) {
    if (!rdmx_ucx_md_port_active(md, p)) {
      continue;
    }
    ucs_snprintf_zero(devices[n].name, sizeof(devices[n].name), "%s:%d", rdmx_ucx_md_device(md), p);
    devices[n].type = UCT_DEVICE_TYPE_NET;
    devices[n].sys_device = UCS_SYS_DEVICE_ID_UNKNOWN;
    ++n;
  }
  *devices_p = devices;
  *num_devices_p = n;
  return UCS_OK;
}

static uct_iface_ops_t uct_rdmx_iface_ops = {
    .ep_am_short = uct_rdmx_ep_am_short,
    .ep_am_zcopy = uct_rdmx_ep_am_zcopy,
    .ep_am_bcopy = uct_rdmx_ep_am_bcopy,
    .ep_pending_add = uct_rdmx_ep_pending_add,
    .ep_pending_purge = uct_rdmx_ep_pending_purge,
    .ep_put_short = uct_rdmx_ep_put_short,
    .ep_put_bcopy = uct_rdmx_ep_put_bcopy,
    .ep_put_zcopy = uct_rdmx_ep_put_zcopy,
    .ep_get_bcopy = uct_rdmx_ep_get_bcopy,
    .ep_get_zcopy = uct_rdmx_ep_get_zcopy,
    .ep_flush = uct_rdmx_ep_flush,
    .ep_fence = uct_rdmx_ep_fence,
    .ep_create = UCS_CLASS_NEW_FUNC_NAME(uct_rdmx_ep_t),
    .ep_destroy = UCS_CLASS_DELETE_FUNC_NAME(uct_rdmx_ep_t),
    .iface_flush = uct_rdmx_iface_flush,
    .iface_fence = uct_rdmx_iface_fence,
    .iface_progress_enable = uct_base_iface_progress_enable,
    .iface_progress_disable = uct_base_iface_progress_disable,
    .iface_progress = uct_rdmx_iface_progress,
    .iface_close = UCS_CLASS_DELETE_FUNC_NAME(uct_rdmx_iface_t),
    .iface_query = uct_rdmx_iface_query,
    .iface_get_device_address = uct_rdmx_iface_get_device_address,
    .iface_get_address = uct_rdmx_iface_get_address,
    .iface_is_reachable = uct_rdmx_iface_is_reachable,
    .iface_event_fd_get = uct_rdmx_iface_event_fd_get,
    .iface_event_arm = uct_rdmx_iface_event_arm,
};

static uct_tl_t uct_rdmx_rc_tl = {.name = "rdmx_rc",
                                  .query_devices = uct_rdmx_query_devices,
                                  .iface_open = uct_rdmx_rc_iface_open,
                                  .config = {.name = "rdmx_rc transport",
                                             .prefix = "RDMX_RC_",
                                             .table = uct_rdmx_iface_config_table,
                                             .size = sizeof(uct_rdmx_iface_config_t)}};

static uct_tl_t uct_rdmx_ud_tl = {.name = "rdmx_ud",
                                  .query_devices = uct_rdmx_query_devices,
                                  .iface_open = uct_rdmx_ud_iface_open,
                                  .config = {.name = "rdmx_ud transport",
                                             .prefix = "RDMX_UD_",
                                             .table = uct_rdmx_iface_config_table,
                                             .size = sizeof(uct_rdmx_iface_config_t)}};

void rdmx_ucx_add_transports(uct_component_t* component) {
  ucs_list_add_tail(&component->tl_list, &uct_rdmx_rc_tl.list);
  ucs_list_add_tail(&component->tl_list, &uct_rdmx_ud_tl.list);
  ucs_list_add_tail(&ucs_config_global_list, &uct_rdmx_rc_tl.config.list);
  ucs_list_add_tail(&ucs_config_global_list, &uct_rdmx_ud_tl.config.list);
}
