#!/bin/bash
# Exit status 0 of a trivial CMD with nothing extra on stdout/stderr, and the harness's own
# failures: a guest step failing (injected with RDMX_SOFTROCE_FAULT) and bad arguments give 125
# with a one-line "softroce:" message that names the step and a console log that exists.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"$RUN" -- true </dev/null >"$T/stdout" 2>"$T/stderr"
expect_eq "exit status of 'true'" "$?" 0
expect_file_eq "stdout of 'true'" "$T/stdout" ""
expect_file_eq "stderr of 'true'" "$T/stderr" ""

RDMX_SOFTROCE_FAULT=rxe "$RUN" -- echo never </dev/null >"$T/stdout" 2>"$T/stderr"
expect_eq "exit status of a failed rxe setup" "$?" 125
expect_file_eq "stdout of a failed setup" "$T/stdout" ""
expect_eq "stderr is one line" "$(wc -l <"$T/stderr")" 1
msg=$(cat "$T/stderr")
if [[ $msg =~ ^softroce:\ guest\ failed\ at\ rxe:\ .*console\ log:\ (/[^ ]+)$ ]]; then
  pass "message names the step and the log"
  log=${BASH_REMATCH[1]}
  if grep -q 'softroce-guest: FAILED step=rxe' "$log"; then
    pass "console log kept"
  else
    fail "console log $log missing or without the failure"
  fi
  rm -f "$log"
else
  fail "message: $msg"
fi

"$RUN" --devices 3 -- true </dev/null >"$T/stdout" 2>"$T/stderr"
expect_eq "exit status of a bad argument" "$?" 125
expect_eq "message for a bad argument" "$(head -n 1 "$T/stderr")" \
  "softroce: --devices must be 1 or 2, not '3'"
"$RUN" --devices 1 </dev/null >"$T/stdout" 2>"$T/stderr"
expect_eq "exit status without CMD" "$?" 125
expect_nothing_left
finish
