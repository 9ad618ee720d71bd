#!/bin/sh
# Smoke test of bench/osu over one MPI stack: plumbing, not speed (few sizes, few iterations).
# Checks the exit status, the OSU header and that every size got a row: a figure > 0 up to MUST
# bytes (what the stack surely carries), a figure or `fail` above (the pre-flight's refusals).
#   osu_smoke.sh OSU_DIR MUST all|core|edge MPIRUN_ARGS...
# all:  every program (on the host, where a launch is cheap)
# core: osu_latency, osu_bw, osu_latency_mt, osu_mbw_mr (np 4: the pair code of multi_lat too)
# edge: osu_latency from 512 B to 2 KiB (a transport's refusals must become `fail` rows)
set -u
dir=$1 must=$2 which=$3
shift 3
status=0
run() { # np prog sizes extra-args...
  np=$1 prog=$2 sizes=$3
  shift 3
  lo=${sizes%%:*} hi=${sizes##*:}
  out=$(timeout 300 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" "$@" \
        "$dir/$prog" -m "$sizes" -i 20 -x 2 -I 5 -X 1 -T 60 2>&1)
  rc=$?
  printf '%s\n' "$out" | sed "s/^/  $prog | /"
  verdict=$(printf '%s\n' "$out" | awk -v lo="$lo" -v hi="$hi" -v must="$must" '
    /^# Size/ { hdr = 1 }
    /^[0-9]/ { v[$1] = $2 }
    END {
      if (!hdr) { print "no `# Size` header"; exit }
      for (s = lo; s <= hi; s *= 2) {
        if (!(s in v)) { print "no row for size " s; exit }
        if (v[s] == "fail" && s > must) continue
        if (v[s] !~ /^[0-9.]+$/ || v[s] + 0 <= 0) { print "size " s ": " v[s]; exit }
      }
      print "ok"
    }')
  if [ "$rc" -ne 0 ] || [ "$verdict" != ok ]; then
    echo "FAIL $prog (np $np): exit $rc, $verdict"
    status=1
  else
    echo "ok $prog (np $np)"
  fi
}
case $which in
  edge)
    run 2 osu_latency 512:2048 "$@"
    exit $status ;;
  core)
    run 2 osu_latency 8:64 "$@"
    run 2 osu_bw 8:64 "$@"
    run 2 osu_latency_mt 8:8 "$@"
    run 4 osu_mbw_mr 8:8 "$@"
    exit $status ;;
esac
run 2 osu_latency 8:2048 "$@"
run 2 osu_bw 8:2048 "$@"
run 2 osu_bibw 8:512 "$@"
run 2 osu_latency_mt 8:64 "$@"
run 4 osu_mbw_mr 8:512 "$@"
run 4 osu_multi_lat 8:64 "$@"
out=$(timeout 300 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 3 "$@" \
      "$dir/mpi_footprint" 2>&1)
printf '%s\n' "$out" | sed 's/^/  mpi_footprint | /'
if printf '%s\n' "$out" | grep -q '^# summary np 3 qps_max'; then
  echo "ok mpi_footprint (np 3)"
else
  echo "FAIL mpi_footprint: no summary line"
  status=1
fi
exit $status
