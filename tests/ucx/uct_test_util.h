/* What the UCT test programs of tests/ucx share: failing checks, the kernel's view of this
 * process's verbs objects, and finding component rdmx through the public API. Header-only: each
 * program is one C file. */
#ifndef RDMX_TESTS_UCX_UCT_TEST_UTIL_H
#define RDMX_TESTS_UCX_UCT_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucs/async/async_fwd.h>
#include <uct/api/uct.h>
#include <unistd.h>

#define CHECK(cond, ...)                     \
  do {                                       \
    if (!(cond)) {                           \
      fprintf(stderr, "FAIL: " __VA_ARGS__); \
      fputc('\n', stderr);                   \
      exit(1);                               \
    }                                        \
  } while (0)

#define CHECK_OK(status, what) CHECK((status) == UCS_OK, "%s: %s", what, ucs_status_string(status))

/* The lines of `rdma resource show KIND` that belong to this process, into out (may be NULL).
 * Returns how many there are. */
static inline int own_resources(const char* kind, char* out, size_t out_size) {
  char cmd[64], line[1024], pid[32];
  int n = 0;
  snprintf(cmd, sizeof(cmd), "rdma resource show %s", kind);
  snprintf(pid, sizeof(pid), " pid %d ", (int)getpid());
  FILE* p = popen(cmd, "r");
  CHECK(p != NULL, "popen(%s)", cmd);
  if (out != NULL && out_size > 0) {
    out[0] = '\0';
  }
  while (fgets(line, sizeof(line), p) != NULL) {
    if (strstr(line, pid) == NULL) {
      continue;
    }
    ++n;
    if (out != NULL && strlen(out) + strlen(line) < out_size) {
      strcat(out, line);
    }
  }
  CHECK(pclose(p) == 0, "%s failed", cmd);
  return n;
}

static inline double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static inline void flush_completed(uct_completion_t* comp) {
  (void)comp;
}

/* Flushes the endpoint, progressing the worker (also while the endpoint has no resource for
 * it): the flush's final status. Fails past `bound_s` seconds (a hang). */
static inline ucs_status_t flush_ep(uct_worker_h worker, uct_ep_h ep, double bound_s) {
  uct_completion_t comp = {.func = flush_completed, .count = 1, .status = UCS_OK};
  const double deadline = now_s() + bound_s;
  ucs_status_t status;
  while ((status = uct_ep_flush(ep, 0, &comp)) == UCS_ERR_NO_RESOURCE) {
    CHECK(now_s() < deadline, "flush found no resource for %.0f s", bound_s);
    uct_worker_progress(worker);
  }
  if (status != UCS_INPROGRESS) {
    return status;
  }
  while (comp.count > 0) {
    CHECK(now_s() < deadline, "flush not done after %.0f s", bound_s);
    uct_worker_progress(worker);
  }
  return comp.status;
}

/* Opens an interface of transport tl on device dev, with on_am as the handler of AM id am_id
 * and, unless on_error is NULL, the interface's error handler; its progress enabled, as UCP
 * enables it (uct_worker_progress calls only the interfaces enabled). *attr: its query. */
static inline uct_iface_h open_iface(uct_md_h md, uct_worker_h worker, const char* tl,
                                     const char* dev, uint8_t am_id, uct_am_callback_t on_am,
                                     void* am_arg, uct_error_handler_t on_error, void* error_arg,
                                     uct_iface_attr_t* attr) {
  uct_iface_config_t* config;
  uct_iface_h iface;
  CHECK_OK(uct_md_iface_config_read(md, tl, NULL, NULL, &config), "uct_md_iface_config_read");
  uct_iface_params_t params = {
      .field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE | UCT_IFACE_PARAM_FIELD_DEVICE |
                    UCT_IFACE_PARAM_FIELD_STATS_ROOT | UCT_IFACE_PARAM_FIELD_RX_HEADROOM,
      .open_mode = UCT_IFACE_OPEN_MODE_DEVICE,
      .mode.device = {.tl_name = tl, .dev_name = dev},
      .stats_root = NULL,
      .rx_headroom = 0,
      .err_handler = on_error,
      .err_handler_arg = error_arg,
      .err_handler_flags = 0};
  if (on_error != NULL) {
    params.field_mask |= UCT_IFACE_PARAM_FIELD_ERR_HANDLER | UCT_IFACE_PARAM_FIELD_ERR_HANDLER_ARG |
                         UCT_IFACE_PARAM_FIELD_ERR_HANDLER_FLAGS;
  }
  CHECK_OK(uct_iface_open(md, worker, &params, config, &iface), "uct_iface_open");
  uct_config_release(config);
  CHECK_OK(uct_iface_query(iface, attr), "uct_iface_query");
  CHECK_OK(uct_iface_set_am_handler(iface, am_id, on_am, am_arg, 0), "set_am_handler");
  uct_iface_progress_enable(iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
  return iface;
}

/* Component rdmx and its memory domains (*mds: calloc'd, the caller frees it). Fails when the
 * module is not loaded. *components is for uct_release_component_list. */
static inline uct_component_h find_rdmx(uct_component_h** components, uct_md_resource_desc_t** mds,
                                        unsigned* num_mds) {
  unsigned num_components;
  CHECK_OK(uct_query_components(components, &num_components), "uct_query_components");
  for (unsigned i = 0; i < num_components; ++i) {
    uct_component_attr_t attr = {.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
                                               UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT};
    CHECK_OK(uct_component_query((*components)[i], &attr), "uct_component_query");
    if (strcmp(attr.name, "rdmx") != 0) {
      continue;
    }
    *mds = calloc(attr.md_resource_count + 1, sizeof(**mds));
    CHECK(*mds != NULL, "calloc");
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
    attr.md_resources = *mds;
    CHECK_OK(uct_component_query((*components)[i], &attr), "uct_component_query(md_resources)");
    *num_mds = attr.md_resource_count;
    return (*components)[i];
  }
  CHECK(0, "no UCT component rdmx (is libuct_rdmx.so preloaded?)");
  return NULL;
}

/* An interface's device and interface addresses, allocated (free them with free). */
static inline void get_addresses(uct_iface_h iface, const uct_iface_attr_t* attr,
                                 uct_device_addr_t** dev_addr, uct_iface_addr_t** iface_addr) {
  *dev_addr = calloc(1, attr->device_addr_len);
  *iface_addr = calloc(1, attr->iface_addr_len);
  CHECK(*dev_addr != NULL && *iface_addr != NULL, "calloc");
  CHECK_OK(uct_iface_get_device_address(iface, *dev_addr), "get_device_address");
  CHECK_OK(uct_iface_get_address(iface, *iface_addr), "get_address");
}

/* An endpoint of `iface` to the interface at those addresses (connect to interface). */
static inline uct_ep_h connect_ep(uct_iface_h iface, const uct_device_addr_t* dev_addr,
                                  const uct_iface_addr_t* iface_addr) {
  uct_ep_h ep;
  CHECK(uct_iface_is_reachable(iface, dev_addr, iface_addr), "peer unreachable");
  uct_ep_params_t params = {.field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR |
                                          UCT_EP_PARAM_FIELD_IFACE_ADDR,
                            .iface = iface,
                            .dev_addr = dev_addr,
                            .iface_addr = iface_addr};
  CHECK_OK(uct_ep_create(&params, &ep), "uct_ep_create");
  return ep;
}

/* The first of the component's MDs that offers transport tl: its name and the device's (0 when
 * none does). */
static inline int find_tl_device(uct_component_h component, const uct_md_resource_desc_t* mds,
                                 unsigned num_mds, const char* tl, char* md_name, char* dev_name) {
  for (unsigned j = 0; j < num_mds; ++j) {
    uct_md_config_t* config;
    uct_md_h md;
    uct_tl_resource_desc_t* tls;
    unsigned num_tls, found = 0;
    CHECK_OK(uct_md_config_read(component, NULL, NULL, &config), "uct_md_config_read");
    CHECK_OK(uct_md_open(component, mds[j].md_name, config, &md), "uct_md_open");
    uct_config_release(config);
    CHECK_OK(uct_md_query_tl_resources(md, &tls, &num_tls), "uct_md_query_tl_resources");
    for (unsigned t = 0; t < num_tls && !found; ++t) {
      if (strcmp(tls[t].tl_name, tl) == 0) {
        snprintf(md_name, UCT_MD_NAME_MAX, "%s", mds[j].md_name);
        snprintf(dev_name, UCT_DEVICE_NAME_MAX, "%s", tls[t].dev_name);
        found = 1;
      }
    }
    uct_release_tl_resource_list(tls);
    uct_md_close(md);
    if (found) {
      return 1;
    }
  }
  return 0;
}

/* Retries `expr` (a UCT call) while it answers UCS_ERR_NO_RESOURCE, progressing the worker;
 * `result` gets its answer. Fails past `bound_s` seconds (a hang). */
#define RETRY(worker, result, bound_s, expr, what)                                  \
  do {                                                                              \
    const double deadline_ = now_s() + (bound_s);                                   \
    while (((result) = (expr)) == UCS_ERR_NO_RESOURCE) {                            \
      CHECK(now_s() < deadline_, "%s: no resource for %d s", what, (int)(bound_s)); \
      uct_worker_progress(worker);                                                  \
    }                                                                               \
  } while (0)

/* Component rdmx, the MD of its first device with transport `tl`, and a UCT worker: what the
 * put/get and am_zcopy programs open first and close last. */
typedef struct {
  uct_component_h rdmx;
  uct_component_h* components;
  uct_md_resource_desc_t* mds;
  char dev_name[UCT_DEVICE_NAME_MAX];
  uct_md_h md;
  uct_md_attr_t md_attr;
  ucs_async_context_t* async;
  uct_worker_h worker;
} uct_test_env_t;

static inline void open_env(uct_test_env_t* e, const char* tl) {
  char md_name[UCT_MD_NAME_MAX];
  uct_md_config_t* md_config;
  unsigned num_mds;
  e->rdmx = find_rdmx(&e->components, &e->mds, &num_mds);
  CHECK(find_tl_device(e->rdmx, e->mds, num_mds, tl, md_name, e->dev_name), "no %s device", tl);
  CHECK_OK(uct_md_config_read(e->rdmx, NULL, NULL, &md_config), "uct_md_config_read");
  CHECK_OK(uct_md_open(e->rdmx, md_name, md_config, &e->md), "uct_md_open");
  uct_config_release(md_config);
  CHECK_OK(uct_md_query(e->md, &e->md_attr), "uct_md_query");
  CHECK_OK(ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK, &e->async), "async_create");
  CHECK_OK(uct_worker_create(e->async, UCS_THREAD_MODE_SINGLE, &e->worker), "uct_worker_create");
}

static inline void close_env(uct_test_env_t* e) {
  uct_worker_destroy(e->worker);
  ucs_async_context_destroy(e->async);
  uct_md_close(e->md);
  free(e->mds);
  uct_release_component_list(e->components);
}

/* The remote key of registration `memh` as a peer gets it: packed now (with the workers attached
 * now), then unpacked. */
static inline void unpack_key(const uct_test_env_t* e, uct_mem_h memh, uct_rkey_bundle_t* key) {
  void* packed = calloc(1, e->md_attr.rkey_packed_size);
  CHECK(packed != NULL, "calloc");
  CHECK_OK(uct_md_mkey_pack(e->md, memh, packed), "uct_md_mkey_pack");
  CHECK_OK(uct_rkey_unpack(e->rdmx, packed, key), "uct_rkey_unpack");
  free(packed);
}

#endif
