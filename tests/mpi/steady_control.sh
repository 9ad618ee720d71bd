#!/bin/bash
# steady_control.sh: mpi_steady_latency over the rdmx MTL, with pml ucx as the control when it
# fails.
#
#   steady_control.sh run T COMPONENT_PATH MPIRUN [MPIRUN_ARG]... -- PROGRAM [ARG]...
#   steady_control.sh judge RDMX_OUT RDMX_EXIT UCX_OUT UCX_EXIT
#
# run: PROGRAM runs through the rdmx MTL in transport T (rc or ud, shared memory off). When it
# passes, so does the test. When it fails on unsteady latency alone, the same PROGRAM and
# arguments run over pml ucx on the same device, in the same boot: UCX's rc_verbs for rc, its
# ud_verbs for ud. Then judge decides:
#   exit 0   rdmx passed;
#   exit 1   rdmx failed for any other reason, or pml ucx was steady where rdmx was not, or rdmx
#            stalled over 3x as often as pml ucx (or its worst p99 was over 3x UCX's), or the
#            control did not run to a verdict of its own;
#   exit 77  (skipped) the boot itself was unsteady: pml ucx failed the same limits and rdmx did
#            no worse than 3x. The emulated guest's own pauses (a scheduler tick of 4-16 ms,
#            tests/mpi/CMakeLists.txt) then decide the count, and nothing can be said of rdmx.
# The defect of issue 24 made rdmx 4-35x slower than pml ucx in the same boot, with most round
# trips waiting milliseconds: it fails here whatever the boot does.
# judge: that verdict from two saved outputs and exit codes (tests/mpi/steady_control_test.sh).
set -u

# Figures of one output: stalls summed over the sizes, the worst p99/p50, the stalls allowed per
# size, the number of table rows, and the number of FAIL lines not about unsteady latency.
figures() {
  awk '
    /^# .*at most [0-9]+ round trips over/ {
      for (i = 1; i < NF; ++i) if ($i == "most") allowed = $(i + 1)
    }
    /^[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9]+/ {
      ++rows; stalls += $7
      if ($3 > 0 && $4 / $3 > p99x) p99x = $4 / $3
    }
    /FAIL:/ && !/size\(s\) with unsteady latency/ { ++other }
    END { printf "%d %.2f %d %d %d\n", stalls, p99x, allowed, rows, other }' "$1"
}

unsteady_only() {  # $1 output, $2 exit: failed, on unsteady latency and nothing else
  local rows other
  read -r _ _ _ rows other < <(figures "$1")
  [ "$2" != 0 ] && [ "$rows" -gt 0 ] && [ "$other" = 0 ] &&
    grep -q 'size(s) with unsteady latency' "$1"
}

judge() {  # $1 rdmx output, $2 its exit, $3 pml ucx output, $4 its exit
  local rs rp ra ucs up _
  [ "$2" = 0 ] && return 0
  if ! unsteady_only "$1" "$2"; then
    echo "steady_control: rdmx failed (exit $2), not on unsteady latency alone: no control run"
    return 1
  fi
  read -r rs rp ra _ _ < <(figures "$1")
  if [ "$4" = 0 ]; then
    echo "steady_control: FAIL: rdmx unsteady ($rs stalls, worst p99 ${rp}x the median) where" \
      "pml ucx was steady in the same boot"
    return 1
  fi
  if ! unsteady_only "$3" "$4"; then
    echo "steady_control: FAIL: rdmx unsteady ($rs stalls); the pml ucx control failed" \
      "otherwise (exit $4), so it cannot excuse it"
    return 1
  fi
  read -r ucs up _ _ _ < <(figures "$3")
  local floor=$((ucs > ra ? ucs : ra))
  if [ "$rs" -le $((3 * floor)) ] && awk -v r="$rp" -v u="$up" 'BEGIN { exit !(r <= 3 * u) }'; then
    echo "steady_control: SKIPPED: this boot is unsteady for pml ucx too (ucx $ucs stalls, worst" \
      "p99 ${up}x; rdmx $rs stalls, ${rp}x): the guest's pauses decide the count, not rdmx"
    return 77
  fi
  echo "steady_control: FAIL: rdmx $rs stalls, worst p99 ${rp}x, against pml ucx's $ucs and" \
    "${up}x in the same boot (limit 3x)"
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
  shift
  # Each run's bound: the program's own watchdog (mpi_test.h) and a little for mpirun.
  local limit=$((${RDMX_TEST_TIMEOUT:-300} + 20))
  dir=$(mktemp -d) || return 1  # global: the EXIT trap removes it
  trap 'rm -rf "$dir"' EXIT
  timeout -k 10 "$limit" "$mpirun" "${margs[@]}" --mca pml cm --mca mtl rdmx \
    --mca mtl_rdmx_transport "$t" --mca mtl_rdmx_shm 0 --mca mca_base_component_path "$comp" \
    "$@" >"$dir/rdmx" 2>&1
  local rrc=$?
  cat "$dir/rdmx"
  [ "$rrc" = 0 ] && return 0
  local urc=1
  : >"$dir/ucx"
  if unsteady_only "$dir/rdmx" "$rrc"; then
    # The device rdmx used: the one whose packet counters moved (printed with a failing size).
    local dev tls=self,rc_verbs,ud_verbs
    dev=$(grep -o '[a-z0-9_]*/rcvd_pkts' "$dir/rdmx" | head -1 | cut -d/ -f1)
    [ -n "$dev" ] ||
      dev=$(find /sys/class/infiniband -mindepth 1 -maxdepth 1 -printf '%f\n' | sort | head -1)
    [ "$t" = ud ] && tls=self,ud_verbs
    echo "--- control: the same program over pml ucx ($tls on $dev:1)"
    timeout -k 10 "$limit" "$mpirun" "${margs[@]}" --mca pml ucx -x "UCX_TLS=$tls" \
      -x "UCX_NET_DEVICES=$dev:1" -x UCX_UD_VERBS_ETH_DGID_CHECK=n "$@" >"$dir/ucx" 2>&1
    urc=$?
    cat "$dir/ucx"
    echo "--- control exit $urc"
  fi
  judge "$dir/rdmx" "$rrc" "$dir/ucx" "$urc"
}

case ${1:-} in
  run) shift; run "$@" ;;
  judge) shift; judge "$@" ;;
  *) echo "usage: steady_control.sh run|judge ..." >&2; exit 2 ;;
esac
