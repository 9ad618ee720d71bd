#include "tests/guest/support/leak_check.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace rdmx::test {

// ---- RdmaObject -----------------------------------------------------------------------------

std::optional<long> RdmaObject::pid() const {
  auto it = fields.find("pid");
  if (it == fields.end() || it->second.empty()) {
    return std::nullopt;
  }
  return std::stol(it->second);
}

std::string RdmaObject::field(const std::string& name) const {
  auto it = fields.find(name);
  return it == fields.end() ? std::string() : it->second;
}

std::string RdmaObject::key() const {
  static const std::map<std::string, std::string> kIdField = {
      {"qp", "lqpn"},  {"cq", "cqn"},   {"mr", "mrn"},      {"pd", "pdn"},
      {"srq", "srqn"}, {"ctx", "ctxn"}, {"cm_id", "cm-idn"}};
  std::string k = kind + " " + field("ifname");
  if (auto it = kIdField.find(kind); it != kIdField.end() && fields.count(it->second) != 0) {
    return k + " " + it->second + " " + field(it->second);
  }
  for (const auto& [name, value] : fields) {
    k.append(" ").append(name).append("=").append(value);
  }
  return k;
}

std::string RdmaObject::describe() const {
  std::string s = kind;
  for (const char* name : {"ifname", "lqpn", "cqn", "mrn", "pdn", "srqn", "ctxn", "type", "state",
                           "mrlen", "pid", "comm"}) {
    if (auto it = fields.find(name); it != fields.end()) {
      s += std::string(" ") + name + " " + it->second;
    }
  }
  return s;
}

const std::vector<std::string>& default_leak_kinds() {
  static const std::vector<std::string> kKinds = {"qp", "cq", "srq", "mr", "pd", "ctx"};
  return kKinds;
}

// ---- parser ---------------------------------------------------------------------------------

namespace {

// A small reader for the subset of JSON the rdma tool prints: arrays of objects whose values
// are strings, numbers, booleans, null or (rarely, e.g. an SRQ's "lqpn":["18-19"]) nested
// arrays/objects, which are kept as their raw text.
class JsonReader {
 public:
  explicit JsonReader(const std::string& s) : s_(s) {}

  void skip_ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_])) != 0) {
      ++i_;
    }
  }
  bool at_end() {
    skip_ws();
    return i_ >= s_.size();
  }
  bool consume(char c) {
    skip_ws();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!consume(c)) {
      fail(std::string("expected '") + c + "'");
    }
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("rdma JSON: " + what + " at offset " + std::to_string(i_) +
                             " in: " + s_.substr(0, 200));
  }

  std::string string_value() {
    expect('"');
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      if (s_[i_] == '\\' && i_ + 1 < s_.size()) {
        ++i_;
        switch (s_[i_]) {
          case 'n':
            out += '\n';
            break;
          case 't':
            out += '\t';
            break;
          case 'u':
            out += '?';  // not expected from the tool; keep the shape, not the code point
            i_ += 4;
            break;
          default:
            out += s_[i_];
        }
        ++i_;
        continue;
      }
      out += s_[i_++];
    }
    expect('"');
    return out;
  }

  // Any value, as text.
  std::string value() {
    skip_ws();
    if (i_ >= s_.size()) {
      fail("value expected");
    }
    const char c = s_[i_];
    if (c == '"') {
      return string_value();
    }
    if (c == '[' || c == '{') {
      const std::size_t start = i_;
      int depth = 0;
      bool in_string = false;
      for (; i_ < s_.size(); ++i_) {
        const char d = s_[i_];
        if (in_string) {
          if (d == '\\') {
            ++i_;
          } else if (d == '"') {
            in_string = false;
          }
        } else if (d == '"') {
          in_string = true;
        } else if (d == '[' || d == '{') {
          ++depth;
        } else if (d == ']' || d == '}') {
          if (--depth == 0) {
            ++i_;
            return s_.substr(start, i_ - start);
          }
        }
      }
      fail("unterminated nested value");
    }
    const std::size_t start = i_;
    while (i_ < s_.size() && s_[i_] != ',' && s_[i_] != '}' && s_[i_] != ']' &&
           std::isspace(static_cast<unsigned char>(s_[i_])) == 0) {
      ++i_;
    }
    return s_.substr(start, i_ - start);
  }

 private:
  const std::string& s_;
  std::size_t i_ = 0;
};

}  // namespace

std::vector<RdmaObject> parse_rdma_json(const std::string& text,
                                        const std::vector<std::string>& kinds) {
  std::vector<RdmaObject> out;
  JsonReader r(text);
  for (const std::string& kind : kinds) {
    if (r.at_end()) {
      r.fail("missing the array for '" + kind + "'");
    }
    r.expect('[');
    if (r.consume(']')) {
      continue;
    }
    do {
      RdmaObject obj;
      obj.kind = kind;
      r.expect('{');
      if (!r.consume('}')) {
        do {
          std::string name = r.string_value();
          r.expect(':');
          obj.fields[name] = r.value();
        } while (r.consume(','));
        r.expect('}');
      }
      out.push_back(std::move(obj));
    } while (r.consume(','));
    r.expect(']');
  }
  return out;
}

// ---- running the tool -----------------------------------------------------------------------

std::vector<RdmaObject> rdma_resources(const std::vector<std::string>& kinds) {
  // One process for all kinds (`-b -` reads commands from stdin): a process start costs
  // ~35 ms in the emulated guest.
  int in_pipe[2];
  int out_pipe[2];
  if (pipe(in_pipe) != 0 || pipe(out_pipe) != 0) {
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in_pipe[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&fa, in_pipe[1]);
  posix_spawn_file_actions_addclose(&fa, out_pipe[0]);
  char arg0[] = "rdma";
  char arg1[] = "-j";
  char arg2[] = "-b";
  char arg3[] = "-";
  char* argv[] = {arg0, arg1, arg2, arg3, nullptr};
  pid_t child = -1;
  const int rc = posix_spawnp(&child, "rdma", &fa, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(in_pipe[0]);
  close(out_pipe[1]);
  if (rc != 0) {
    close(in_pipe[1]);
    close(out_pipe[0]);
    throw std::runtime_error(std::string("cannot run the iproute2 'rdma' tool: ") +
                             std::strerror(rc));
  }
  std::string commands;
  for (const std::string& k : kinds) {
    commands += "resource show " + k + "\n";
  }
  // A few hundred bytes: fits the pipe buffer, so writing before reading cannot deadlock.
  const ssize_t written = write(in_pipe[1], commands.data(), commands.size());
  close(in_pipe[1]);
  std::string output;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(out_pipe[0], buf, sizeof(buf));
    if (n > 0) {
      output.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  close(out_pipe[0]);
  int status = 0;
  while (waitpid(child, &status, 0) == -1 && errno == EINTR) {
  }
  if (written != static_cast<ssize_t>(commands.size()) || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0) {
    throw std::runtime_error("'rdma -j -b -' failed (status " + std::to_string(status) +
                             "), output: " + output);
  }
  return parse_rdma_json(output, kinds);
}

// ---- ownership ------------------------------------------------------------------------------

namespace {

std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::optional<long> tgid_of(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Tgid:", 0) == 0) {
      return std::stol(line.substr(5));
    }
  }
  return std::nullopt;
}

}  // namespace

bool pid_belongs_to(long pid, pid_t tgid) {
  if (pid == tgid) {
    return true;
  }
  const std::optional<long> t = tgid_of(pid);
  return t.has_value() && *t == tgid;
}

::testing::AssertionResult no_rdma_objects_of(pid_t tgid, const std::vector<std::string>& kinds) {
  std::vector<RdmaObject> leaked;
  for (RdmaObject& o : rdma_resources(kinds)) {
    if (const auto pid = o.pid(); pid && pid_belongs_to(*pid, tgid)) {
      leaked.push_back(std::move(o));
    }
  }
  if (leaked.empty()) {
    return ::testing::AssertionSuccess();
  }
  auto failure = ::testing::AssertionFailure();
  failure << leaked.size() << " RDMA objects of pid " << tgid << " still exist:";
  for (const RdmaObject& o : leaked) {
    failure << "\n  " << o.describe();
  }
  return failure;
}

RdmaLeakCheck::RdmaLeakCheck(std::vector<std::string> kinds) : kinds_(std::move(kinds)) {}

void RdmaLeakCheck::baseline() {
  baseline_keys_.clear();
  for (const RdmaObject& o : rdma_resources(kinds_)) {
    baseline_keys_.push_back(o.key());
  }
  std::sort(baseline_keys_.begin(), baseline_keys_.end());
}

std::vector<RdmaObject> RdmaLeakCheck::new_objects() const {
  const pid_t self = getpid();
  const std::string self_comm = read_first_line("/proc/self/comm");
  std::vector<RdmaObject> leaked;
  for (RdmaObject& o : rdma_resources(kinds_)) {
    if (std::binary_search(baseline_keys_.begin(), baseline_keys_.end(), o.key())) {
      continue;  // existed before the test (the kernel's own objects, a shared fixture)
    }
    const std::optional<long> pid = o.pid();
    const bool ours = pid ? pid_belongs_to(*pid, self) : o.field("comm") == self_comm;
    if (ours) {
      leaked.push_back(std::move(o));
    }
  }
  return leaked;
}

::testing::AssertionResult RdmaLeakCheck::no_new_objects() const {
  const std::vector<RdmaObject> leaked = new_objects();
  if (leaked.empty()) {
    return ::testing::AssertionSuccess();
  }
  auto failure = ::testing::AssertionFailure();
  failure << leaked.size() << " RDMA objects created by this process were not destroyed:";
  for (const RdmaObject& o : leaked) {
    failure << "\n  " << o.describe();
  }
  return failure;
}

// ---- fixture --------------------------------------------------------------------------------

void GuestTest::SetUp() {
  RDMX_REQUIRE_DEVICE();
  leak_check_.emplace();
  leak_check_->baseline();
}

void GuestTest::TearDown() {
  release_resources();
  if (leak_check_) {  // not when SetUp skipped: the host has no rdma tool netlink to ask
    EXPECT_TRUE(leak_check_->no_new_objects())
        << "leak check after " << ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }
}

}  // namespace rdmx::test
