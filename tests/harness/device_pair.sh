#!/bin/bash
# One boot with --devices 2 --mtu 4096: rxe1/rxe2 on the veth pair, IPv4-mapped GIDs, active MTU
# 4096, an RC ping-pong across the link, CMD status 0, and run's native mode inside the guest.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start=$SECONDS
TMPDIR_GUEST=/tmp HARNESS_RUN=$RUN "$RUN" --devices 2 --mtu 4096 --timeout 180 \
  --env TMPDIR_GUEST --env HARNESS_RUN -- bash "$HERE/probe_pair.sh" </dev/null >"$T/stdout" 2>"$T/stderr"
rc=$?
echo "run took $((SECONDS - start)) s"

expect_eq "exit status of CMD" "$rc" 0
expect_file_eq "stdout" "$T/stdout" "devices=rxe1 rxe2
ips=10.99.1.1 10.99.1.2
ibv_devices=rxe1 rxe2 
gid rxe1=::ffff:10.99.1.1
active_mtu rxe1=4096
gid rxe2=::ffff:10.99.1.2
active_mtu rxe2=4096
netdev_mtu=9000 9000
pingpong client=0 server=0
crossed_veth=yes
native=rxe1 rxe2|10.99.1.1 10.99.1.2|1
native_rc=5
"
expect_file_eq "stderr" "$T/stderr" ""
expect_nothing_left
finish
