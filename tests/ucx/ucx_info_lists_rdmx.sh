#!/bin/sh
# Guest test: `ucx_info -d` with libuct_rdmx.so preloaded lists component rdmx with one memory
# domain rdmx_<ibdev> per RDMA device and its transports rdmx_rc and rdmx_ud on <ibdev>:1, and
# `ucx_info -c` their settings; and UCP, asked for error handling (UCP_ERR_HANDLING_MODE_PEER,
# which needs UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE), puts each in an endpoint to another node;
# and UCP's put/get goes by their puts and gets; am_zcopy is offered over rdmx_rc alone.
# Usage: ucx_info_lists_rdmx.sh LIBUCT_RDMX
set -u
lib=$1
out=$(LD_PRELOAD=$lib ucx_info -d 2>&1) || { echo "$out"; echo "FAIL: ucx_info -d failed"; exit 1; }
n=0
for d in /sys/class/infiniband/*; do
  [ -e "$d" ] || continue
  dev=${d##*/}
  n=$((n + 1))
  # The MD's header line and its attributes; its component is the line after the header.
  lines=$(printf '%s\n' "$out" | grep -A4 -x "# Memory domain: rdmx_$dev")
  printf '%s\n' "$lines"
  printf '%s\n' "$lines" | sed -n 2p | grep -qx '#     Component: rdmx' ||
    { echo "$out"; echo "FAIL: no memory domain rdmx_$dev of component rdmx"; exit 1; }
  # Its transports, one per active port (rxe has one): "Transport: rdmx_rc" then its device.
  for tl in rdmx_rc rdmx_ud; do
    printf '%s\n' "$out" | grep -A1 -x "#      Transport: $tl" | grep -qx "#         Device: $dev:1" ||
      { echo "$out"; echo "FAIL: no transport $tl on $dev:1"; exit 1; }
  done
done
# am_zcopy on rdmx_rc only (rdmx_tag_send_zcopy sends over RC; UD keeps a copy for resends), up to
# the eager size, header included (UCT's max_zcopy). Each transport's block runs from its header to
# the next.
for tl in rdmx_rc rdmx_ud; do
  zc=$(printf '%s\n' "$out" | sed -n "/^#      Transport: $tl\$/,/^#      Transport: /p" |
    grep -E '^# +am_zcopy: ' | head -n 1)
  if [ "$tl" = rdmx_rc ]; then
    printf '%s\n' "$zc" | grep -qE 'am_zcopy: <= 8K, up to 1 iov' ||
      { echo "$out"; echo "FAIL: rdmx_rc lists no am_zcopy up to 8 KiB (got '$zc')"; exit 1; }
    echo "$tl:$zc"
  elif [ -n "$zc" ]; then
    echo "$out"; echo "FAIL: rdmx_ud lists am_zcopy ('$zc')"; exit 1
  fi
done
# Their settings, in UCX's configuration listing.
conf=$(LD_PRELOAD=$lib ucx_info -c -f 2>&1)
for v in UCX_RDMX_RC_SEG_SIZE UCX_RDMX_RC_RX_QUEUE_LEN UCX_RDMX_UD_TX_QUEUE_LEN; do
  printf "%s\n" "$conf" | grep "^$v=" || { echo "FAIL: ucx_info -c does not list $v"; exit 1; }
done
[ "$n" -gt 0 ] || { echo "FAIL: no RDMA device in /sys/class/infiniband"; exit 1; }
for tl in rdmx_rc rdmx_ud; do
  ep=$(LD_PRELOAD=$lib UCX_TLS=$tl,self ucx_info -u te -e -P inter 2>&1)
  printf '%s\n' "$ep" | grep -E "^#.*lane\[" | grep -q "$tl/" ||
    { echo "$ep"; echo "FAIL: an endpoint with error handling has no $tl lane"; exit 1; }
  printf '%s\n' "$ep" | grep -E "^#.*lane\[0\]"
done
# UCP's put/get API runs on each natively (an RMA lane needs PUT_SHORT, PUT_BCOPY, GET_BCOPY and
# PENDING: ucp/wireup/select.c), not emulated in AMs (rma_am). UCP says which in its ep_cfg line.
for tl in rdmx_rc rdmx_ud; do
  want="rma($tl/"
  ep=$(LD_PRELOAD=$lib UCX_LOG_LEVEL=info UCX_TLS=$tl,self ucx_info -u r -e -P inter 2>&1)
  printf '%s\n' "$ep" | grep -F "ep_cfg[" | grep -qF "$want" ||
    { echo "$ep"; echo "FAIL: UCP's put/get over $tl is not $want...)"; exit 1; }
  printf '%s\n' "$ep" | grep -F "ep_cfg[" | head -n 1
done
# The module reports its failures (device, registration, version) on lines of its own.
if printf '%s\n' "$out" | grep '^rdmx: '; then
  echo "FAIL: the module reported an error"
  exit 1
fi
echo "PASS: $n rdmx memory domain(s) listed"
