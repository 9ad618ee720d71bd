/*
 * rdmx: tagged message passing over RDMA verbs.
 *
 * The API follows UCP's tag API, which HPC developers know:
 *   worker   one per process (or per thread group): device, PD, CQs, SRQs, QPs. It has an opaque
 *            address blob that the application exchanges out of band (MPI's modex, a socket).
 *   endpoint a connection to a peer worker, created from the peer's address blob.
 *   request  caller-owned storage (RDMX_REQUEST_SIZE bytes) for one non-blocking operation, so a
 *            host such as Open MPI can embed it in its own request: no allocation per message.
 *
 * Messages carry a 64-bit tag. A receive matches a message when
 *   (msg.tag & recv.tag_mask) == (recv.tag & recv.tag_mask)   and
 *   recv.source == RDMX_ANY_SOURCE or recv.source == msg.source,
 * where msg.source is the sending worker's uid (rdmx_config_t.uid). Messages from one sender
 * match in the order they were sent (MPI non-overtaking), whatever their size or transport.
 *
 * Completion: a post call that returns RDMX_OK has accepted the operation; its callback (if any)
 * runs exactly once, from inside a later rdmx_worker_progress() or rdmx_request_wait() (never from
 * inside the post call itself), and rdmx_request_test() reports its status. A post call that
 * returns an error has accepted nothing and runs no callback. A request posted without a
 * callback completes as soon as its operation does, which for an eager send can be inside the
 * post call: test it right away before spending a progress call on it.
 *
 * Threads (rdmx_config_t.thread_mode, like UCX's UCS_THREAD_MODE_*):
 *   RDMX_THREAD_MODE_SINGLE      (default) one thread uses the worker, its endpoints and requests;
 *   RDMX_THREAD_MODE_SERIALIZED  several threads, one at a time: the caller serializes (as MPI's
 *                                MPI_THREAD_SERIALIZED); rdmx adds nothing to either mode;
 *   RDMX_THREAD_MODE_MULTI       any thread at any time. rdmx locks the worker around each call
 *                                but an eager send that leaves at once or joins the peer's open
 *                                batch (a burst, rdmx_config_t.coalesce; with or without a
 *                                callback, which the next progress call runs), a receive
 *                                that nothing or an unexpected eager message matches (with
 *                                a callback: run by the next progress call; the same for
 *                                rdmx_tag_msg_recv of such a message), probes and cancels,
 *                                which hold at most their peer's or the matcher's lock beside
 *                                each other (the lock order: transport/README.md,
 *                                "Threads"); lets one
 *                                thread poll at a time (a progress call that finds another
 *                                thread polling returns 0 at once) and runs callbacks with no
 *                                lock held.
 *                                Each thread that posts gets a send context of its own (send
 *                                descriptors and bounce buffers; its index is in every work
 *                                request's wr_id), up to rdmx_config_t.max_threads at once.
 * In every mode a request is used by one thread at a time; in MULTI mode a request may be waited
 * for or tested by a thread other than the one that posted it, and a request without a callback
 * may be reused once rdmx_request_test reports it done. rdmx_worker_destroy may run while other
 * threads are blocked in rdmx_request_wait (entered before destroy began): their requests fail
 * and they return before it frees the worker; any other call concurrent with destroy, a wait
 * entered after it began included, is a use after free. A thread past max_threads (or whose
 * context's memory could not be registered) has its sends refused with
 * RDMX_ERR_TOO_MANY_THREADS (RDMX_ERR_NO_MEMORY); its other calls work. Callbacks run with no
 * lock held: a host may take its own locks in them, so it must not hold those locks across
 * rdmx_worker_progress, rdmx_worker_poll, rdmx_request_wait or rdmx_worker_destroy. A
 * peer-failure callback replaced while another thread's progress is running may run once more.
 */
#ifndef RDMX_RDMX_H
#define RDMX_RDMX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Return and status codes. Non-negative: success; negative: errors. */
typedef enum rdmx_code {
  RDMX_OK = 0,
  RDMX_INPROGRESS = 1,            /* request not complete yet */
  RDMX_ERR_INVALID_PARAM = -1,    /* an argument is invalid; nothing was accepted */
  RDMX_ERR_NO_MEMORY = -2,        /* allocation or memory registration failed */
  RDMX_ERR_NO_DEVICE = -3,        /* no usable RDMA device/port/GID (see RDMX_DEVICE etc.) */
  RDMX_ERR_UNSUPPORTED = -4,      /* the device lacks a needed feature */
  RDMX_ERR_TRUNCATED = -5,        /* receive buffer shorter than the message */
  RDMX_ERR_CANCELED = -6,         /* request was cancelled */
  RDMX_ERR_UNREACHABLE = -7,      /* peer dead, timed out, or endpoint destroyed */
  RDMX_ERR_NO_RESOURCE = -8,      /* a queue is full: progress and retry */
  RDMX_ERR_IO = -9,               /* a verbs operation failed */
  RDMX_ERR_BUSY = -10,            /* object in use (e.g. cancel of a matched request) */
  RDMX_ERR_BAD_ADDRESS = -11,     /* a peer address blob is malformed or of another version */
  RDMX_ERR_TIMED_OUT = -12,       /* a wait ran out of time */
  RDMX_ERR_TOO_MANY_THREADS = -13 /* MULTI mode: a send from a thread past max_threads */
} rdmx_code_t;

/* A static English text for a code, naming the usual cause. Never NULL. */
const char* rdmx_strerror(int code);

typedef enum rdmx_transport {
  RDMX_TRANSPORT_AUTO = 0, /* RC below config.auto_ud_peers expected peers, UD from there up */
  RDMX_TRANSPORT_RC = 1,   /* per peer one RC QP per size class, hardware reliability */
  RDMX_TRANSPORT_UD = 2    /* one UD QP per size class, rdmx's own reliability */
} rdmx_transport_t;

#define RDMX_ANY_SOURCE UINT64_MAX

typedef enum rdmx_thread_mode {
  RDMX_THREAD_MODE_SINGLE = 0,     /* one thread (default) */
  RDMX_THREAD_MODE_SERIALIZED = 1, /* threads one at a time, serialized by the caller */
  RDMX_THREAD_MODE_MULTI = 2       /* any thread at any time: rdmx locks */
} rdmx_thread_mode_t;

/*
 * Configuration. rdmx_config_init() fills defaults; rdmx_config_from_env() then applies the
 * RDMX_* environment variable named beside each field. With nothing set rdmx works out of the
 * box: the first device with an active port and, on RoCE, its RoCE v2 IPv4-mapped GID.
 */
typedef struct rdmx_config {
  const char* device;         /* RDMX_DEVICE: device name; NULL = first with an active port */
  int port;                   /* RDMX_PORT: 0 = first active port */
  int gid_index;              /* RDMX_GID_INDEX: -1 = find the RoCE v2 IPv4 GID (RoCE), 0 (IB) */
  rdmx_transport_t transport; /* RDMX_TRANSPORT=rc|ud|auto */
  uint32_t expected_peers;    /* hint for transport=auto (e.g. MPI world size - 1) */
  uint32_t auto_ud_peers;     /* RDMX_AUTO_UD_PEERS: auto picks UD at this many peers */
  uint32_t small_buf_size;    /* RDMX_SMALL_BUF: payload bytes of a small eager buffer */
  uint32_t large_buf_size;    /* RDMX_LARGE_BUF: payload bytes of a large eager buffer (RC) */
  uint32_t srq_depth;         /* RDMX_SRQ_DEPTH: receive buffers per SRQ (minimum enforced) */
  uint32_t srq_low_watermark; /* RDMX_SRQ_LOW_WATERMARK: srq_limit; refill when below */
  size_t eager_limit;         /* RDMX_EAGER_LIMIT: largest message sent eagerly */
  size_t rndv_thresh;         /* RDMX_RNDV_THRESH: messages of this size and up use rendezvous
                                 (so do all messages above the eager limit); default: the
                                 eager limit + 1 */
  uint64_t uid;               /* RDMX_UID: this worker's source id; 0 = derived from host/pid */
  double ud_drop_rate;        /* RDMX_UD_DROP_RATE: TEST ONLY, fraction of UD packets dropped */
  uint32_t ud_rto_us;         /* RDMX_UD_RTO_US: first and smallest UD retransmission timeout */
  uint32_t peer_timeout_ms;   /* RDMX_PEER_TIMEOUT_MS: a silent peer is declared dead after it */
  int verbose;                /* RDMX_VERBOSE: 0 quiet, 1 choices made, 2 debug */
  uint32_t max_rc_peers;      /* RDMX_MAX_RC_PEERS: UD mode, RC connections kept for rendezvous
                                 writes; the least recently used idle one is retired */
  uint32_t coalesce;          /* RDMX_COALESCE: 1 (default) packs small standard sends posted
                                 back to back to one peer, with no progress call between them,
                                 into one packet; 0 sends each alone */
  /* RC mode, the RDMA-write eager ring: a peer that has sent this worker a few messages is given
   * a ring of ring_slots slots of ring_slot_size bytes in this worker's memory, and writes its
   * small messages (header included, up to ring_slot_size - 8 bytes and the device's inline
   * size) straight into it: no receive buffer, no completion at the receiver. */
  uint32_t ring_peers;       /* RDMX_RING_PEERS: rings given at most; their memory, ring_peers
                                x ring_slots x ring_slot_size (256 KiB by default), is
                                registered at once when the first is given; 0: no rings */
  uint32_t ring_slots;       /* RDMX_RING_SLOTS: slots per ring, 2..1024 */
  uint32_t ring_slot_size;   /* RDMX_RING_SLOT_SIZE: bytes per slot, a multiple of 8 in
                                64..4096 */
  int rndv_read_share;       /* RDMX_RNDV_READ_SHARE: RC mode, the percentage (0..90) of a
                                rendezvous message of 8 KiB and more that the receiver reads
                                from the sender's buffer itself (RDMA read) while the sender
                                writes the rest. -1 (default): 50 on software RDMA devices (rxe,
                                siw), where a CPU moves the bytes and the receiver's reads run
                                on its own CPU beside the sender's writes; 0 on hardware */
  uint32_t rc_max_rd_atomic; /* RDMX_RC_MAX_RD_ATOMIC: RC mode, RDMA reads in flight per QP
                                each way, 1..16 (default 16), at most what the device allows;
                                a peer that takes fewer gets no more than it takes */
  uint32_t rc_rnr_retry;     /* RDMX_RC_RNR_RETRY: RC mode, times a send is retried while the
                                receiver has no receive buffer, 0..7; 7 (default): for ever.
                                Below 7 a receive queue that stays empty fails the connection
                                (IBV_WC_RNR_RETRY_EXC_ERR) */
  /* Peers on the same node (the same kernel boot and host name) go through shared memory: a
   * ring per sender in the receiver's segment (/dev/shm) for eager and control messages, and
   * cross-memory attach (process_vm_readv/writev) for rendezvous data, single copy. */
  uint32_t shm;             /* RDMX_SHM: 1 (default) on; 0: every peer through the device */
  uint32_t shm_slots;       /* RDMX_SHM_SLOTS: slots per sender's ring, 2..1024 (default 32),
                               each of one eager message */
  uint32_t shm_rings;       /* RDMX_SHM_RINGS: senders a segment takes, 1..4096 (default 256);
                               file pages are used only by senders that write */
  uint32_t shm_cma;         /* RDMX_SHM_CMA: 1 (default) rendezvous by cross-memory attach;
                               0 copies it through the ring */
  uint32_t shm_local_peers; /* other processes on this node that will attach (the MTL sets
                               it); once they all have, the segment's name is removed, so a
                               crash leaves nothing in /dev/shm. 0: removed at destroy */
  uint64_t node_id;         /* RDMX_NODE_ID: 0 (default) from the kernel's boot id and the host
                               name; tests give ranks different ones to mix channels */
  /* Fabric settings: what a RoCE or InfiniBand cluster may require of every connection (checked
   * at rdmx_worker_create, where the port is known). */
  int traffic_class; /* RDMX_TRAFFIC_CLASS: 0..255 (default 0), the GRH traffic class of
                        every address handle and RC connection; on RoCE its upper 6
                        bits are the DSCP (DSCP 26 = 104) */
  int service_level; /* RDMX_SERVICE_LEVEL: 0..15 (default 0), the SL of every address
                        handle and RC connection */
  int pkey_index;    /* RDMX_PKEY_INDEX: index (default 0) in the port's P_Key table of
                        every QP's partition */
  int path_mtu;      /* RDMX_PATH_MTU: 0 (default) the port's active MTU, else a cap:
                        256, 512, 1024, 2048 or 4096 */
  int rc_timeout;    /* RDMX_RC_TIMEOUT: RC local ACK timeout exponent, 0..31 (default
                        17: 4.096 us x 2^17 = 0.5 s per try; 0 waits for ever) */
  int rc_retry_cnt;  /* RDMX_RC_RETRY_CNT: RC transport retries, 0..7 (default 7) */
  rdmx_thread_mode_t thread_mode; /* RDMX_THREAD_MODE=single|serialized|multi (see Threads) */
  uint32_t max_threads;           /* RDMX_MAX_THREADS: MULTI mode, threads that may use the worker
                                     at once, each with its own send context, 1..1024 (default 32;
                                     the device's largest CQ may allow fewer: rdmx_worker_create
                                     says); a thread that has exited gives its context to the next
                                     new thread */
} rdmx_config_t;

void rdmx_config_init(rdmx_config_t* config);
/* Applies RDMX_* variables. RDMX_ERR_INVALID_PARAM (and a message on stderr naming the variable)
 * when one cannot be parsed. */
int rdmx_config_from_env(rdmx_config_t* config);

typedef struct rdmx_worker rdmx_worker_t;
typedef struct rdmx_ep rdmx_ep_t;
typedef struct rdmx_message rdmx_message_t; /* an unexpected message removed by a probe */

/* Caller-owned request storage. Contents are private to rdmx while the request is active. */
#define RDMX_REQUEST_SIZE 192
typedef struct rdmx_request {
  uint64_t opaque[RDMX_REQUEST_SIZE / 8];
} rdmx_request_t;

typedef struct rdmx_status {
  int error;       /* RDMX_OK, RDMX_ERR_TRUNCATED, RDMX_ERR_CANCELED, RDMX_ERR_UNREACHABLE... */
  uint64_t tag;    /* the message's tag */
  uint64_t source; /* the sending worker's uid */
  size_t length;   /* the message's length as sent (also on truncation) */
} rdmx_status_t;

typedef void (*rdmx_callback_t)(rdmx_request_t* request, const rdmx_status_t* status,
                                void* user_data);

int rdmx_worker_create(const rdmx_config_t* config, rdmx_worker_t** worker);
/* Fails every active request with RDMX_ERR_CANCELED or RDMX_ERR_UNREACHABLE (running their
 * callbacks), tears down every verbs object in man-page order, and frees the worker. */
void rdmx_worker_destroy(rdmx_worker_t* worker);
/* The worker's address blob; valid until the worker is destroyed. */
int rdmx_worker_address(rdmx_worker_t* worker, const void** address, size_t* length);
/* Polls completions, refills SRQs, runs timers and callbacks. Returns the number of events
 * processed (>= 0) or an error code. */
int rdmx_worker_progress(rdmx_worker_t* worker);
/* rdmx_worker_progress() for a caller that may spin on it in a wait loop of its own (an MPI
 * library's blocking wait): while nothing happens it polls again, up to max_polls times in all,
 * when the previous call found nothing and returned less than spin_gap_us microseconds ago (the
 * caller is spinning: each further poll here saves a turn of its loop, which costs more than a
 * poll). Any other call polls once, so a test between compute steps costs what
 * rdmx_worker_progress() costs. Returns like rdmx_worker_progress(). */
int rdmx_worker_poll(rdmx_worker_t* worker, uint32_t max_polls, uint32_t spin_gap_us);
/* For a caller that spins on rdmx_worker_progress() in a wait loop of its own (an MPI library's
 * blocking wait), once per turn of the loop: `events` is what the turn found (the caller's own
 * events included). Once turns have found nothing for `yield_after_us` microseconds, each
 * further idle turn yields the CPU (sched_yield), as rdmx_request_wait does after 100 us: when
 * busy processes outnumber CPUs, and on a software device (rxe, siw) whose RDMA work is the
 * kernel's, a spinning loop holds the CPU that work needs. With nothing else to run, a yield
 * returns at once. A call more than 2 ms after the last idle one ended (a test between compute
 * steps) starts the count again, so such a caller never yields or sleeps. Once they have found
 * nothing for `nap_after_us` (counted from the same start; it takes effect only past
 * yield_after_us), each further idle turn sleeps instead, for 1/32 of the time idle so far, 50 us
 * to 1 ms, as rdmx_request_wait does after 2 ms: a thread the caller's library woke (its other
 * threads' waits) then gets the CPU at once, where a yield may leave it queued. RDMX_IDLE_NEVER for
 * either: never. Any event starts the count again. */
#define RDMX_IDLE_NEVER UINT32_MAX
void rdmx_worker_idle(rdmx_worker_t* worker, int events, uint32_t yield_after_us,
                      uint32_t nap_after_us);
/* Sleeping until something arrives, for a caller with nothing else to do (UCX's
 * uct_iface_event_fd_get/arm, UCP_FEATURE_WAKEUP). rdmx_worker_event_fd gives a file descriptor
 * (an epoll set: one more level of nesting for a caller's own epoll) that poll(2)/epoll report
 * readable once a completion arrives after rdmx_worker_arm returned RDMX_OK, once the device
 * reports an async event (a port down, a fatal error), or once the worker's next deadline passes:
 * UD's resends, a connection's timers, and the watchdog (every 100 ms) while signalled sends are
 * in flight, a UD QP is in error or the port is down (the worker fails if it stays down for
 * peer_timeout_ms), the liveness probes while requests wait (below), and a look at the eager
 * rings being taken back (below) every millisecond. Arming first runs what
 * progress would do that is due (queued sends and credit grants are posted, due timers and
 * watchdogs run, pools are refilled) and sends every owed UD acknowledgement; it then returns
 * RDMX_ERR_BUSY, arming nothing, while work is left that needs progress calls and neither a
 * completion nor the deadline would announce: completions or callbacks not yet handed over, a
 * queued send just posted (a request without a callback may have completed: the caller tests
 * it again), sends waiting for credits, a pool at its low watermark, rendezvous steps, a
 * rendezvous connection being made; while an eager ring it gave (RC) holds a message, since
 * ring writes make no completion: the first arming with rings open (without a shared-memory
 * segment, below) asks their writers to stop, each answering at its next progress call (until
 * then the deadline is at most 1 ms ahead, so that the sleeper looks at the rings; the worker
 * offers no ring after); and always
 * while the worker has a shared-memory segment (RDMX_SHM=1, the default): RDMX_SHM=0 for a
 * worker that sleeps. The caller then calls
 * rdmx_worker_progress and arms again. Arming polls the completion queues once, for what came
 * while it armed (RDMX_ERR_BUSY if anything did; the next progress call hands it over); it runs
 * no callbacks. While requests wait (a receive, a synchronous send's match, a rendezvous), the
 * deadline also covers the liveness probes of quiet peers: the sleeper wakes peer_timeout_ms / 4
 * after arming and probes a peer it has heard nothing from, so a peer that dies while only
 * receives wait for it fails them as for a caller that progresses. While nothing waits, nothing
 * probes its peers. */
int rdmx_worker_event_fd(rdmx_worker_t* worker, int* fd);
int rdmx_worker_arm(rdmx_worker_t* worker);
uint64_t rdmx_worker_uid(const rdmx_worker_t* worker);

/* Whether this worker can reach the worker of `address`, checked without sending anything and
 * without creating an endpoint: both ports on the same kind of fabric (InfiniBand or Ethernet);
 * on RoCE GIDs of one family (IPv4-mapped or IPv6) and a kernel route from this worker's GID
 * address to the peer's; on InfiniBand the same subnet (rdmx routes by LID, without a GRH).
 * Node-local peers reached through shared memory always pass. RDMX_OK; RDMX_ERR_UNREACHABLE
 * with the reason, naming both devices and GIDs, in `why` (NUL-terminated, truncated to
 * why_length bytes; may be NULL); RDMX_ERR_UNSUPPORTED, with the reason, when the two workers
 * use different transports (RC and UD never talk); RDMX_ERR_BAD_ADDRESS. rdmx_ep_create makes
 * the same checks and prints the reason on stderr. */
int rdmx_worker_check_peer(rdmx_worker_t* worker, const void* address, size_t length, char* why,
                           size_t why_length);

/* Connects to a peer: refused with RDMX_ERR_UNREACHABLE (and one line on stderr) when
 * rdmx_worker_check_peer would refuse it; else starts the connection handshake at once (RC: its
 * QPs are created). May return before the connection is fully set up; sends queue behind it. */
int rdmx_ep_create(rdmx_worker_t* worker, const void* address, size_t length, rdmx_ep_t** ep);
/* Fails the endpoint's pending sends with RDMX_ERR_UNREACHABLE and releases it. A later send to
 * it is a use after free; sends from the peer are still received by the worker. */
void rdmx_ep_destroy(rdmx_ep_t* ep);

enum rdmx_send_flags {
  RDMX_SEND_SYNC = 1u << 0, /* complete only once the receiver has matched it (MPI_Ssend) */
  RDMX_SEND_FLUSH = 1u << 1 /* never coalesced: this send, and what was packed for the peer
                               before it, leave now (a blocking send that must not leave bytes
                               behind when it returns) */
};

/* Peer failure. A peer is found dead when a send to it fails or makes no progress, when it
 * answers no connection request, or, while this worker has requests active or is being probed,
 * when it stays silent and does not answer liveness probes (RC: a zero-length RDMA write, answered
 * by the peer's adapter; UD: a ping its progress answers); all bounded by peer_timeout_ms (see
 * transport/README.md, "Peer failure"). Then its pending sends and the receives naming it as
 * source fail with RDMX_ERR_UNREACHABLE, a later send to it or receive from it is refused with
 * RDMX_ERR_UNREACHABLE (messages it sent before dying still match), and the peer-failure
 * callback runs once with its uid. A peer that leaves cleanly (its worker destroyed) fails the
 * sends to it but not the receives naming it, and runs no callback.
 * The callback runs from inside rdmx_worker_progress() or rdmx_request_wait(), like request
 * callbacks, and must not call rdmx: record the uid and act (e.g. fail RDMX_ANY_SOURCE receives
 * the dead peer could have satisfied) once progress has returned. NULL removes it. */
typedef void (*rdmx_peer_failure_cb_t)(uint64_t uid, void* arg);
int rdmx_worker_set_peer_failure_callback(rdmx_worker_t* worker, rdmx_peer_failure_cb_t callback,
                                          void* arg);

int rdmx_tag_send(rdmx_ep_t* ep, const void* buffer, size_t length, uint64_t tag, unsigned flags,
                  rdmx_request_t* request, rdmx_callback_t callback, void* user_data);
/* A standard send that leaves now or not at all, with no request (as libfabric's fi_tinject):
 * RDMX_OK when it is posted, in order behind every earlier send to the peer; the buffer is free
 * again and nothing more will be reported of it. RDMX_ERR_NO_RESOURCE, with nothing done, when it
 * cannot leave at once: the connection is still being set up, earlier sends to the peer still
 * wait, a send queue or the peer's credits are full, the message is of rendezvous size (never
 * injected), or, without RDMX_SEND_FLUSH, it is part of a burst that rdmx_tag_send would pack
 * with others (see transport/README.md, "Coalescing"). Send it then with rdmx_tag_send, which
 * queues it behind the others. flags: 0 or RDMX_SEND_FLUSH. Also RDMX_ERR_UNREACHABLE (the peer
 * failed), RDMX_ERR_IO (the post failed), RDMX_ERR_INVALID_PARAM. Saves a request's set-up and
 * test on the paths that send small messages one at a time (MPI_Send, UCT's am_short). */
int rdmx_tag_inject(rdmx_ep_t* ep, const void* buffer, size_t length, uint64_t tag, unsigned flags);
/* rdmx_tag_inject of one message made of an 8-byte header, then `length` bytes at `buffer`: the
 * receiver gets 8 + length bytes, the header's in host byte order, as if the sender had stored
 * both in one buffer first; rdmx copies each once, into the message it posts. For a host that
 * puts a word of its own in front of the caller's data (UCT's am_short). Results as
 * rdmx_tag_inject. */
int rdmx_tag_inject_header(rdmx_ep_t* ep, uint64_t header, const void* buffer, size_t length,
                           uint64_t tag, unsigned flags);
/* A zero-copy eager send that leaves now or not at all (as rdmx_tag_inject), of one message made
 * of `head_length` bytes at `head` (at most RDMX_ZCOPY_MAX_HEAD; copied before the call returns)
 * then `length` bytes at `buffer`, registered in the worker's protection domain (rdmx_worker_pd)
 * with lkey `lkey`, which the adapter reads after the call returns: the request completes when
 * the send's completion arrives, and the buffer is the caller's again. For a host that sends from
 * memory it has registered, with a header of its own in front (UCT's am_zcopy). The receiver sees
 * an ordinary message of head_length + length bytes, in order with the other sends to the peer.
 * Over RC only, at most the eager size (RDMX_LARGE_BUF) in all. Returns RDMX_OK once posted; the
 * request's status then: length and tag, source = the peer's uid; error RDMX_OK, RDMX_ERR_IO
 * when the device refused it (an lkey or address outside a registration: the connection fails
 * with it, as a put's would), RDMX_ERR_UNREACHABLE when the peer failed first, RDMX_ERR_CANCELED
 * at rdmx_worker_destroy (the adapter may still read the buffer until rdmx_worker_destroy
 * returns). Refused without taking the request or the buffer (sends packed for the peer may
 * have left first, as before any send): RDMX_ERR_NO_RESOURCE when it cannot leave at once (the
 * connection not up yet, earlier sends waiting for the peer, the peer's credits or order window,
 * a full send queue, no free send buffer) or is of rendezvous size, where the caller copies or
 * sends with rdmx_tag_send; RDMX_ERR_UNSUPPORTED over UD (which keeps a copy of each message for
 * its resends) and to a peer reached through shared memory; RDMX_ERR_IO when the device refused
 * the post; RDMX_ERR_UNREACHABLE (a failed peer), RDMX_ERR_INVALID_PARAM, and in
 * RDMX_THREAD_MULTI the worker lock's errors. Counted in rdmx_stats_t.zcopy_sends. */
#define RDMX_ZCOPY_MAX_HEAD 64
int rdmx_tag_send_zcopy(rdmx_ep_t* ep, const void* head, size_t head_length, const void* buffer,
                        size_t length, uint32_t lkey, uint64_t tag, rdmx_request_t* request,
                        rdmx_callback_t callback, void* user_data);
/* RDMX_ERR_UNREACHABLE (nothing accepted) when `source` is a peer found dead and none of the
 * messages it sent before dying matches. */
int rdmx_tag_recv(rdmx_worker_t* worker, void* buffer, size_t length, uint64_t source, uint64_t tag,
                  uint64_t tag_mask, rdmx_request_t* request, rdmx_callback_t callback,
                  void* user_data);

/* A receive sink: receives made on demand, for a host that takes every message as it comes
 * (UCX's active messages) and would otherwise keep wildcard receives posted for them. A message
 * that matches no posted receive, while no message waits unexpected (so order holds), goes to
 * the sink, which returns storage for a request and a buffer of *capacity bytes: rdmx receives
 * the message there as if rdmx_tag_recv(worker, *buffer, *capacity, RDMX_ANY_SOURCE, 0, 0,
 * request, NULL, NULL) had been posted just before it (an eager message is done when progress
 * returns, a rendezvous one later; truncation as there). NULL: the message waits unexpected, as
 * without a sink, for a later receive. The sink runs inside progress, like callbacks, and must
 * not call rdmx. NULL removes it. No probe sees a message the sink took. */
typedef rdmx_request_t* (*rdmx_recv_sink_t)(void* arg, void** buffer, size_t* capacity);
int rdmx_worker_set_recv_sink(rdmx_worker_t* worker, rdmx_recv_sink_t sink, void* arg);

/* Looks for a matching unexpected message. Returns 1 and fills *status when found, else 0, or
 * RDMX_ERR_UNREACHABLE when nothing matches and `source` names a peer found dead (nothing more
 * can come from it: a probe loop on it ends).
 * With message != NULL the message is removed from matching (MPI_Improbe) and must be received
 * with rdmx_tag_msg_recv. */
int rdmx_tag_probe(rdmx_worker_t* worker, uint64_t source, uint64_t tag, uint64_t tag_mask,
                   rdmx_status_t* status, rdmx_message_t** message);
int rdmx_tag_msg_recv(rdmx_worker_t* worker, rdmx_message_t* message, void* buffer, size_t length,
                      rdmx_request_t* request, rdmx_callback_t callback, void* user_data);

/*
 * One-sided RDMA: RDMA write (put) and read (get) between registered memory of this process and
 * a peer's reached through the device (RDMX_ERR_UNSUPPORTED to a node-local peer reached through
 * shared memory): on the peer's RC connection, or under UD on an RC connection made on demand
 * for this and for rendezvous (RDMX_MAX_RC_PEERS of them; the least recently used idle one goes
 * when another is needed).
 *
 * Memory is registered by the caller in the worker's protection domain, rdmx_worker_pd() (a
 * struct ibv_pd*), with ibv_reg_mr: the local buffer with IBV_ACCESS_LOCAL_WRITE and its lkey;
 * the peer's target with IBV_ACCESS_REMOTE_WRITE (puts) or IBV_ACCESS_REMOTE_READ (gets), whose
 * address and rkey the peer hands over by its own means (a tagged message). Deregister it
 * before rdmx_worker_destroy, which otherwise cannot free the protection domain (it says so).
 *
 * Returns RDMX_OK once the operation is posted; the request then completes (callback or
 * rdmx_request_test) when the device reports it done: for a put, the data is in the peer's
 * memory; for a get, in ours. Status: length, and source = the peer's uid; error RDMX_OK,
 * RDMX_ERR_IO when the device refused it (a key or address outside a registration: the RC
 * connection fails with it, and the peer becomes unreachable, as on any RC adapter; under UD
 * only the on-demand connection, and the next operation makes another),
 * RDMX_ERR_UNREACHABLE when the peer failed first, RDMX_ERR_CANCELED at rdmx_worker_destroy.
 * Refused, with nothing posted: RDMX_ERR_NO_RESOURCE while the connection is still being set
 * up (rdmx_ep_create started it; under UD, the first operation to a peer starts it, and so does
 * one while every on-demand connection is busy) or the connection's send queue is full:
 * progress and retry;
 * RDMX_ERR_UNREACHABLE to a failed peer; RDMX_ERR_INVALID_PARAM for a NULL buffer with a
 * length, or a length above the port's largest message. A posted operation cannot be
 * cancelled (RDMX_ERR_BUSY). Puts and gets are not ordered with each other nor with tagged
 * messages: wait for the request before relying on the data.
 */
struct ibv_pd;
struct ibv_pd* rdmx_worker_pd(rdmx_worker_t* worker);
int rdmx_put(rdmx_ep_t* ep, const void* buffer, size_t length, uint32_t lkey, uint64_t remote_addr,
             uint32_t rkey, rdmx_request_t* request, rdmx_callback_t callback, void* user_data);
int rdmx_get(rdmx_ep_t* ep, void* buffer, size_t length, uint32_t lkey, uint64_t remote_addr,
             uint32_t rkey, rdmx_request_t* request, rdmx_callback_t callback, void* user_data);

/* RDMX_INPROGRESS while active; otherwise the final status code (also copied into *status when
 * status != NULL). Does not progress the worker. */
int rdmx_request_test(const rdmx_request_t* request, rdmx_status_t* status);
/* Progresses until the request completes or timeout_ms passes (< 0: no limit). */
int rdmx_request_wait(rdmx_worker_t* worker, rdmx_request_t* request, rdmx_status_t* status,
                      int timeout_ms);
/* Cancels an unmatched receive: it completes with RDMX_ERR_CANCELED. RDMX_ERR_BUSY when the
 * request is a send or already matched (it then completes normally). */
int rdmx_request_cancel(rdmx_worker_t* worker, rdmx_request_t* request);
/* Fails every posted RDMX_ANY_SOURCE receive whose tag agrees with `tag` in the bits set in
 * `mask`: it completes with RDMX_ERR_UNREACHABLE, nothing received (one a message has matched
 * already completes normally). For a host whose wildcard receives wait on a group of peers that
 * has lost one (MPI's MPI_ANY_SOURCE rule, with the communicator in the tag): rdmx does not know
 * the groups, and the host then needs no list of its own wildcard receives. A failure path: it
 * walks the worker's requests. Returns how many it failed, or RDMX_ERR_INVALID_PARAM. */
int rdmx_tag_recv_fail_any_source(rdmx_worker_t* worker, uint64_t tag, uint64_t mask);

/* Counters for tuning and tests: one uint64_t per line of rdmx/stats.def, which says what each
 * counts. */
typedef struct rdmx_stats {
  rdmx_transport_t transport; /* the transport chosen */
#define RDMX_STAT(name, kind, help) uint64_t name;
#include "rdmx/stats.def"
#undef RDMX_STAT
} rdmx_stats_t;

int rdmx_worker_stats(const rdmx_worker_t* worker, rdmx_stats_t* stats);

#ifdef __cplusplus
}
#endif
#endif /* RDMX_RDMX_H */
