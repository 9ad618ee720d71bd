#!/bin/bash
# --timeout: a CMD that runs too long is killed inside the guest and run exits 124 with a
# "softroce:" line, within a bounded time, leaving no qemu behind.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start=$SECONDS
"$RUN" --timeout 15 -- sleep 1000 </dev/null >"$T/stdout" 2>"$T/stderr"
rc=$?
took=$((SECONDS - start))
echo "run took $took s"

expect_eq "exit status" "$rc" 124
# 15 s of CMD plus a boot; far below the host-side backstop (timeout + 60 s after CMD starts).
if ((took >= 15 && took < 70)); then
  pass "returned after $took s"
else
  fail "returned after $took s (want 15 <= t < 70)"
fi
expect_file_eq "stdout" "$T/stdout" ""
expect_file_eq "stderr" "$T/stderr" "softroce: CMD exceeded --timeout 15 s and was killed
"
expect_nothing_left
finish
