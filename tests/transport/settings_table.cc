// Prints the settings table of plugin/ompi/README.md from transport/settings.def and the
// defaults of rdmx_config_init, so that the README cannot drift from the code: the unit test
// readme_settings_table compares the two (readme_settings_table.sh). After changing a setting,
// replace the README's table with this program's output.
#include <cstdio>
#include <string>

#include "rdmx/rdmx.h"
#include "transport/config.h"

namespace {

std::string shown(int v) {
  return std::to_string(v);
}
std::string shown(std::uint32_t v) {
  return std::to_string(v);
}
std::string shown(std::uint64_t v) {
  return std::to_string(v);
}  // and size_t
std::string shown(const char* v) {
  return v != nullptr ? v : "(none)";
}
std::string shown(rdmx_transport_t v) {
  return rdmx::transport::transport_name(v);
}
std::string shown(rdmx_thread_mode_t v) {
  return rdmx::transport::thread_mode_name(v);
}
std::string shown(double v) {
  char s[32];
  std::snprintf(s, sizeof(s), "%g", v);
  return s;
}

}  // namespace

int main() {
  rdmx_config_t d;
  rdmx_config_init(&d);
  std::printf("| variable | Open MPI parameter | default | what it does |\n|---|---|---|---|\n");
#define RDMX_SETTING(field, env, mca, kind, lo, hi, level, help)                       \
  std::printf("| `%s` | %s | %s | %s |\n", env, (mca) ? "`mtl_rdmx_" #field "`" : "-", \
              shown(d.field).c_str(), help);
#include "transport/settings.def"
#undef RDMX_SETTING
  return 0;
}
