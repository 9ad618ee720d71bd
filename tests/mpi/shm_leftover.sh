#!/bin/sh
# shm_leftover.sh PROG -- MPIRUN...: no rdmx segment is left in /dev/shm after a job that ends
# normally, after SIGKILL of one rank, and after SIGKILL of the whole job (mpirun and ranks).
# PROG is mpi_shm_local; MPIRUN the mpirun command line with shared memory on.
set -u
prog=$1
shift 2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL shm_leftover: $*"; ls -la /dev/shm; exit 1; }
left() { ls /dev/shm 2>/dev/null | grep -c '^rdmx-'; }

# Files of earlier tests' processes that are gone go at the next segment's creation; this test
# counts what its own jobs leave, so it starts from none.
[ "$(left)" -eq 0 ] || { echo "note: removing $(left) earlier rdmx files"; rm -f /dev/shm/rdmx-*; }

echo "== a job that ends normally"
timeout -k 5 120 "$@" -np 2 "$prog" names || fail "the normal job failed"
[ "$(left)" -eq 0 ] || fail "$(left) rdmx files after a normal end"

# Starts a holding job of NP ranks; sets $job and $pids once every rank printed READY.
start_hold() {
  "$@" -np 2 "$prog" hold >"$dir/out" 2>"$dir/err" &
  job=$!
  i=0
  while [ "$(grep -c '^READY' "$dir/out")" -lt 2 ]; do
    i=$((i + 1))
    [ $i -le 600 ] || { cat "$dir/err"; fail "the ranks did not get ready in 60 s"; }
    kill -0 $job 2>/dev/null || { cat "$dir/err"; fail "the job ended before it was ready"; }
    sleep 0.1
  done
  pids=$(sed -n 's/^READY //p' "$dir/out")
}
finish() {
  i=0
  while kill -0 $job 2>/dev/null; do
    i=$((i + 1))
    [ $i -le 300 ] || { kill -9 $job; break; }
    sleep 0.1
  done
  wait $job 2>/dev/null
  for p in $pids; do kill -9 "$p" 2>/dev/null; done
  sleep 0.5
}

echo "== one rank killed"
start_hold "$@"
kill -9 $(echo "$pids" | head -n 1)
sleep 1
kill -TERM $job 2>/dev/null
finish
[ "$(left)" -eq 0 ] || fail "$(left) rdmx files after SIGKILL of one rank"

echo "== the whole job killed"
start_hold "$@"
kill -9 $job $pids
finish
[ "$(left)" -eq 0 ] || fail "$(left) rdmx files after SIGKILL of the whole job"
echo "PASS shm_leftover"
