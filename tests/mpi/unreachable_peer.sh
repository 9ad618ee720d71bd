#!/bin/sh
# unreachable_peer.sh PROG -- MPIRUN...: an np 2 job in which rank 0 cannot reach rank 1 (issue
# 29) fails MPI_Init by itself, well within a minute, with the MTL's line naming both hosts and
# rdmx's reason naming both devices and GIDs. Needs the two-device guest (ci/softroce/run
# --devices 2: rxe1 on veth0 10.99.1.1, rxe2 on veth1 10.99.1.2).
#
# Rank 0 runs on rxe1 with the GID of an address added for the test, 10.97.0.1 on veth0, and a
# policy rule makes packets from that address to 10.99.1.0/24 unroutable (`ip rule add from
# 10.97.0.1 to 10.99.1.0/24 unreachable`): the kernel, and so rxe, has no route from it to
# 10.99.1.2 (rank 1), while rank 0 still reaches itself. On one host every
# local address reaches every other through the local table, whose rule comes first (pref 0):
# the test moves it behind its own rule for its duration. Rank 1 (rxe2, its usual GID) reaches
# rank 0's address, so only rank 0's add_procs refuses; rank 1 waits in MPI_Init until mpirun
# takes the job down.
set -u
prog=$1
shift
[ "$1" = -- ] && shift
here=$(dirname "$0")
case " ${RDMX_TEST_DEVICES:-} " in
  *rxe1*rxe2*) ;;
  *) echo "unreachable_peer: needs ci/softroce/run --devices 2 (RDMX_TEST_DEVICES='${RDMX_TEST_DEVICES:-}')"; exit 1 ;;
esac
addr=10.97.0.1
cleanup() {
  ip rule add pref 0 lookup local 2>/dev/null
  ip rule del pref 1000 lookup local 2>/dev/null
  ip rule del pref 100 from "$addr" to 10.99.1.0/24 unreachable 2>/dev/null
  ip addr del "$addr/24" dev veth0 2>/dev/null
}
trap cleanup EXIT
ip addr add "$addr/24" dev veth0 || exit 1
ip rule add pref 100 from "$addr" to 10.99.1.0/24 unreachable || exit 1
ip rule add pref 1000 lookup local || exit 1
ip rule del pref 0 || exit 1

# The RoCE v2 entry rxe made for the address (IPv4-mapped: ::ffff:10.97.0.1).
index=$(sh "$here/gid_of.sh" rxe1 "$addr")
[ -n "$index" ] || { echo "unreachable_peer: no RoCE v2 GID for $addr on rxe1 among the first 16"; exit 1; }
echo "unreachable_peer: rank 0 uses rxe1 GID index $index ($addr); ip route get 10.99.1.2 from $addr:"
ip route get 10.99.1.2 from "$addr" 2>&1

sh "$here/mpirun_expect.sh" --fails --within 60 \
  --match "mtl rdmx: process [^ ]+ on host [^ ]+ cannot reach process [^ ]+ on host [^ ]+: from host [^ ]+: the kernel has no route from our rxe1 [(]GID ${addr}[)] to the peer's rxe2 [(]GID 10[.]99[.]1[.]2, uid [0-9a-f]+[)]: connect[(][)] to its RoCE v2 port says" \
  -- "$@" -np 1 -x RDMX_DEVICE=rxe1 -x RDMX_GID_INDEX="$index" "$prog" \
        : -np 1 -x RDMX_DEVICE=rxe2 "$prog"
