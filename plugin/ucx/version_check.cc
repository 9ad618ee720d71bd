#include "plugin/ucx/version_check.h"

namespace rdmx::ucx {

std::string version_mismatch(UcxVersion built, UcxVersion running) {
  if (built.major == running.major && built.minor == running.minor) {
    return {};
  }
  auto v = [](UcxVersion x) { return std::to_string(x.major) + "." + std::to_string(x.minor); };
  return "libuct_rdmx.so was built against UCX " + v(built) + " but this process runs UCX " +
         v(running) +
         ": component rdmx is not registered. Rebuild rdmx against the installed UCX "
         "(ci/deps.sh fetches its source; then configure and build again).";
}

}  // namespace rdmx::ucx
