# shellcheck shell=bash
# HERE, RUN and T are for the scripts that source this file.
# shellcheck disable=SC2034
# Shared helpers for the ci/softroce harness tests. Sourced by each test script.
#
# Every test gets a private TMPDIR: run creates its work dir (FIFOs, results export) there and
# qemu's command line names it, so `pgrep -f "$T/"` finds exactly the processes of this test and
# no other engineer's guest.
set -u

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
ROOT=$(cd "$HERE/../.." && pwd -P)
RUN=$ROOT/ci/softroce/run
T=$(mktemp -d "${TMPDIR:-/tmp}/rdmx-harness-test.XXXXXX") || exit 1
export TMPDIR=$T
trap 'rm -rf "$T"' EXIT
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
pass() { echo "ok: $*"; }

expect_eq() { # what got want
  if [[ $2 == "$3" ]]; then
    pass "$1"
  else
    fail "$1: got '$2', want '$3'"
  fi
}

# expect_file_eq WHAT FILE EXPECTED_CONTENT: byte-exact comparison, with a diff on mismatch.
expect_file_eq() {
  printf '%s' "$3" >"$T/expected"
  if cmp -s "$2" "$T/expected"; then
    pass "$1"
  else
    fail "$1 differs (got vs want):"
    diff <(od -c "$2") <(od -c "$T/expected") | head -n 40 >&2
  fi
}

# The guest and the relays of this test are gone, and run removed its work dir.
expect_nothing_left() {
  local left
  left=$(pgrep -af "$T/" 2>/dev/null)
  if [[ -n $left ]]; then
    fail "processes left behind: $left"
    # Only this test's own processes match its private path; end them by pid.
    kill -KILL $(pgrep -f "$T/") 2>/dev/null
  else
    pass "no qemu or relay left"
  fi
  if compgen -G "$T/rdmx-softroce.*" >/dev/null; then
    fail "run left its work dir: $(echo "$T"/rdmx-softroce.*)"
  else
    pass "work dir removed"
  fi
}

finish() {
  if ((failures)); then
    echo "$failures check(s) failed" >&2
    exit 1
  fi
  echo "all checks passed"
  exit 0
}
