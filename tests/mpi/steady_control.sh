#!/bin/bash
# steady_control.sh: mpi_steady_latency over the rdmx MTL, with pml ucx as the control when it
# fails.
#
#   steady_control.sh run T COMPONENT_PATH MPIRUN [MPIRUN_ARG]... -- PROGRAM [ARG]...
#   steady_control.sh judge RDMX_OUT RDMX_EXIT UCX_OUT UCX_EXIT
#
# run: PROGRAM runs through the rdmx MTL in transport T (rc or ud, shared memory off). When it
# passes, so does the test. When it fails on unsteady latency alone (the program's own verdict,
# exit 2, every data check passed), the same PROGRAM and arguments run over pml ucx in the same
# boot, on the device whose packet counters moved: rc_verbs (with ud_verbs for its wire-up, as
# ci/bench-mpi runs it) for rc, ud_verbs for ud. Then judge decides, size by size (below). When
# judge fails rdmx (exit 1) and the control was steady or unsteady alone, rdmx runs once more
# in the same boot and judge decides on that run instead. Two runs of one boot differ (the
# median up to 2x, below), and a result just over the margins can be such a difference. So the
# test is the best of two runs: the defect of issue 24 fails both, one that shows in some runs
# only gets through more often. judge compares every size rdmx failed with the same size over pml
# ucx; rdmx is worse there when it has over 3x UCX's stalls plus the number the limit allows,
# over 3x its p99 multiple (when rdmx's is over the limit), or over 3x its median (two runs in
# a row of one boot have differed 2x at the median, either way):
#   exit 0   rdmx passed (in run: either run of it), or pml ucx passed and rdmx was worse at no
#            size. The absolute stall limit counts the guest's pauses as much as rdmx: the
#            emulated guest loses its CPUs to the host for one or more host ticks now and then
#            (4-16 ms, tests/mpi/CMakeLists.txt), and a boot just steady enough for UCX can put
#            rdmx over (three CI runs of 2026-12: 108 stalls against the 100 allowed where
#            UCX had 25 and passed; 128 where it had 73; 112 where it had 50). The margins are
#            the skip's: rdmx's stalls have been 1.75-4.3x UCX's in such boots, so a tighter
#            one would fail on the boot again;
#   exit 77  (skipped) pml ucx failed too and rdmx was worse at no size: the boot itself was
#            unsteady;
#   exit 1   anything else: rdmx worse at any size, or any run ending otherwise (a data check, a
#            crash, the time limit).
# The defect of issue 24 (rdmx 4-35x slower than pml ucx in the same boot, most round trips
# waiting milliseconds) fails here at its median alone.
# judge: that verdict from two saved outputs and exit codes (tests/mpi/steady_control_test.sh).
set -u

# The table of one output, a line per size: size p50 p99/p50 stalls failed(0/1), then a line
# "limits P99_LIMIT STALLS_ALLOWED" from the header.
table() {
  awk '
    /^# .*limits: p99 <= [0-9.]+x p50, at most [0-9.]+ round trips over/ {
      for (i = 1; i < NF; ++i) {
        if ($i == "<=") p99_limit = $(i + 1) + 0
        if ($i == "most") allowed = $(i + 1) + 0
      }
    }
    /^[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9]+/ {
      printf "%d %s %.3f %d %d\n", $1, $3, ($3 > 0 ? $4 / $3 : 0), $7, (/<- FAIL/ ? 1 : 0)
    }
    END { printf "limits %s %d\n", p99_limit + 0, allowed + 0 }' "$1"
}

# Failed on unsteady latency alone: exit 2 (MPI_Abort from the program's check), a size marked
# FAIL in the table, every rank's FAIL the unsteady-latency one (counted, not matched by line:
# mpirun interleaves the ranks' output), and no watchdog.
unsteady_only() {  # $1 output, $2 exit
  local fails unsteady
  fails=$(grep -o 'FAIL:' "$1" | wc -l)
  unsteady=$(grep -o 'size(s) with unsteady latency' "$1" | wc -l)
  [ "$2" = 2 ] && [ "$unsteady" -ge 1 ] && [ "$fails" = "$unsteady" ] &&
    ! grep -q 'watchdog expired' "$1" &&
    table "$1" | awk '$1 != "limits" && $5 == 1 { found = 1 } END { exit !found }'
}

judge() {  # $1 rdmx output, $2 its exit, $3 pml ucx output, $4 its exit
  [ "$2" = 0 ] && return 0
  if ! unsteady_only "$1" "$2"; then
    echo "steady_control: FAIL: rdmx failed (exit $2), not on unsteady latency alone"
    return 1
  fi
  if [ "$4" != 0 ] && ! unsteady_only "$3" "$4"; then
    echo "steady_control: FAIL: rdmx unsteady; the pml ucx control failed otherwise (exit $4)," \
      "so it cannot excuse it"
    return 1
  fi
  # Every size rdmx failed, against the same size over UCX.
  awk '
    FNR == 1 { ++file }
    $1 == "limits" { p99_limit = $2; allowed = $3; next }
    file == 1 { r[$1] = $0; order[++n] = $1; next }
    { u[$1] = $0 }
    END {
      bad = 0
      for (i = 1; i <= n; ++i) {
        s = order[i]
        split(r[s], a, " ")
        if (!a[5]) continue
        if (!(s in u)) { printf "size %s: no figure from pml ucx\n", s; ++bad; continue }
        split(u[s], b, " ")
        why = ""
        if (a[4] > 3 * b[4] + allowed) why = why sprintf(" %d stalls against UCX %d;", a[4], b[4])
        if (a[3] > p99_limit && a[3] > 3 * b[3])
          why = why sprintf(" p99 %.1fx the median against UCX %.1fx;", a[3], b[3])
        if (a[2] > 3 * b[2]) why = why sprintf(" median %s us against UCX %s us;", a[2], b[2])
        printf "size %s: rdmx %d stalls, p99 %.1fx, median %s us; pml ucx %d, %.1fx, %s us%s\n",
               s, a[4], a[3], a[2], b[4], b[3], b[2], why == "" ? "" : " <- worse:" why
        if (why != "") ++bad
      }
      exit bad != 0
    }' <(table "$1") <(table "$3")
  local worse=$?
  if [ "$worse" = 0 ] && [ "$4" = 0 ]; then
    echo "steady_control: PASS: rdmx is over the program's limits, but within the margins of" \
      "pml ucx in the same boot at every size it failed, and pml ucx passed: the guest's pauses" \
      "decide how far over"
    return 0
  fi
  if [ "$worse" = 0 ]; then
    echo "steady_control: SKIPPED: this boot is unsteady for pml ucx too, and rdmx is within" \
      "its margins at every size it failed: the guest's pauses decide the count"
    return 77
  fi
  echo "steady_control: FAIL: rdmx is worse than pml ucx in the same boot (margins: 3x the stalls" \
    "plus those allowed, 3x the p99 multiple, 3x the median)"
  return 1
}

run() {
  local t=$1 comp=$2 mpirun=$3
  shift 3
  local -a margs=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    margs+=("$1")
    shift
  done
  if [ $# -lt 2 ]; then
    echo "steady_control.sh run: no -- PROGRAM" >&2
    return 2
  fi
  shift
  # Each run's bound: the program's own watchdog (mpi_test.h) and a little for mpirun.
  local limit=$((${RDMX_TEST_TIMEOUT:-300} + 20))
  dir=$(mktemp -d) || return 1  # global: the EXIT trap removes it
  trap 'rm -rf "$dir"' EXIT
  over_rdmx "$dir/rdmx" "$@"
  local rrc=$?
  [ "$rrc" = 0 ] && return 0
  local urc=1
  : >"$dir/ucx"
  if unsteady_only "$dir/rdmx" "$rrc"; then
    # The device rdmx used: the one whose packet counters moved (printed with a failing size).
    local dev tls=self,rc_verbs,ud_verbs
    dev=$(grep -o '[^ /]*/rcvd_pkts' "$dir/rdmx" | head -1 | cut -d/ -f1)
    [ -n "$dev" ] ||
      dev=$(find /sys/class/infiniband -mindepth 1 -maxdepth 1 -printf '%f\n' | sort | head -1)
    [ "$t" = ud ] && tls=self,ud_verbs
    echo "--- control: the same program over pml ucx ($tls on $dev:1)"
    timeout -k 10 "$limit" "$mpirun" "${margs[@]}" --mca pml ucx -x "UCX_TLS=$tls" \
      -x "UCX_NET_DEVICES=$dev:1" -x UCX_UD_VERBS_ETH_DGID_CHECK=n "$@" 2>&1 | tee "$dir/ucx"
    urc=${PIPESTATUS[0]}
    echo "--- control exit $urc"
  fi
  judge "$dir/rdmx" "$rrc" "$dir/ucx" "$urc"
  local verdict=$?
  if [ "$verdict" = 1 ] && unsteady_only "$dir/rdmx" "$rrc" &&
    { [ "$urc" = 0 ] || unsteady_only "$dir/ucx" "$urc"; }; then
    echo "--- rdmx once more in this boot: its verdict against the same control replaces the above"
    over_rdmx "$dir/rdmx2" "$@"
    rrc=$?
    echo "--- rdmx once more: exit $rrc"
    judge "$dir/rdmx2" "$rrc" "$dir/ucx" "$urc"
    verdict=$?
  fi
  return "$verdict"
}

# PROGRAM over the rdmx MTL, its output in $1 too; returns mpirun's exit. Called from run only:
# it uses run's locals.
over_rdmx() {
  local out=$1
  shift
  timeout -k 10 "$limit" "$mpirun" "${margs[@]}" --mca pml cm --mca mtl rdmx \
    --mca mtl_rdmx_transport "$t" --mca mtl_rdmx_shm 0 --mca mca_base_component_path "$comp" \
    "$@" 2>&1 | tee "$out"
  return "${PIPESTATUS[0]}"
}

case ${1:-} in
  run) shift; run "$@" ;;
  judge) shift; judge "$@" ;;
  *) echo "usage: steady_control.sh run|judge ..." >&2; exit 2 ;;
esac
