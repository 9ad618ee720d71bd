#!/bin/bash
# --timeout: a CMD that runs too long is killed inside the guest and run exits 124 with a
# "softroce:" line, soon after the timeout expires, leaving no qemu behind.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start=$EPOCHSECONDS
"$RUN" --timeout 15 -- sleep 1000 </dev/null >"$T/stdout" 2>"$T/stderr" &
pid=$!
# Boot time depends on how busy the host is; the bound that matters starts with CMD. The guest
# reports its progress in run's work dir.
cmd_start=""
while kill -0 "$pid" 2>/dev/null; do
  if [[ -z $cmd_start && $(cat "$T"/rdmx-softroce.*/share/stage 2>/dev/null) == cmd ]]; then
    cmd_start=$EPOCHSECONDS
  fi
  ((EPOCHSECONDS - start > 280)) && break
  sleep 0.2
done
wait "$pid"
rc=$?
end=$EPOCHSECONDS
echo "run took $((end - start)) s, CMD started after $((${cmd_start:-end} - start)) s"

expect_eq "exit status" "$rc" 124
if [[ -z $cmd_start ]]; then
  fail "never saw CMD start"
elif ((end - cmd_start >= 14 && end - cmd_start <= 40)); then
  pass "returned $((end - cmd_start)) s after CMD started"
else
  fail "returned $((end - cmd_start)) s after CMD started (want 15..40)"
fi
expect_file_eq "stdout" "$T/stdout" ""
expect_file_eq "stderr" "$T/stderr" "softroce: CMD exceeded --timeout 15 s and was killed
"
expect_nothing_left
finish
