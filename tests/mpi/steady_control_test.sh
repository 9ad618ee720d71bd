#!/bin/bash
# The verdicts of steady_control.sh judge, from outputs shaped as mpi_steady_latency prints them
# (its header, table rows and FAIL lines; tests/mpi/mpi_steady_latency.c, mpi_test.h), and the
# runs and verdict of steady_control.sh run, with a stand-in for mpirun that replays them.
#   steady_control_test.sh PATH_TO_steady_control.sh
set -u
script=$1
dir=$(mktemp -d) || exit 2
trap 'rm -rf "$dir"' EXIT
failures=0

# out NAME SIZE:P50:P99:STALLS...: a run of 100,000 round trips per size under CI's limits (p99
# at most 20x the median, at most 100 stalls); a size over them is marked FAIL, and so is the run
# (by rank 0 and rank 1, as the program does).
out() {
  local name=$1 row size p50 p99 stalls bad=0 mark
  shift
  {
    echo "# 1 pair(s), 100000 iterations per size after 100 warm-up; round trips in us; limits:" \
      "p99 <= 20x p50, at most 100 round trips over 50x p50"
    echo "# size         mean        p50        p99        max     max_at   stalls"
    for row in "$@"; do
      IFS=: read -r size p50 p99 stalls <<<"$row"
      mark=
      if [ "$stalls" -gt 100 ] || awk -v a="$p99" -v b="$p50" 'BEGIN { exit !(a > 20 * b) }'; then
        mark='  <- FAIL'
        bad=$((bad + 1))
      fi
      printf '%-8d %10.2f %10.2f %10.2f %10.2f %10.0f %8d%s\n' "$size" "$p50" "$p50" "$p99" \
        30000 4242 "$stalls" "$mark"
    done
    if [ "$bad" -gt 0 ]; then
      for r in 1 0; do
        echo "[mpi_steady_latency rank $r] x.c:284: FAIL: $bad size(s) with unsteady latency" \
          "(see the table)"
      done
    fi
  } >"$dir/$name"
}

expect() {  # expect WANT WHAT RDMX RDMX_EXIT UCX UCX_EXIT
  local want=$1 what=$2 got
  bash "$script" judge "$dir/$3" "$4" "$dir/$5" "$6" >"$dir/said" 2>&1
  got=$?
  if [ "$got" = "$want" ]; then
    echo "ok   $what: exit $got: $(tail -1 "$dir/said")"
  else
    echo "FAIL $what: exit $got, wanted $want:"
    cat "$dir/said"
    failures=$((failures + 1))
  fi
}

# The CI boot of stop 46 (rdmx RC) and a UCX run of the same kind.
out steady 0:70:300:3 1:70:300:2 8:72:310:5 16:72:310:4 512:140:410:1
out boot 0:78:392:329 1:78:386:354 8:84:364:191 16:83:413:399 512:141:613:691
out ucx_boot 0:60:380:300 1:61:390:420 8:60:350:150 16:62:400:350 512:120:600:700
# That boot's output as mpirun interleaved it: rank 1's FAIL prefix, then rank 0's histogram
# line, then the message.
hist='hist rank 0 size 512: [64,128):34783'
sed "s/^\(\[mpi_steady_latency rank 1\] x.c:284: FAIL: \)\(.*\)\$/\1  $hist\n\2/" \
  "$dir/boot" >"$dir/interleaved"
# Issue 24: most round trips wait milliseconds (the median itself is raised).
out defect 0:2000:9000:30000 1:330:8000:20000 8:650:9000:25000 16:2300:9000:30000 512:400:5000:9000
out one_size 0:78:392:40 1:78:386:30 8:84:364:2000 16:83:413:50 512:141:613:60
out ucx_spread 0:60:380:200 1:61:390:200 8:60:350:200 16:62:400:200 512:120:600:200
out p99_high 0:78:11700:150 8:84:12600:150 512:141:21150:150
out ucx_p99 0:60:1800:150 8:60:1800:150 512:120:3600:150
out slower 0:800:3000:250 8:820:3000:250 512:900:3500:250
out ucx_p99_only 0:60:1500:0 8:60:1500:0 512:120:3000:0
out ucx_part 0:60:380:300 1:61:390:420 8:60:350:90 16:62:400:350 512:120:600:700
# CI runs of 2026-12: rdmx just over the stall limit at one size where pml ucx passed with fewer.
out ci_over 0:38:255:42 1:33:239:128 8:32:150:52 16:27:86:32 512:62:384:82
out ci_ucx 0:29:98:44 1:25:90:73 8:24:82:53 16:24:69:16 512:42:230:50
out ucx_quiet 0:29:98:4 1:25:90:5 8:24:82:3 16:24:69:2 512:42:230:6
{
  cat "$dir/boot"
  echo "[mpi_steady_latency rank 1] x.c:75: FAIL: size 8 iteration 9: wrong message"
} >"$dir/data"
{ cat "$dir/boot"; echo "mpi test: watchdog expired (RDMX_TEST_TIMEOUT) in phase: ping-pong"; } \
  >"$dir/watchdog"
printf '%s\n' "--------------------------------------------------------------------------" \
  "mpirun noticed that process rank 0 exited on signal 11 (Segmentation fault)." >"$dir/crash"

expect 0 "rdmx passed" steady 0 crash 139
expect 1 "pml ucx steady in the same boot, rdmx far worse" boot 2 steady 0
expect 0 "just over the limit where pml ucx passed, within 3x its stalls" ci_over 2 ci_ucx 0
expect 1 "over the limit where pml ucx passed with almost no stalls" ci_over 2 ucx_quiet 0
expect 1 "issue 24 where pml ucx passed" defect 2 ci_ucx 0
expect 1 "the median alone 10x where pml ucx passed" slower 2 ci_ucx 0
expect 77 "both unsteady, rdmx within the margins at every size" boot 2 ucx_boot 2
expect 77 "the same, as mpirun interleaved the FAIL lines" interleaved 2 ucx_boot 2
expect 1 "issue 24: the median itself raised" defect 2 ucx_boot 2
expect 1 "one size far worse, hidden in a total" one_size 2 ucx_spread 2
expect 1 "p99 150x against UCX's 30x" p99_high 2 ucx_p99 2
expect 1 "rdmx 10x slower at the median" slower 2 ucx_boot 2
expect 1 "UCX failed on p99 alone, rdmx on stalls" boot 2 ucx_p99_only 2
expect 77 "a size UCX passed, rdmx within 3x of its stalls there" boot 2 ucx_part 2
expect 1 "rdmx also failed a data check" data 2 ucx_boot 2
expect 1 "rdmx's watchdog after the table" watchdog 2 ucx_boot 2
expect 1 "rdmx killed by the time limit" boot 124 ucx_boot 2
expect 1 "rdmx crashed" crash 139 ucx_boot 2
expect 1 "the control crashed" boot 2 crash 139
expect 1 "the control failed a data check" boot 2 data 2
# run, with a stand-in for mpirun: each call prints the next output named in $dir/plan (a line
# "NAME EXIT" per call), exits with its code, and logs which pml it was asked for.
cat >"$dir/mpirun" <<END
#!/bin/bash
n=\$((\$(wc -l <"$dir/calls") + 1))
pml=\$(echo "\$*" | grep -o -- '--mca pml [a-z]*' | cut -d' ' -f3)
echo "\${pml:-none}" >>"$dir/calls"
read -r name code < <(sed -n "\${n}p" "$dir/plan")
[ -n "\$name" ] || { echo "stand-in mpirun: call \$n is beyond the plan" >&2; exit 99; }
cat "$dir/\$name"
exit "\$code"
END
expect_run() {  # expect_run WANT WHAT PMLS NAME:EXIT...: the verdict and the pmls called, in order
  local want=$1 what=$2 pmls=$3 got called
  shift 3
  printf '%s\n' "$@" | tr ':' ' ' >"$dir/plan"
  : >"$dir/calls"
  RDMX_TEST_TIMEOUT=30 bash "$script" run rc /nowhere "$dir/mpirun" -np 2 -- prog \
    >"$dir/said" 2>&1
  got=$?
  called=$(paste -sd' ' "$dir/calls")
  if [ "$got" = "$want" ] && [ "$called" = "$pmls" ]; then
    echo "ok   run: $what: exit $got, pmls $called"
  else
    echo "FAIL run: $what: exit $got (wanted $want), pmls '$called' (wanted '$pmls'):"
    cat "$dir/said"
    failures=$((failures + 1))
  fi
}
chmod +x "$dir/mpirun"
expect_run 0 "rdmx passed" "cm" steady:0
expect_run 0 "failed where pml ucx was steady, passed once more" "cm ucx cm" boot:2 steady:0 \
  steady:0
expect_run 1 "failed twice where pml ucx was steady" "cm ucx cm" boot:2 steady:0 boot:2
expect_run 0 "just over where pml ucx passed: no second run" "cm ucx" ci_over:2 ci_ucx:0
expect_run 0 "over where pml ucx was quiet, passed once more" "cm ucx cm" ci_over:2 \
  ucx_quiet:0 steady:0
expect_run 77 "worse than the control, then within its margins" "cm ucx cm" one_size:2 \
  ucx_boot:2 boot:2
expect_run 77 "both unsteady alike: skipped, no second run" "cm ucx" boot:2 ucx_boot:2
expect_run 1 "issue 24 twice" "cm ucx cm" defect:2 ucx_boot:2 defect:2
expect_run 1 "rdmx failed a data check: no control, no second run" "cm" data:2
expect_run 1 "the control crashed: no second run" "cm ucx" boot:2 crash:139
expect_run 1 "the control hit the time limit: no second run" "cm ucx" boot:2 boot:124
expect_run 1 "the second run crashed" "cm ucx cm" boot:2 steady:0 crash:139
expect_run 1 "the second run failed a data check" "cm ucx cm" boot:2 steady:0 data:2
expect_run 1 "the second run hit the time limit" "cm ucx cm" boot:2 steady:0 boot:124
[ "$failures" = 0 ] || { echo "$failures verdict(s) wrong"; exit 1; }
echo "all verdicts as expected"
