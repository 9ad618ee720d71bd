// The one rule that keeps libuct_rdmx.so from corrupting a UCX it was not built for: UCX's
// internal structs (uct_component_t, uct_md_ops_t, the iface base class) change between minor
// versions, so the module registers only into the major.minor it was compiled against.
#pragma once

#include <string>

namespace rdmx::ucx {

struct UcxVersion {
  unsigned major = 0;
  unsigned minor = 0;
};

// Empty when a module built against `built` may register into a process running `running`
// (same major and minor; patch releases keep the internal layout). Otherwise the one-line
// message to print: both versions and the fix.
std::string version_mismatch(UcxVersion built, UcxVersion running);

}  // namespace rdmx::ucx
