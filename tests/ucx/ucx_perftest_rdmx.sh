#!/bin/sh
# Guest test: ucx_perftest, UCX's own benchmark, over rdmx's UCT transports with the module
# preloaded: a server on the first RDMA device and a client on the second (the first again if
# there is one), on this host. Each case must finish in time and print its "Final:" line. Then
# a client whose SEG_SIZE differs from the server's must fail with the module's message.
# Usage: ucx_perftest_rdmx.sh LIBUCT_RDMX TL [CASE...]
#   CASE = test:size:iterations[:layout]
#   UCT tests (am_lat, am_bw, put_bw, put_lat, get) run on TL itself (-x TL, and -D layout when
#   given: short, bcopy or zcopy for the transport's AMs, puts and gets); the others are UCP's
#   (UCX_TLS=TL,self): tag matching, whose rendezvous moves data by get_zcopy, and UCP's put/get,
#   by the transport's puts and gets. A UCP case with layout "sleep" waits in ucp_worker_wait
#   (-E sleep: UCP_FEATURE_WAKEUP, which takes only a transport with send and receive events).
#   Over rdmx_rc a side that received 16 messages gives the other an eager ring, and its next
#   arming takes it back (a ring write makes no completion): with RDMX_VERBOSE=2 it says so once
#   the peer has answered, which tag_lat requires of each side (both keep progressing to the
#   end; in tag_bw the receiver may ask when the sender no longer progresses).
set -u
lib=$1 tl=$2
shift 2
set -- "$@"
devs=$(ls /sys/class/infiniband 2>/dev/null)
[ -n "$devs" ] || { echo "FAIL: no RDMA device in /sys/class/infiniband"; exit 1; }
d1=$(echo "$devs" | sed -n 1p):1
d2=$(echo "$devs" | sed -n 2p)
d2=${d2:-${d1%:1}}:1
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
port=$((20000 + $$ % 10000))
# Waits (up to 20 s) until a TCP socket listens on port $1: a fixed sleep let a client connect
# before a server slowed by other tests listened (seen: "connect() failed: Connection refused").
wait_listen() {
  hex=$(printf ':%04X ' "$1")
  i=0
  while [ $i -lt 200 ]; do
    grep -q "${hex}[0-9A-F:]* 0A " /proc/net/tcp /proc/net/tcp6 2>/dev/null && return 0
    sleep 0.1
    i=$((i + 1))
  done
  return 1
}
export LD_PRELOAD="$lib" UCX_WARN_UNUSED_ENV_VARS=n
for c in "$@"; do
  t=${c%%:*} rest=${c#*:}
  size=${rest%%:*} rest=${rest#*:}
  iters=${rest%%:*} layout='' waitmode='' verbose=''
  [ "$rest" = "$iters" ] || layout="-D ${rest#*:}"
  if [ "$layout" = "-D sleep" ]; then
    layout='' waitmode='-E sleep' verbose=RDMX_VERBOSE=2
  fi
  port=$((port + 1))
  if [ "$t" = am_lat ] || [ "$t" = am_bw ] || [ "$t" = put_bw ] || [ "$t" = put_lat ] ||
    [ "$t" = get ]; then
    server="ucx_perftest -p $port -d $d1 -x $tl"
    client="ucx_perftest 127.0.0.1 -p $port -d $d2 -x $tl $layout"
  else
    server="env UCX_TLS=$tl,self UCX_NET_DEVICES=$d1 $verbose ucx_perftest -p $port $waitmode"
    client="env UCX_TLS=$tl,self UCX_NET_DEVICES=$d2 $verbose ucx_perftest 127.0.0.1 -p $port $waitmode"
  fi
  start=$(date +%s)
  # $server and $client are command lines: split on purpose (no element has a space).
  # shellcheck disable=SC2086
  timeout -k 5 60 $server >"$dir/server" 2>&1 &
  spid=$!
  wait_listen "$port"
  # shellcheck disable=SC2086
  timeout -k 5 60 $client -t "$t" -s "$size" -n "$iters" -w 2 >"$dir/client" 2>&1
  crc=$?
  wait $spid
  src=$?
  line=$(grep '^Final:' "$dir/client")
  echo "$tl $t ${size} B x $iters $layout$waitmode ($(($(date +%s) - start)) s): $line"
  if [ $crc -ne 0 ] || [ $src -ne 0 ] || [ -z "$line" ]; then
    echo "--- client (exit $crc):"; cat "$dir/client"
    echo "--- server (exit $src):"; cat "$dir/server"
    echo "FAIL: $tl $t $size"
    exit 1
  fi
  if [ -n "$waitmode" ] && [ "$tl" = rdmx_rc ] && [ "$t" = tag_lat ]; then
    for side in server client; do
      if ! grep -q '^rdmx: eager ring ' "$dir/$side" ||
        ! grep -q '^rdmx: every eager ring taken back' "$dir/$side"; then
        echo "--- $side:"; grep '^rdmx: ' "$dir/$side" | head -20
        echo "FAIL: $tl $t $size: the $side did not give an eager ring and take it back to sleep"
        exit 1
      fi
    done
    echo "  both sides gave an eager ring, and took it back to sleep"
  fi
done
# Peers with different SEG_SIZEs (an AM of one would not fit the other's receives) must not
# reach each other: the client fails, and the module says which setting to make equal.
TL=$(echo "$tl" | sed 's/^rdmx_//' | tr '[:lower:]' '[:upper:]')
port=$((port + 1))
timeout -k 5 30 env UCX_TLS="$tl,self" UCX_NET_DEVICES="$d1" "UCX_RDMX_${TL}_SEG_SIZE=8k" \
  ucx_perftest -p "$port" >"$dir/server" 2>&1 &
spid=$!
wait_listen "$port"
timeout -k 5 30 env UCX_TLS="$tl,self" UCX_NET_DEVICES="$d2" ucx_perftest 127.0.0.1 -p "$port" \
  -t tag_lat -s 8 -n 10 >"$dir/client" 2>&1
crc=$?
kill "$spid" 2>/dev/null
wait "$spid" 2>/dev/null
want="Set the same UCX_RDMX_${TL}_SEG_SIZE in every process"
if [ $crc -eq 0 ] || [ $crc -eq 124 ] || ! grep -q "$want" "$dir/client" "$dir/server"; then
  echo "--- client (exit $crc):"; cat "$dir/client"
  echo "--- server:"; cat "$dir/server"
  echo "FAIL: $tl with SEG_SIZE 8k against the default: expected a failure naming the setting"
  exit 1
fi
grep -h "$want" "$dir/client" "$dir/server" | head -n 1
echo "PASS: $tl, $# cases, and a SEG_SIZE mismatch refused"
