#!/bin/sh
# memlock_user.sh MPIRUN OMPI_DIR MTL_SO LIBRDMX PROGRAM: an MPI job over the rdmx MTL run by a
# user without CAP_IPC_LOCK (nobody), under the locked-memory limit Debian gives non-root users
# (ulimit -l 8192 KiB), and under one too small for rdmx at all (1024 KiB):
#   8 MiB: the job passes, rdmx having lowered its SRQ depth to fit (said when verbose);
#   1 MiB: MPI_Init fails at once with one message naming ulimit -l, the amount needed and the
#          settings that lower it; no crash, no hang.
# The files are copied to a folder the user can read (the build tree may be under /root).
set -u
mpirun=$1 ompi_dir=$2 mtl=$3 lib=$4 prog=$5
[ "$(id -u)" -eq 0 ] || { echo "memlock_user: needs root (to run as nobody)"; exit 1; }
dir=$(mktemp -d /tmp/rdmx-memlock.XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT
cp "$mtl" "$prog" "$dir"/ && cp -P "$lib"* "$dir"/ || exit 1
chmod -R a+rX "$dir"
chmod 1777 "$dir"
as_user() { # KIB: runs the job as nobody under ulimit -l KIB; its output in $dir/out.KIB
  runuser -u nobody -- env HOME="$dir" LD_LIBRARY_PATH="$dir" RDMX_VERBOSE=1 timeout -k 5 240 \
    sh -c "ulimit -l $1 && exec $mpirun --oversubscribe --bind-to none -np 2 --mca pml cm \
      --mca mtl rdmx --mca mca_base_component_path $ompi_dir:$dir $dir/$(basename "$prog")" \
    >"$dir/out.$1" 2>&1
}
fail() { echo "memlock_user: FAIL: $*"; exit 1; }

as_user 8192
rc=$?
cat "$dir/out.8192"
[ $rc -eq 0 ] || fail "the job under ulimit -l 8192 exited with $rc"
grep -q "^PASS" "$dir/out.8192" || fail "no PASS under ulimit -l 8192"
grep -q "locked-memory limit 8192 KiB (ulimit -l): SRQ depth" "$dir/out.8192" ||
  fail "rdmx did not say it fitted its SRQs under 8 MiB"

as_user 1024
rc=$?
cat "$dir/out.1024"
case $rc in 0 | 124 | 137) fail "under ulimit -l 1024: exit $rc (must fail by itself)" ;; esac
grep -q "Segmentation\|signal 11" "$dir/out.1024" && fail "a crash under ulimit -l 1024"
grep -q "locked-memory limit (ulimit -l) is 1024 KiB.*raise the limit to [0-9]* KiB.*RDMX_LARGE_BUF" \
  "$dir/out.1024" || fail "no message naming ulimit -l, the amount and the settings"
echo "memlock_user: PASS"
