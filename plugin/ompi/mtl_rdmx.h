/*
 * The rdmx MTL: Open MPI's Matching Transport Layer interface translated into rdmx's C API
 * (include/rdmx/rdmx.h). Everything else (matching, ordering, eager/rendezvous, synchronous
 * sends, connections) is rdmx's.
 *
 * Files: mtl_rdmx_component.c (MCA parameters, init: config, worker, modex), mtl_rdmx_module.c
 * (procs and endpoints, communicators, progress and completion, finalize), mtl_rdmx_send.c,
 * mtl_rdmx_recv.c (receives, probes, cancel), mtl_rdmx_failure.c (dead processes: the
 * MPI_ANY_SOURCE rule), mtl_rdmx_tag.h (the tag layout).
 */
#ifndef MTL_RDMX_H
#define MTL_RDMX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ompi/communicator/communicator.h"
#include "ompi/mca/mtl/base/base.h"
#include "ompi/mca/mtl/mtl.h"
#include "ompi/proc/proc.h"
#include "ompi_config.h"
#include "opal/threads/mutex.h"
#include "rdmx/rdmx.h"

BEGIN_C_DECLS

/* What a request is doing; decides what its completion does. */
typedef enum mca_mtl_rdmx_req_kind {
  MCA_MTL_RDMX_REQ_SEND = 1,          /* isend: complete the pml request */
  MCA_MTL_RDMX_REQ_BLOCKING_SEND = 2, /* send(): a request on the caller's stack, no pml request */
  MCA_MTL_RDMX_REQ_RECV = 3           /* irecv/imrecv */
} mca_mtl_rdmx_req_kind_t;

/*
 * Lives inside pml cm's request (mtl_request_size = sizeof this), so a message costs no
 * allocation unless its datatype is not contiguous.
 */
typedef struct mca_mtl_rdmx_request {
  mca_mtl_request_t super; /* first: pml cm hands us &its->req_mtl */
  rdmx_request_t rdmx;     /* rdmx's storage for the operation */
  rdmx_status_t status;    /* copied by the rdmx callback, read at completion */
  struct opal_convertor_t* convertor;
  void* buffer;    /* packed (send) or staging (receive) copy for a non-contiguous datatype */
  size_t capacity; /* receive: bytes the buffer takes */
  struct mca_mtl_rdmx_request* next_done; /* module's stack of completions to deliver */
  struct ompi_proc_t* peer; /* send: the destination, named when rdmx finds it unreachable */
  uint64_t source_uid;
  mca_mtl_rdmx_req_kind_t kind;
  bool free_buffer; /* buffer is ours (malloc'd by the datatype helpers) */
  bool injected;    /* send(): sent by rdmx_tag_inject, done with no rdmx request */
} mca_mtl_rdmx_request_t;

/* Per peer process, in proc->proc_endpoints[OMPI_PROC_ENDPOINT_TAG_MTL]. */
typedef struct mca_mtl_rdmx_endpoint {
  rdmx_ep_t* ep; /* created on the first send to the peer */
  void* address; /* the peer worker's address blob, from the modex */
  size_t address_length;
  struct ompi_proc_t* proc;
  /* rdmx failed a request to it with RDMX_ERR_UNREACHABLE: said once (under the lock). */
  bool unreachable;
  struct mca_mtl_rdmx_endpoint* prev; /* module's list, so finalize frees what del_procs did not */
  struct mca_mtl_rdmx_endpoint* next;
} mca_mtl_rdmx_endpoint_t;

typedef struct mca_mtl_rdmx_module {
  mca_mtl_base_module_t super;
  rdmx_worker_t* worker;
  /* Under MPI_THREAD_MULTIPLE (rdmx's worker in thread mode multi, which locks itself) this lock
   * guards the MTL's own state only: endpoint creation, the communicators and the dead
   * processes. Sends, receives, probes, progress and completions take it only to connect to a
   * peer, or once a process has died. It is never held
   * across an rdmx call that runs callbacks (progress, poll, destroy), since a callback may take
   * it; rdmx takes its worker lock inside it (lock order: this lock, then rdmx's;
   * transport/README.md "Threads"). OPAL_THREAD_LOCK is a no-op without threads. */
  opal_mutex_t lock;
  /* Completions taken from rdmx callbacks, delivered to pml cm after rdmx returns (see
   * mtl_rdmx_module.c): a stack, pushed by any thread's callback, taken whole by progress
   * (atomics under threads, no lock). */
  mca_mtl_rdmx_request_t* done;
  mca_mtl_rdmx_endpoint_t* endpoints;
  /* The communicators pml cm has added (add_comm, del_comm): where a dead process's
   * MPI_ANY_SOURCE receives are (mtl_rdmx_failure.c). Under the lock. */
  struct ompi_communicator_t** comms;
  size_t comm_count;
  size_t comm_capacity;
  /* Processes rdmx found dead (uids, mtl_rdmx_failure.c): appended by rdmx's peer-failure
   * callback, acted on by progress from dead_handled on; kept for the MPI_ANY_SOURCE rule. The
   * counts are written under the lock and stored atomically, so that progress and receives read
   * them without it. */
  uint64_t* dead_uids;
  size_t dead_count;
  size_t dead_capacity;
  size_t dead_handled;
  bool warned_progress;
  int idle_yield_us; /* (threads_)yield_after_us, chosen at init by the thread level */
  int idle_nap_us;   /* threads_nap_after_us under MPI_THREAD_MULTIPLE, else -1 */
} mca_mtl_rdmx_module_t;

/* The MCA parameters (mtl_rdmx_*), registered in mtl_rdmx_component.c: one per rdmx setting
 * of transport/settings.def marked mca, in the C type Open MPI stores its kind in, then the
 * MTL's own. */
#define MTL_RDMX_CTYPE_INT int
#define MTL_RDMX_CTYPE_U32 unsigned int
#define MTL_RDMX_CTYPE_SIZE32 unsigned int
#define MTL_RDMX_CTYPE_SIZE size_t
#define MTL_RDMX_CTYPE_STRING char*
#define MTL_RDMX_CTYPE_TRANSPORT int /* rdmx_transport_t */
#define MTL_RDMX_IF_MCA_1(...) __VA_ARGS__
#define MTL_RDMX_IF_MCA_0(...)
typedef struct mca_mtl_rdmx_params {
#define RDMX_SETTING(field, env, mca, kind, lo, hi, level, help) \
  MTL_RDMX_IF_MCA_##mca(MTL_RDMX_CTYPE_##kind field;)
#include "transport/settings.def"
#undef RDMX_SETTING
  int priority;
  int print_stats;             /* finalize prints rdmx_stats_t (also RDMX_STATS=1) */
  unsigned int progress_polls; /* rdmx polls per wait-loop turn while nothing happens, >= 1 */
  int yield_after_us;          /* rdmx_worker_idle's threshold; -1: never yield */
  int threads_yield_after_us;  /* the same under MPI_THREAD_MULTIPLE */
  int threads_nap_after_us;    /* under MPI_THREAD_MULTIPLE, idle calls sleep past it; -1: never */
} mca_mtl_rdmx_params_t;

/* A progress call that comes less than this after an idle one is a turn of a wait loop
 * (rdmx_worker_poll's spin_gap_us). A turn of pml cm's loop took under 5 us in the Soft-RoCE
 * guest, the every-8th clock read included; an application that computes between its MPI_Test
 * calls comes back later. */
#define MTL_RDMX_SPIN_GAP_US 10
/* A macro's value as a string literal (the parameter help quotes the gap). */
#define MTL_RDMX_STR_(x) #x
#define MTL_RDMX_STR(x) MTL_RDMX_STR_(x)

OMPI_DECLSPEC extern mca_mtl_base_component_2_0_0_t mca_mtl_rdmx_component;
extern mca_mtl_rdmx_module_t ompi_mtl_rdmx;
extern mca_mtl_rdmx_params_t ompi_mtl_rdmx_params;
extern int ompi_mtl_rdmx_output; /* opal_output stream, verbosity = mtl_rdmx_verbose */

/* rdmx matches sources on the sending worker's uid. Every process sets its uid to its own
 * Open MPI name, jobid in the high 32 bits and vpid (the MPI_COMM_WORLD rank) in the low 32,
 * so any receiver computes a peer's uid from the ompi_proc_t without asking anyone. */
static inline uint64_t mtl_rdmx_uid_of(const opal_process_name_t* name) {
  return ((uint64_t)name->jobid << 32) | (uint64_t)name->vpid;
}

/* module */
int ompi_mtl_rdmx_add_procs(struct mca_mtl_base_module_t* mtl, size_t nprocs,
                            struct ompi_proc_t** procs);
int ompi_mtl_rdmx_del_procs(struct mca_mtl_base_module_t* mtl, size_t nprocs,
                            struct ompi_proc_t** procs);
int ompi_mtl_rdmx_finalize(struct mca_mtl_base_module_t* mtl);
int ompi_mtl_rdmx_add_comm(struct mca_mtl_base_module_t* mtl, struct ompi_communicator_t* comm);
int ompi_mtl_rdmx_del_comm(struct mca_mtl_base_module_t* mtl, struct ompi_communicator_t* comm);
int ompi_mtl_rdmx_progress(void);
/* The endpoint to send to a peer, connecting on first use. NULL after printing why. Lock held. */
rdmx_ep_t* ompi_mtl_rdmx_get_ep(struct ompi_proc_t* proc);
/* The same, taking the lock only when the endpoint is not made yet. */
rdmx_ep_t* ompi_mtl_rdmx_ep_of(struct ompi_proc_t* proc);
/* rdmx callback for every request: records the status, queues the completion. */
void ompi_mtl_rdmx_callback(rdmx_request_t* request, const rdmx_status_t* status, void* user_data);
/* An rdmx error code from a post call as an OMPI error code. */
int ompi_mtl_rdmx_error(int rdmx_code);
/* rdmx failed a request to proc with RDMX_ERR_UNREACHABLE: says so once per peer (the error
 * also reaches the request's status as MPI_ERR_OTHER). */
void ompi_mtl_rdmx_peer_unreachable(struct ompi_proc_t* proc);
/* Queues the completion, with status error, of a request rdmx does not have (delivered by the
 * next progress). Lock held or not. */
void ompi_mtl_rdmx_complete_now(mca_mtl_rdmx_request_t* r, int error);

/* Dead processes (mtl_rdmx_failure.c). The rdmx peer-failure callback: records the uid. */
void ompi_mtl_rdmx_peer_failed(uint64_t uid, void* arg);
/* From progress, once rdmx has returned, when dead_handled != dead_count: says which process
 * died and fails the posted MPI_ANY_SOURCE receives of communicators that contain it. */
void ompi_mtl_rdmx_handle_peer_failures(void);
/* A process of comm is dead (false at once while none is). Lock held. */
bool ompi_mtl_rdmx_comm_has_dead(struct ompi_communicator_t* comm);
/* A posted MPI_ANY_SOURCE receive of comm fails (now, or on the next progress) if a process of
 * comm is dead. Lock not held. */
void ompi_mtl_rdmx_check_any_source(struct ompi_communicator_t* comm);
/* add_comm, del_comm: the communicators a death is looked for in. Lock not held. */
int ompi_mtl_rdmx_comm_added(struct ompi_communicator_t* comm);
void ompi_mtl_rdmx_comm_removed(struct ompi_communicator_t* comm);
/* Finalize: forget the dead processes and the communicators. */
void ompi_mtl_rdmx_dead_fini(void);

/* mtl_rdmx_stats.c: the counters as MPI_T performance variables (at component registration) and
 * the opt-in stats line at finalize (module lock held). */
void ompi_mtl_rdmx_register_pvars(void);
void ompi_mtl_rdmx_print_stats(void);

/* send */
int ompi_mtl_rdmx_send(struct mca_mtl_base_module_t* mtl, struct ompi_communicator_t* comm,
                       int dest, int tag, struct opal_convertor_t* convertor,
                       mca_pml_base_send_mode_t mode);
int ompi_mtl_rdmx_isend(struct mca_mtl_base_module_t* mtl, struct ompi_communicator_t* comm,
                        int dest, int tag, struct opal_convertor_t* convertor,
                        mca_pml_base_send_mode_t mode, bool blocking,
                        mca_mtl_request_t* mtl_request);

/* receive, probe, cancel */
int ompi_mtl_rdmx_irecv(struct mca_mtl_base_module_t* mtl, struct ompi_communicator_t* comm,
                        int src, int tag, struct opal_convertor_t* convertor,
                        mca_mtl_request_t* mtl_request);
int ompi_mtl_rdmx_iprobe(struct mca_mtl_base_module_t* mtl, struct ompi_communicator_t* comm,
                         int src, int tag, int* flag, struct ompi_status_public_t* status);
int ompi_mtl_rdmx_improbe(struct mca_mtl_base_module_t* mtl, struct ompi_communicator_t* comm,
                          int src, int tag, int* matched, struct ompi_message_t** message,
                          struct ompi_status_public_t* status);
int ompi_mtl_rdmx_imrecv(struct mca_mtl_base_module_t* mtl, struct opal_convertor_t* convertor,
                         struct ompi_message_t** message, mca_mtl_request_t* mtl_request);
int ompi_mtl_rdmx_cancel(struct mca_mtl_base_module_t* mtl, mca_mtl_request_t* mtl_request,
                         int flag);

END_C_DECLS

#endif /* MTL_RDMX_H */
