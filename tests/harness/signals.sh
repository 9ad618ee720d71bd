#!/bin/bash
# SIGTERM to run while CMD is running: run kills its guest by pid, removes its work dir and exits
# 143 promptly.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"$RUN" --timeout 300 -- sleep 1000 </dev/null >"$T/stdout" 2>"$T/stderr" &
pid=$!
# The guest writes its progress to the results export in run's work dir.
started=""
for _ in $(seq 600); do
  stage=$(cat "$T"/rdmx-softroce.*/share/stage 2>/dev/null)
  if [[ $stage == cmd ]]; then
    started=1
    break
  fi
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.2
done
if [[ -n $started ]]; then
  pass "CMD started"
else
  fail "CMD did not start (stage '${stage:-}')"
fi
start=$SECONDS
kill -TERM "$pid"
wait "$pid"
rc=$?
took=$((SECONDS - start))
expect_eq "exit status after SIGTERM" "$rc" 143
if ((took < 10)); then pass "stopped after $took s"; else fail "took $took s to stop"; fi
expect_eq "message" "$(cat "$T/stderr")" "softroce: interrupted; guest killed"
expect_nothing_left
finish
