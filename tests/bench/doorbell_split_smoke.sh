#!/bin/sh
# Smoke test of bench/doorbell_split.c: preloaded into an 8-byte osu_latency over the rdmx MTL,
# each of the two ranks must print its line at exit, with thousands of doorbells timed and
# positive medians (the probe found libibverbs' write(2) calls and nothing else broke).
#   doorbell_split_smoke.sh PROBE OSU_DIR MPIRUN_ARGS...
set -u
probe=$1 dir=$2
shift 2
out=$(timeout 300 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "$@" \
      -x "LD_PRELOAD=$probe" "$dir/osu_latency" -m 8:8 -i 2000 -x 100 -T 60 2>&1)
rc=$?
printf '%s\n' "$out"
[ "$rc" -eq 0 ] || { echo "FAIL: mpirun exit $rc"; exit 1; }
verdict=$(printf '%s\n' "$out" | awk '/^rdmx_doorbell_split:/ {
    lines++
    for (i = 1; i + 4 <= NF; ++i) {
      if ($i == "doorbells" && $(i + 1) < 2000) bad = bad " doorbells=" $(i + 1)
      if (($i == "syscall_us" || $i == "turn_us") && !($(i + 4) > 0)) bad = bad " " $i "=" $(i + 4)
    }
  }
  END { if (lines != 2) print "expected 2 probe lines, got " lines + 0; else if (bad) print bad; else print "ok" }')
[ "$verdict" = ok ] || { echo "FAIL: $verdict"; exit 1; }
echo "ok: both ranks timed their doorbells"
