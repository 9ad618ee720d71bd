/*
 * The seam between the transports' C glue (tl_iface.c, written in C because UCX's class macros
 * are) and the C++ side of the module (component.cc): the MD's device and port facts, and the
 * address split of tl_address.h.
 */
#ifndef RDMX_PLUGIN_UCX_TL_GLUE_H
#define RDMX_PLUGIN_UCX_TL_GLUE_H

#include <stddef.h>
#include <stdint.h>
#include <uct/api/uct.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What tl_address.h's sizes are, for C. */
size_t rdmx_ucx_tl_device_address_size(void);
size_t rdmx_ucx_tl_iface_address_size(void);
/* A worker's blob split into its device and interface addresses (the sizes above): 1 on
 * success, 0 when the blob cannot be split. */
int rdmx_ucx_tl_address_split(const void* blob, size_t length, void* device, void* iface);
/* The blob of the worker whose parts these are, into `blob` (at least
 * rdmx_ucx_tl_blob_size() bytes): 1 on success, 0 when the parts are not a worker's. */
int rdmx_ucx_tl_address_join(const void* device, const void* iface, void* blob);
size_t rdmx_ucx_tl_blob_size(void);
/* The rdmx_transport_t of the worker of an interface address. */
int rdmx_ucx_tl_address_transport(const void* iface);
/* The payload bytes of the larger receive buffers of the worker whose blob this is: the largest
 * message it takes eagerly (0 when the blob is not a worker's). */
size_t rdmx_ucx_tl_eager_capacity(const void* blob, size_t length);
/* The uid of the worker whose blob (rdmx_ucx_tl_blob_size() bytes) this is: the source its
 * messages and its failure are reported by (0 when the blob is not a worker's). */
uint64_t rdmx_ucx_tl_blob_uid(const void* blob);

/* The RDMA device of an rdmx MD, its physical ports, and a port's state (1 active, 0 not) and
 * signalling rate in bytes per second (0 when it cannot be queried). */
const char* rdmx_ucx_md_device(uct_md_h md);
int rdmx_ucx_md_port_count(uct_md_h md);
int rdmx_ucx_md_port_active(uct_md_h md, int port);
double rdmx_ucx_md_port_bandwidth(uct_md_h md, int port);

/* The largest message of a port (ibv_port_attr.max_msg_sz; 0 when it cannot be queried). */
size_t rdmx_ucx_md_port_max_msg(uct_md_h md, int port);

/* Put and get (domain.h): an rdmx_rc interface attaches its worker's PD to the MD, so that every
 * registration of the MD is also made there. The slot (>= 0), or -1 when the MD has no free
 * slot or registering its memory there failed (said on stderr): the interface then offers no
 * put/get. Detach before the worker is destroyed. */
#define RDMX_UCX_MAX_RMA_IFACES 4 /* md_format.h's kMaxRmaWorkers */
struct ibv_pd;
int rdmx_ucx_md_attach(uct_md_h md, uint64_t uid, struct ibv_pd* pd);
void rdmx_ucx_md_detach(uct_md_h md, int slot);
/* The lkey of a memh in the worker of an attached slot: 1, or 0 when it has none there. */
int rdmx_ucx_memh_lkey(uct_mem_h memh, int slot, uint32_t* lkey);
/* The rkey of an unpacked key in the peer worker `uid`: 1, or 0 when the key has none for it. */
int rdmx_ucx_rkey_for(uct_rkey_t rkey, uint64_t uid, uint32_t* out);
/* The interface's own buffers for put/get short and bcopy, registered in its worker's PD: the
 * MR (to pass to rdmx_ucx_pd_dereg before the worker goes) and its lkey, or NULL when
 * registering failed (said on stderr). */
void* rdmx_ucx_pd_reg(struct ibv_pd* pd, void* addr, size_t length, uint32_t* lkey);
void rdmx_ucx_pd_dereg(void* mr);

/* Adds rdmx_rc and rdmx_ud to the component's transports (tl_iface.c): before
 * uct_component_register, so that UCX finds them when it lists the component's. */
void rdmx_ucx_add_transports(uct_component_t* component);

#ifdef __cplusplus
}
#endif
#endif
