#!/bin/sh
# mpi_init_loop.sh COUNT -- MPIRUN_LINE...: runs MPIRUN_LINE (an mpirun of mpi_initfini) COUNT
# times in this boot. Every run must pass within 120 s (no hang), print its PASS line and nothing
# on stderr; the first and the last run also check that no process keeps a verbs object after
# MPI_Finalize (RDMX_INITFINI_CHECK=1, passed with -x); the device's object counts (`rdma -j
# resource show`) must be the same after every run as before the loop. Prints the wall time
# per run (mean, max) and in total.
count=$1
shift
[ "$1" = "--" ] && shift
[ "$count" -gt 0 ] 2>/dev/null && [ $# -gt 0 ] || { echo "usage: $0 COUNT -- CMD..." >&2; exit 2; }
command -v rdma >/dev/null || { echo "mpi_init_loop: no rdma tool (iproute2)"; exit 1; }

dir=$(mktemp -d) || exit 2
trap 'rm -rf "$dir"' EXIT
now_ms() { echo $(($(date +%s%N) / 1000000)); }

base=$(rdma -j resource show)
echo "device objects before: $base"
start=$(now_ms)
max=0
i=1
while [ $i -le "$count" ]; do
  check=0
  { [ $i -eq 1 ] || [ $i -eq "$count" ]; } && check=1
  t0=$(now_ms)
  RDMX_INITFINI_CHECK=$check timeout -k 10 120 "$@" >"$dir/out" 2>"$dir/err"
  rc=$?
  dt=$(($(now_ms) - t0))
  [ $dt -gt $max ] && max=$dt
  if [ $rc -ne 0 ] || ! grep -q '^PASS mpi_initfini' "$dir/out" || [ -s "$dir/err" ]; then
    echo "FAIL: run $i of $count: exit $rc after $dt ms (124/137: hung)"
    echo "--- stdout:"; cat "$dir/out"; echo "--- stderr:"; cat "$dir/err"
    exit 1
  fi
  if [ $check -eq 1 ] && ! grep -q 'no verbs object left' "$dir/out"; then
    echo "FAIL: run $i did not check its verbs objects (RDMX_INITFINI_CHECK not passed on?)"
    exit 1
  fi
  [ $check -eq 1 ] && echo "run $i: $(cat "$dir/out")"
  now=$(rdma -j resource show)
  if [ "$now" != "$base" ]; then
    echo "FAIL: run $i of $count: device object counts differ from before the loop: $now"
    exit 1
  fi
  i=$((i + 1))
done
total=$(($(now_ms) - start))
end=$(rdma -j resource show)
echo "device objects after:  $end"
echo "init/finalize loop: $count runs in $total ms, mean $((total / count)) ms, max $max ms"
if [ "$base" != "$end" ]; then
  echo "FAIL: device object counts differ after the loop"
  exit 1
fi
echo "PASS mpi_init_loop ($count runs)"
