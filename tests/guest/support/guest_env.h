// What ci/softroce/run tells a guest test about its devices, and the skip when there is none.
//
//   RDMX_TEST_DEVICES    "rxe0" or "rxe1 rxe2"
//   RDMX_TEST_GID_INDEX  index of the IPv4-mapped RoCE v2 GID (same on every device)
//   RDMX_TEST_IPS        the devices' IPv4 addresses, in the same order
//
// Reading the environment is all this does: nothing here may touch a device, because
// gtest_discover_tests runs every test binary on the host (no RDMA) to list its cases.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace rdmx::test {

// Empty when RDMX_TEST_DEVICES is unset or empty.
std::vector<std::string> test_devices();
std::optional<int> test_gid_index();
std::vector<std::string> test_ips();

}  // namespace rdmx::test

// In a test body or SetUp(): skip unless a device environment was set up.
#define RDMX_REQUIRE_DEVICE()                                      \
  do {                                                             \
    if (::rdmx::test::test_devices().empty()) {                    \
      GTEST_SKIP() << "no RDMA device: run under ci/softroce/run"; \
    }                                                              \
  } while (0)
