#!/bin/bash
# The verdicts of steady_control.sh judge, from outputs shaped as mpi_steady_latency prints them
# (the table rows and FAIL lines of a real failed run, tests/mpi/mpi_steady_latency.c).
#   steady_control_test.sh PATH_TO_steady_control.sh
set -u
script=$1
dir=$(mktemp -d) || exit 2
trap 'rm -rf "$dir"' EXIT
failures=0

# out NAME STALLS_0 STALLS_512 P99_512 [EXTRA_LINE]: a two-size run, median 80 us, the limit of
# 100 stalls per size; a size over it (or over p99 20x) is marked FAIL, and so is the run.
out() {
  local name=$1 s0=$2 s1=$3 p99=$4 extra=${5:-} bad=0 m0='' m1=''
  [ "$s0" -gt 100 ] && m0='  <- FAIL' && bad=$((bad + 1))
  if [ "$s1" -gt 100 ] || awk -v p="$p99" 'BEGIN { exit !(p > 1600) }'; then
    m1='  <- FAIL' && bad=$((bad + 1))
  fi
  {
    echo "# 1 pair(s), 100000 iterations per size after 100 warm-up; round trips in us; limits:" \
      "p99 <= 20x p50, at most 100 round trips over 50x p50"
    echo "# size         mean        p50        p99        max     max_at   stalls"
    printf '%-8d %10.2f %10.2f %10.2f %10.2f %10.0f %8d%s\n' 0 116.16 80.00 391.92 21409.57 \
      89576 "$s0" "$m0"
    printf '%-8d %10.2f %10.2f %10.2f %10.2f %10.0f %8d%s\n' 512 219.66 80.00 "$p99" 24135.54 \
      16718 "$s1" "$m1"
    [ -n "$extra" ] && echo "$extra"
    [ "$bad" -gt 0 ] && echo "[mpi_steady_latency rank 0] x.c:284: FAIL: $bad size(s) with" \
      "unsteady latency (see the table)"
  } >"$dir/$name"
}

expect() {  # expect WANT WHAT RDMX RDMX_EXIT UCX UCX_EXIT
  local want=$1 what=$2 got
  bash "$script" judge "$dir/$3" "$4" "$dir/$5" "$6" >"$dir/said" 2>&1
  got=$?
  if [ "$got" = "$want" ]; then
    echo "ok   $what: exit $got: $(cat "$dir/said")"
  else
    echo "FAIL $what: exit $got, wanted $want: $(cat "$dir/said")"
    failures=$((failures + 1))
  fi
}

out steady 3 5 300
out boot 329 691 612
out ucx_boot 300 420 700
out defect 60000 70000 90000
out p99_only 40 50 4000
out data 329 691 612 "[mpi_steady_latency rank 1] x.c:75: FAIL: size 8 iteration 9: wrong message"
echo "--------------------------------------------------------------------------
mpirun noticed that process rank 0 exited on signal 11 (Segmentation fault)." >"$dir/crash"

expect 0 "rdmx passed" steady 0 crash 1
expect 1 "pml ucx steady in the same boot" boot 2 steady 0
expect 77 "both unsteady, rdmx within 3x" boot 2 ucx_boot 2
expect 1 "rdmx stalls on most round trips (issue 24)" defect 2 ucx_boot 2
expect 1 "rdmx p99 over 3x UCX's" p99_only 2 steady 0
expect 1 "rdmx p99 50x against UCX's 8.75x" p99_only 2 ucx_boot 2
expect 1 "rdmx also failed a data check" data 2 ucx_boot 2
expect 1 "rdmx crashed" crash 139 ucx_boot 2
expect 1 "the control crashed" boot 2 crash 139
expect 1 "the control failed a data check" boot 2 data 2
[ "$failures" = 0 ] || { echo "$failures verdict(s) wrong"; exit 1; }
echo "all verdicts as expected"
