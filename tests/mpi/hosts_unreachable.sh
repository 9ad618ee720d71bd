#!/bin/sh
# hosts_unreachable.sh PROG -- MPIRUN...: across two hosts (ci/softroce/run --hosts 2, through
# on_hosts.sh), rank 1 on rdmx-host2 uses the GID of an address of a subnet that rdmx-host1 has
# no route to (10.97.0.2/24, added to host 2's eth0 for the test). Rank 0 on host 1 must refuse
# it, at add_procs, with the MTL's line naming both hosts and rdmx's reason naming both devices
# and GIDs, and the job must end by itself (non-zero), not wait for a connection that cannot
# come. (Open MPI adds processes of other hosts at their first message, so the refusal comes
# with rank 0's first send; mpi_unreachable_peer_np2 has the one-host case, at MPI_Init.)
set -u
prog=$1
shift
[ "$1" = -- ] && shift
here=$(dirname "$0")
addr=10.97.0.2
trap 'ssh rdmx-host2 ip addr del $addr/24 dev eth0 2>/dev/null' EXIT
# The RoCE v2 entry rxe makes for the address (IPv4-mapped ::ffff:10.97.0.2), found on host 2.
# shellcheck disable=SC2029 # expanded here on purpose: host 2 sees the same paths
index=$(ssh rdmx-host2 "ip addr add $addr/24 dev eth0 && sh $here/gid_of.sh rxe0 $addr") ||
  { echo "hosts_unreachable: no RoCE v2 GID for $addr on rdmx-host2's rxe0"; exit 1; }
echo "hosts_unreachable: rank 1 uses rdmx-host2's rxe0 GID index $index ($addr)"
ip route get "$addr" 2>&1

sh "$here/mpirun_expect.sh" --fails --within 120 \
  --match "mtl rdmx: process [^ ]+ on host rdmx-host1 cannot reach process [^ ]+ on host rdmx-host2: .*the kernel has no route from our rxe0 [(]GID 10[.]99[.]2[.]1[)] to the peer's rxe0 [(]GID 10[.]97[.]0[.]2, uid [0-9a-f]+[)]" \
  -- "$@" -np 1 --host rdmx-host1 "$prog" : -np 1 --host rdmx-host2 env RDMX_GID_INDEX="$index" "$prog"
