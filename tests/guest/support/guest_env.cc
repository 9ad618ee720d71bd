#include "tests/guest/support/guest_env.h"

#include <cstdlib>
#include <sstream>

namespace rdmx::test {

namespace {

std::vector<std::string> split_env(const char* name) {
  std::vector<std::string> out;
  const char* v = std::getenv(name);
  if (v == nullptr) {
    return out;
  }
  std::istringstream in(v);
  for (std::string w; in >> w;) {
    out.push_back(w);
  }
  return out;
}

}  // namespace

std::vector<std::string> test_devices() {
  return split_env("RDMX_TEST_DEVICES");
}
std::vector<std::string> test_ips() {
  return split_env("RDMX_TEST_IPS");
}

std::optional<int> test_gid_index() {
  const char* v = std::getenv("RDMX_TEST_GID_INDEX");
  if (v == nullptr || *v == '\0') {
    return std::nullopt;
  }
  return std::atoi(v);
}

}  // namespace rdmx::test
