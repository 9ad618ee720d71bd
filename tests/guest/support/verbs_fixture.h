// Fixture for verbs device tests: the test device and a PD, opened after the leak-check
// baseline and released before the check. Objects a test creates locally are gone by then.
#pragma once

#include <optional>

#include "tests/guest/support/leak_check.h"
#include "tests/guest/support/verbs_helpers.h"
#include "verbs/pd.h"

namespace rdmx::test {

// The verbs types every device test names.
using verbs::CompletionQueue;
using verbs::QpConfig;
using verbs::QueuePair;

class VerbsTest : public GuestTest {
 protected:
  void SetUp() override {
    GuestTest::SetUp();
    if (IsSkipped()) {
      return;
    }
    dev.emplace(TestDevice::open());
    pd.emplace(verbs::ProtectionDomain::create(dev->ctx));
  }
  void release_resources() override {
    pd.reset();
    dev.reset();
  }

  // Members in creation order.
  std::optional<TestDevice> dev;
  std::optional<verbs::ProtectionDomain> pd;
};

}  // namespace rdmx::test
