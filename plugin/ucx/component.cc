// The UCT component `rdmx` and its memory domain: UCX's C interface translated into
// rdmx::ucx::Domain (domain.h) and the pure rules of md_format.h at this one boundary. Every
// entry point catches what rdmx throws and returns a ucs_status_t; nothing here throws into UCX.
//
// Built against the internal headers of the exact UCX source that is installed (ci/deps.sh
// fetches it; config.h is `ucx_info -b`), because uct_component_t and uct_md_ops_t are not
// public and change between minor versions. The transports rdmx_rc and rdmx_ud are C
// (tl_iface.c); the C++ they need is behind tl_glue.h, at the end of this file.

// UCX's internal headers read their build configuration (ENABLE_MT, ENABLE_PARAMS_CHECK ...).
#include "config.h"
// clang-format off: config.h must come first.
#include <ucp/api/ucp.h>
// The internal headers, unlike the public ones, declare their functions without extern "C".
extern "C" {
#include <uct/base/uct_component.h>
#include <uct/base/uct_md.h>
}
// clang-format on

#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "plugin/ucx/domain.h"
#include "plugin/ucx/md_format.h"
#include "plugin/ucx/tl_address.h"
#include "plugin/ucx/tl_glue.h"
#include "plugin/ucx/version_check.h"
#include "rdmx/rdmx.h"
#include "verbs/error.h"

namespace rdmx::ucx {
namespace {

// Registration cost as UCX's ib MD models the same ibv_reg_mr (MEM_REG_OVERHEAD 16us,
// MEM_REG_GROWTH 0.06ns per byte, its defaults without a cache): the kernel pins and maps the
// pages whatever the provider. UCP weighs zero-copy against copies with it. A registration is
// made twice in the usual case, in the MD's PD and in its one rdmx_rc interface's (domain.h);
// UCP asks before any interface exists, so the factor is that usual one.
constexpr double kRegCopies = 2;
constexpr double kRegOverheadSeconds = kRegCopies * 16e-6;
constexpr double kRegSecondsPerByte = kRegCopies * 0.06e-9;

// The MD UCX holds (uct_md_h). UCX reaches the base through its first member.
struct RdmxMd {
  uct_md_t super;
  Domain* domain;  // owned: deleted by md_close
};
static_assert(std::is_standard_layout_v<RdmxMd>);

static_assert(RDMX_UCX_MAX_RMA_IFACES == kMaxRmaWorkers);

Domain& domain_of(uct_md_h md) {
  return *reinterpret_cast<RdmxMd*>(md)->domain;
}

ucs_status_t status_of(int errnum) {
  switch (errnum) {
    case ENOMEM:
    case EAGAIN:
    case EPERM:
      return UCS_ERR_NO_MEMORY;
    case ENODEV:
    case ENOENT:
      return UCS_ERR_NO_DEVICE;
    case EINVAL:
      return UCS_ERR_INVALID_PARAM;
    default:
      return UCS_ERR_IO_ERROR;
  }
}

ucs_status_t query_md_resources(uct_component_t*, uct_md_resource_desc_t** resources_p,
                                unsigned* num_resources_p) try {
  std::vector<std::string> names;
  for (const std::string& dev : Domain::device_names()) {
    if (auto name = md_name(dev, UCT_MD_NAME_MAX - 1)) {
      names.push_back(*name);
    } else {
      std::fprintf(stderr, "rdmx: device %s: name too long for a UCT memory domain, skipped\n",
                   dev.c_str());
    }
  }
  // UCX releases the array with ucs_free, i.e. free().
  auto* resources = static_cast<uct_md_resource_desc_t*>(
      std::calloc(names.empty() ? 1 : names.size(), sizeof(uct_md_resource_desc_t)));
  if (resources == nullptr) {
    return UCS_ERR_NO_MEMORY;
  }
  for (std::size_t i = 0; i < names.size(); ++i) {
    std::memcpy(resources[i].md_name, names[i].c_str(), names[i].size() + 1);
  }
  *resources_p = resources;
  *num_resources_p = static_cast<unsigned>(names.size());
  return UCS_OK;
} catch (const std::bad_alloc&) {
  return UCS_ERR_NO_MEMORY;
}

void md_close(uct_md_h md) {
  auto* m = reinterpret_cast<RdmxMd*>(md);
  delete m->domain;  // PD, then device context (Domain's member order)
  delete m;
}

ucs_status_t md_query(uct_md_h md, uct_md_attr_t* attr) {
  attr->cap.max_alloc = 0;
  attr->cap.max_reg = domain_of(md).max_mr_size();
  attr->cap.flags = UCT_MD_FLAG_REG | UCT_MD_FLAG_NEED_MEMH | UCT_MD_FLAG_NEED_RKEY;
  attr->cap.reg_mem_types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
  attr->cap.detect_mem_types = 0;
  attr->cap.alloc_mem_types = 0;
  attr->cap.access_mem_types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
  attr->reg_cost = ucs_linear_func_make(kRegOverheadSeconds, kRegSecondsPerByte);
  attr->rkey_packed_size = kPackedRkeySize;
  // No NUMA placement of the device is known here: every CPU is as near as any other.
  std::memset(&attr->local_cpus, 0xff, sizeof(attr->local_cpus));
  return UCS_OK;
}

ucs_status_t mem_reg(uct_md_h md, void* address, std::size_t length, unsigned flags,
                     uct_mem_h* memh_p) {
  try {
    *memh_p = domain_of(md).register_memory(address, length, ibv_access(flags));
    return UCS_OK;
  } catch (const verbs::Error& e) {
    if (!(flags & UCT_MD_MEM_FLAG_HIDE_ERRORS)) {
      std::fprintf(stderr, "rdmx: %s\n", e.what());
    }
    return status_of(e.errnum());
  } catch (const std::bad_alloc&) {
    return UCS_ERR_NO_MEMORY;
  }
}

ucs_status_t mem_dereg(uct_md_h md, const uct_md_mem_dereg_params_t* params) {
  // UCT_MD_FLAG_INVALIDATE is not offered, so a request to invalidate is refused.
  UCT_MD_MEM_DEREG_CHECK_PARAMS(params, 0);
  domain_of(md).deregister(static_cast<Domain::Registration*>(params->memh));
  return UCS_OK;
}

ucs_status_t mkey_pack(uct_md_h md, uct_mem_h memh, const uct_md_mkey_pack_params_t*,
                       void* rkey_buffer) {
  domain_of(md).pack(*static_cast<const Domain::Registration*>(memh), rkey_buffer);
  return UCS_OK;
}

// The unpacked key is a RemoteKey on the heap: uct_rkey_t and the handle both point to it.
ucs_status_t rkey_unpack(uct_component_t*, const void* rkey_buffer, uct_rkey_t* rkey_p,
                         void** handle_p) {
  auto* key = new (std::nothrow) RemoteKey(unpack_rkey(rkey_buffer));
  if (key == nullptr) {
    return UCS_ERR_NO_MEMORY;
  }
  *rkey_p = reinterpret_cast<uct_rkey_t>(key);
  *handle_p = key;
  return UCS_OK;
}

ucs_status_t rkey_release(uct_component_t*, uct_rkey_t, void* handle) {
  delete static_cast<RemoteKey*>(handle);
  return UCS_OK;
}

ucs_status_t md_unsupported_alloc(uct_md_h, std::size_t*, void**, ucs_memory_type_t, unsigned,
                                  const char*, uct_mem_h*) {
  return UCS_ERR_UNSUPPORTED;
}
ucs_status_t md_unsupported_free(uct_md_h, uct_mem_h) {
  return UCS_ERR_UNSUPPORTED;
}
ucs_status_t md_unsupported_advise(uct_md_h, uct_mem_h, void*, std::size_t, unsigned) {
  return UCS_ERR_UNSUPPORTED;
}
ucs_status_t md_unsupported_mem_query(uct_md_h, const void*, std::size_t, uct_md_mem_attr_t*) {
  return UCS_ERR_UNSUPPORTED;
}
int md_no_sockaddr(uct_md_h, const ucs_sock_addr_t*, uct_sockaddr_accessibility_t) {
  return 0;
}
ucs_status_t md_unsupported_detect(uct_md_h, const void*, std::size_t, ucs_memory_type_t*) {
  return UCS_ERR_UNSUPPORTED;
}

uct_md_ops_t md_ops = {
    .close = md_close,
    .query = md_query,
    .mem_alloc = md_unsupported_alloc,
    .mem_free = md_unsupported_free,
    .mem_advise = md_unsupported_advise,
    .mem_reg = mem_reg,
    .mem_dereg = mem_dereg,
    .mem_query = md_unsupported_mem_query,
    .mkey_pack = mkey_pack,
    .is_sockaddr_accessible = md_no_sockaddr,
    .detect_memory_type = md_unsupported_detect,
};

ucs_status_t md_open(uct_component_t* component, const char* name, const uct_md_config_t*,
                     uct_md_h* md_p) {
  const auto ibdev = device_of(name);
  if (!ibdev) {
    return UCS_ERR_NO_DEVICE;
  }
  try {
    auto domain = std::make_unique<Domain>(Domain::open(*ibdev));
    auto* md = new RdmxMd{{&md_ops, component}, domain.get()};
    domain.release();
    *md_p = &md->super;
    return UCS_OK;
  } catch (const verbs::Error& e) {
    std::fprintf(stderr, "rdmx: memory domain %s: %s\n", name, e.what());
    return status_of(e.errnum());
  } catch (const std::bad_alloc&) {
    return UCS_ERR_NO_MEMORY;
  }
}

ucs_status_t cm_unsupported(uct_component_t*, uct_worker_h, const uct_cm_config_t*, uct_cm_h*) {
  return UCS_ERR_UNSUPPORTED;
}
ucs_status_t rkey_ptr_unsupported(uct_component_t*, uct_rkey_t, void*, std::uint64_t, void**) {
  return UCS_ERR_UNSUPPORTED;
}
void md_vfs_init(uct_md_h) {}

uct_component_t uct_rdmx_component = {
    .name = "rdmx",
    .query_md_resources = query_md_resources,
    .md_open = md_open,
    .cm_open = cm_unsupported,
    .rkey_unpack = rkey_unpack,
    .rkey_ptr = rkey_ptr_unsupported,
    .rkey_release = rkey_release,
    .md_config = {.name = "rdmx memory domain",
                  .prefix = "RDMX_",
                  .table = uct_md_config_table,
                  .size = sizeof(uct_md_config_t),
                  .list = {}},
    .cm_config = {.name = "", .prefix = "", .table = nullptr, .size = 0, .list = {}},
    .tl_list = UCT_COMPONENT_TL_LIST_INITIALIZER(&uct_rdmx_component),
    .list = {},
    .flags = 0,
    .md_vfs_init = md_vfs_init,
};

// Runs when the module is loaded (LD_PRELOAD, or as a dependency of a process's component),
// after libuct's own initialisation (libuct is a dependency, so the loader runs it first).
__attribute__((constructor)) void register_component() {
  UcxVersion running;
  unsigned release = 0;
  // UCX 1.13 has no uct_get_version(); libucp comes from the same package and build as libuct.
  ucp_get_version(&running.major, &running.minor, &release);
  const std::string mismatch =
      version_mismatch({RDMX_UCX_BUILT_MAJOR, RDMX_UCX_BUILT_MINOR}, running);
  if (!mismatch.empty()) {
    std::fprintf(stderr, "rdmx: %s\n", mismatch.c_str());
    return;
  }
  rdmx_ucx_add_transports(&uct_rdmx_component);
  uct_component_register(&uct_rdmx_component);
}

}  // namespace
}  // namespace rdmx::ucx

// tl_glue.h: the C++ the transports' C glue calls.
extern "C" {

size_t rdmx_ucx_tl_device_address_size(void) {
  return rdmx::ucx::kTlDeviceAddressSize;
}
size_t rdmx_ucx_tl_iface_address_size(void) {
  return rdmx::ucx::kTlIfaceAddressSize;
}
size_t rdmx_ucx_tl_blob_size(void) {
  return rdmx::protocol::kAddressSize;
}
int rdmx_ucx_tl_address_split(const void* blob, size_t length, void* device, void* iface) {
  return rdmx::ucx::split_address(blob, length, static_cast<std::uint8_t*>(device),
                                  static_cast<std::uint8_t*>(iface))
             ? 1
             : 0;
}
int rdmx_ucx_tl_address_join(const void* device, const void* iface, void* blob) {
  rdmx::protocol::AddressBytes bytes;
  if (!rdmx::ucx::join_address(static_cast<const std::uint8_t*>(device),
                               static_cast<const std::uint8_t*>(iface), &bytes)) {
    return 0;
  }
  std::memcpy(blob, bytes.data(), bytes.size());
  return 1;
}
int rdmx_ucx_tl_address_transport(const void* iface) {
  return rdmx::ucx::iface_address_transport(static_cast<const std::uint8_t*>(iface));
}
size_t rdmx_ucx_tl_eager_capacity(const void* blob, size_t length) {
  rdmx::protocol::WorkerAddress a;
  if (rdmx::protocol::decode_address(blob, length, &a) != RDMX_OK) {
    return 0;
  }
  return a.class_capacity[rdmx::protocol::kNumClasses - 1];
}
uint64_t rdmx_ucx_tl_blob_uid(const void* blob) {
  rdmx::protocol::WorkerAddress a;
  if (rdmx::protocol::decode_address(blob, rdmx::protocol::kAddressSize, &a) != RDMX_OK) {
    return 0;
  }
  return a.uid;
}

const char* rdmx_ucx_md_device(uct_md_h md) {
  return rdmx::ucx::domain_of(md).device().c_str();
}
int rdmx_ucx_md_port_count(uct_md_h md) {
  return rdmx::ucx::domain_of(md).port_count();
}
int rdmx_ucx_md_port_active(uct_md_h md, int port) try {
  return rdmx::ucx::domain_of(md).query_port(port).state == IBV_PORT_ACTIVE ? 1 : 0;
} catch (const rdmx::verbs::Error&) {
  return 0;
}
size_t rdmx_ucx_md_port_max_msg(uct_md_h md, int port) try {
  return rdmx::ucx::domain_of(md).query_port(port).max_msg_sz;
} catch (const rdmx::verbs::Error&) {
  return 0;
}

int rdmx_ucx_md_attach(uct_md_h md, uint64_t uid, struct ibv_pd* pd) try {
  return rdmx::ucx::domain_of(md).attach(uid, pd);
} catch (const rdmx::verbs::Error& e) {
  std::fprintf(stderr, "rdmx: registering the memory domain's memory for a new interface: %s\n",
               e.what());
  return -1;
} catch (const std::bad_alloc&) {
  return -1;
}
void rdmx_ucx_md_detach(uct_md_h md, int slot) {
  rdmx::ucx::domain_of(md).detach(slot);
}
int rdmx_ucx_memh_lkey(uct_mem_h memh, int slot, uint32_t* lkey) {
  const auto* r = static_cast<const rdmx::ucx::Domain::Registration*>(memh);
  if (r == nullptr || !r->worker_mr[static_cast<std::size_t>(slot)]) {
    return 0;
  }
  *lkey = r->worker_mr[static_cast<std::size_t>(slot)]->lkey();
  return 1;
}
int rdmx_ucx_rkey_for(uct_rkey_t rkey, uint64_t uid, uint32_t* out) {
  const auto found = reinterpret_cast<const rdmx::ucx::RemoteKey*>(rkey)->rkey_for(uid);
  if (!found) {
    return 0;
  }
  *out = *found;
  return 1;
}

void* rdmx_ucx_pd_reg(struct ibv_pd* pd, void* addr, size_t length, uint32_t* lkey) try {
  auto mr = std::make_unique<rdmx::verbs::MemoryRegion>(
      rdmx::verbs::MemoryRegion::create(pd, addr, length, IBV_ACCESS_LOCAL_WRITE));
  *lkey = mr->lkey();
  return mr.release();
} catch (const rdmx::verbs::Error& e) {
  std::fprintf(stderr, "rdmx: registering the put/get bounce buffers: %s\n", e.what());
  return nullptr;
} catch (const std::bad_alloc&) {
  return nullptr;
}
void rdmx_ucx_pd_dereg(void* mr) {
  delete static_cast<rdmx::verbs::MemoryRegion*>(mr);
}

double rdmx_ucx_md_port_bandwidth(uct_md_h md, int port) try {
  const ibv_port_attr attr = rdmx::ucx::domain_of(md).query_port(port);
  return rdmx::ucx::port_data_rate(attr.active_width, attr.active_speed);
} catch (const rdmx::verbs::Error&) {
  return 0;
}

}  // extern "C"
