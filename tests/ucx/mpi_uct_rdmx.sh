#!/bin/sh
# Guest test of the Open MPI hook (plugin/ucx/hook): `mpirun -np 2` over pml ucx runs
# mpi_uct_rdmx, which checks that UCT component rdmx is registered in every rank.
# Usage: mpi_uct_rdmx.sh EXPECT OMPI_COMPONENT_DIR HOOK_DIR|none MPIEXEC PROGRAM
#   HOOK_DIR  the folder of mca_hook_rdmx.so, put on mca_base_component_path: the run must pass;
#   none      Open MPI's own folder alone: the same run must fail with the program's FAIL line
#             (without the hook nothing loads the module), which shows the test can fail.
# The test is about loading: the job runs over UCX's own transports (rc_verbs, ud_verbs for its
# wire-up) on the first RDMA device, as ci/bench-lib.sh's `ucx` stack does on rxe, so that the
# run without the hook can pass but for the program's check; pml_ucx_tls and pml_ucx_devices
# `any`, as a job over rdmx's transports needs (shared/ucx-plugin.md). Jobs over rdmx_rc and
# rdmx_ud: tests/mpi's *_uct_* tests (mpirun_uct_rdmx.sh).
set -u
expect=$1 ompi_dir=$2 hook_dir=$3 mpiexec=$4 prog=$5
dev=
for d in /sys/class/infiniband/*; do
  [ -e "$d" ] && { dev=${d##*/}; break; }
done
[ -n "$dev" ] || { echo "FAIL: no RDMA device in /sys/class/infiniband"; exit 1; }
path=$ompi_dir
[ "$hook_dir" = none ] || path=$ompi_dir:$hook_dir
set -- "$mpiexec" --allow-run-as-root --oversubscribe --bind-to none -np 2 \
  --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any \
  --mca mca_base_component_path "$path" \
  -x UCX_TLS=self,rc_verbs,ud_verbs -x "UCX_NET_DEVICES=$dev:1" -x UCX_UD_VERBS_ETH_DGID_CHECK=n \
  "$prog"
if [ "$hook_dir" = none ]; then
  exec sh "$expect" --fails --within 100 \
    --match '^FAIL mpi_uct_rdmx: no UCT component rdmx on rank[(]s[)] 0 1$' -- "$@"
fi
exec sh "$expect" --within 100 --match '^PASS mpi_uct_rdmx [(]np 2[)]$' -- "$@"
