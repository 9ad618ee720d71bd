#!/bin/bash
# Runs inside the guest for device_pair.sh: the two rxe devices, their GIDs and MTU, an RC
# ping-pong from rxe1 to rxe2 whose packets must cross the veth pair, and run's native mode
# (nested: the guest can load rdma_rxe, so run must not start another guest).
set -u
echo "devices=$RDMX_TEST_DEVICES"
echo "ips=$RDMX_TEST_IPS"
echo "ibv_devices=$(ibv_devices | awk 'NR > 2 { printf "%s ", $1 }')"
for dev in $RDMX_TEST_DEVICES; do
  gid=$(cat "/sys/class/infiniband/$dev/ports/1/gids/$RDMX_TEST_GID_INDEX")
  hex=${gid#0000:0000:0000:0000:0000:ffff:}
  hex=${hex//:/}
  echo "gid $dev=::ffff:$((16#${hex:0:2})).$((16#${hex:2:2})).$((16#${hex:4:2})).$((16#${hex:6:2}))"
  echo "active_mtu $dev=$(ibv_devinfo -d "$dev" | awk '/active_mtu/ { print $2 }')"
done
echo "netdev_mtu=$(cat /sys/class/net/veth0/mtu) $(cat /sys/class/net/veth1/mtu)"

rx_before=$(cat /sys/class/net/veth1/statistics/rx_packets)
gidx=$RDMX_TEST_GID_INDEX
timeout 60 ibv_rc_pingpong -d rxe1 -g "$gidx" -m 4096 -n 200 >"$TMPDIR_GUEST/server.log" 2>&1 &
server=$!
client_rc=1
# The client fails at once if the server's TCP port is not listening yet: retry briefly.
for _ in $(seq 40); do
  timeout 60 ibv_rc_pingpong -d rxe2 -g "$gidx" -m 4096 -n 200 10.99.1.1 >"$TMPDIR_GUEST/client.log" 2>&1
  client_rc=$?
  grep -q "Couldn't connect" "$TMPDIR_GUEST/client.log" || break
  sleep 0.25
done
wait "$server"
server_rc=$?
echo "pingpong client=$client_rc server=$server_rc"
if ((client_rc || server_rc)); then
  cat "$TMPDIR_GUEST/server.log" "$TMPDIR_GUEST/client.log" >&2
fi
rx_after=$(cat /sys/class/net/veth1/statistics/rx_packets)
# 200 iterations each way: at least that many RoCE packets arrived on veth1.
echo "crossed_veth=$( ((rx_after - rx_before >= 200)) && echo yes || echo "no ($((rx_after - rx_before)))")"

# shellcheck disable=SC2016 # expanded by the inner sh
echo "native=$("$HARNESS_RUN" --devices 2 --mtu 4096 -- sh -c 'echo "$RDMX_TEST_DEVICES|$RDMX_TEST_IPS|$RDMX_IN_GUEST"')"
"$HARNESS_RUN" --devices 2 -- sh -c 'exit 5'
echo "native_rc=$?"
