#!/bin/sh
# Runs an MPI test program through Open MPI's pml ucx over one of rdmx's UCT transports, loaded
# by the Open MPI hook (plugin/ucx/hook) with no LD_PRELOAD: what a user runs.
# Usage: mpirun_uct_rdmx.sh TL NP DEVICES OMPI_COMPONENT_DIR HOOK_DIR MPIEXEC PROGRAM
#   TL       rdmx_rc or rdmx_ud: UCX_TLS is TL,self, so every message between ranks goes through
#            rdmx (UCX's shared-memory transports are left out on purpose);
#   DEVICES  1: the first RDMA device alone (UCX_NET_DEVICES); all: every device, so that UCP
#            may spread a peer's traffic over one rdmx interface per device.
# UCX_ZCOPY_THRESH, when set with TL rdmx_rc (the one with am_zcopy), goes to every rank: UCP's
# eager messages from that size by the transport's am_zcopy (UCP's own estimate never picks it on
# rxe: the copy looks cheaper); then some rank's interface must say, as it closes, that it sent
# am_zcopys from the caller's memory (UCX_LOG_LEVEL=info), so that the run cannot pass with UCP
# choosing another path.
# The program's own checks decide (mpi_test.h); a hang is cut by the test's TIMEOUT.
set -u
tl=$1 np=$2 devices=$3 ompi_dir=$4 hook_dir=$5 mpiexec=$6 prog=$7
net=all
if [ "$devices" = 1 ]; then
  for d in /sys/class/infiniband/*; do
    [ -e "$d" ] && { net=${d##*/}:1; break; }
  done
fi
set -- "$mpiexec" --allow-run-as-root --oversubscribe --bind-to none -np "$np" \
  --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any \
  --mca mca_base_component_path "$ompi_dir:$hook_dir" \
  -x "UCX_TLS=$tl,self" -x "UCX_NET_DEVICES=$net" -x UCX_WARN_UNUSED_ENV_VARS=n
if [ -z "${UCX_ZCOPY_THRESH:-}" ] || [ "$tl" != rdmx_rc ]; then
  exec "$@" "$prog"
fi
out=$(mktemp) || exit 1
# The output shows whatever ends the run, ctest's TIMEOUT included.
trap 'cat "$out"; rm -f "$out"' EXIT
trap 'exit 143' TERM INT
"$@" -x UCX_ZCOPY_THRESH -x UCX_LOG_LEVEL=info "$prog" >"$out" 2>&1
rc=$?
[ "$rc" -eq 0 ] || exit "$rc"
grep -qE 'rdmx: interface closed: [1-9][0-9]* am_zcopy from' "$out" ||
  { echo "FAIL: no interface sent an am_zcopy from the caller's memory"; exit 1; }
