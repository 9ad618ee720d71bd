// Leak check for guest tests: asks the kernel, through iproute2's `rdma resource show` (the
// kernel's restrack), which verbs objects exist, and fails when objects created by this process
// survive a test.
//
// Why the kernel's view rather than counting in our wrappers: a leak is precisely an object our
// wrappers lost track of (a raw ibv_* call, a refused destroy that was only logged).
//
// Use it in one of three ways:
//   1. derive the fixture from rdmx::test::GuestTest: SetUp() skips without a device and records
//      a baseline, TearDown() fails the test if objects appeared and were not destroyed. Objects
//      held by fixture members must be released in release_resources(), which runs first;
//   2. RdmaLeakCheck check; check.baseline(); ... EXPECT_TRUE(check.no_new_objects());
//   3. EXPECT_TRUE(no_rdma_objects_of(pid)) after a child process (or an MPI rank) has finished.
//
// Ownership: the kernel records the creating thread's id ("pid"); a thread that exited leaves no
// pid at all, only its name ("comm"). Objects new since the baseline count as ours when their pid
// is this process or one of its threads, or when they have no pid and carry this process's comm.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tests/guest/support/guest_env.h"

namespace rdmx::test {

// One object reported by `rdma -j resource show <kind>`; fields as printed (numbers as text).
struct RdmaObject {
  std::string kind;  // "qp", "cq", "mr", "pd", "srq", "ctx"
  std::map<std::string, std::string> fields;

  std::optional<long> pid() const;
  std::string field(const std::string& name) const;  // "" when absent
  // Stable identity: kind, device and the object number (lqpn, cqn, mrn, pdn, srqn, ctxn).
  std::string key() const;
  // One line for failure messages, e.g. "qp rxe0 lqpn 17 type RC state ERR pid 155 comm t".
  std::string describe() const;
};

// The kinds checked by default: every object a verbs user creates that the kernel tracks
// (AHs and completion channels are not tracked by restrack on 6.1).
const std::vector<std::string>& default_leak_kinds();

// Runs `rdma -j -b -` once with one `resource show <kind>` per kind. Throws std::runtime_error
// when the tool is missing or fails.
std::vector<RdmaObject> rdma_resources(
    const std::vector<std::string>& kinds = default_leak_kinds());

// Parses the tool's output (a sequence of JSON arrays of flat objects, one array per kind).
// Exposed for tests of the parser.
std::vector<RdmaObject> parse_rdma_json(const std::string& text,
                                        const std::vector<std::string>& kinds);

// True when `pid` is process `tgid` or one of its live threads.
bool pid_belongs_to(long pid, pid_t tgid);

// Stateless: fails when any object has a pid belonging to process `tgid`.
::testing::AssertionResult no_rdma_objects_of(
    pid_t tgid, const std::vector<std::string>& kinds = default_leak_kinds());

// Baseline/diff check for the current process (see the header comment).
class RdmaLeakCheck {
 public:
  explicit RdmaLeakCheck(std::vector<std::string> kinds = default_leak_kinds());
  void baseline();
  ::testing::AssertionResult no_new_objects() const;
  // The objects that would be reported as leaked right now.
  std::vector<RdmaObject> new_objects() const;

 private:
  std::vector<std::string> kinds_;
  std::vector<std::string> baseline_keys_;
};

// Fixture for device tests: skips without a device, fails on leaked verbs objects.
class GuestTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  // Destroy every verbs object held by fixture members here (the leak check runs after it).
  virtual void release_resources() {}

 private:
  std::optional<RdmaLeakCheck> leak_check_;
};

}  // namespace rdmx::test
