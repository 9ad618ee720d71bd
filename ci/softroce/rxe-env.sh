# shellcheck shell=bash
# Functions here return results in SOFTROCE_* globals that only their callers read.
# shellcheck disable=SC2034
# Soft-RoCE device setup and the CMD runner, shared by the guest (guest-main.sh) and by native
# mode (run, on a host that can load rdma_rxe itself). Sourced, never executed. Needs bash >= 5.1
# (wait -n -p).
#
# Device layouts (the addresses exist only where rxe runs: inside the guest, or on the native host):
#   --devices 1: rxe0 on dummy0 10.99.0.1/24; both peers share the device, rxe loops back inside.
#   --devices 2: rxe1 on veth0 10.99.1.1/24 and rxe2 on veth1 10.99.1.2/24, both veth ends in the
#                main namespace (rxe on a netdev in another namespace fails on 6.1: its UDP 4791
#                socket lives in the initial namespace). accept_local=1 and rp_filter=0 or the
#                QP never reaches RTR.
#   --hosts 2:   host N (1 or 2) has rxe0 on eth0 10.99.2.N/24, a virtio NIC whose other end is
#                the other guest's: RoCE packets cross a (qemu) link between two kernels.
#   --mtu 4096:  netdev MTU 9000, so active_mtu becomes 4096 (1024 otherwise).

# The GID table has 1024 entries per port and reading all of them took 36 s under TCG; the
# IPv4-mapped GID is always among the first few. (Not readonly: this file may be sourced twice.)
SOFTROCE_GID_SCAN=16
SOFTROCE_V4_PREFIX="0000:0000:0000:0000:0000:ffff:"

SOFTROCE_ERR=""

softroce_err() { SOFTROCE_ERR="$*"; return 1; }

# Reads one sysfs line into the variable named $1 without starting a process.
softroce_read() {
  local -n _out=$1
  _out=""
  [[ -r $2 ]] || return 1
  IFS= read -r _out <"$2" 2>/dev/null
  [[ -n $_out ]]
}

# Prints "INDEX IPV4" for the first IPv4-mapped RoCE v2 GID of port 1 of $1, retrying for up to
# SOFTROCE_GID_WAIT seconds because the GID appears asynchronously after the address and the link
# come up (usually within 0.2 s; a guest on a busy host can take much longer).
SOFTROCE_GID_WAIT=30
softroce_find_gid() {
  local dev=$1 base=/sys/class/infiniband/$1/ports/1 deadline i gid type hex
  deadline=$((EPOCHSECONDS + SOFTROCE_GID_WAIT))
  while ((EPOCHSECONDS <= deadline)); do
    for ((i = 0; i < SOFTROCE_GID_SCAN; i++)); do
      softroce_read gid "$base/gids/$i" || continue
      [[ $gid == "$SOFTROCE_V4_PREFIX"* ]] || continue
      if softroce_read type "$base/gid_attrs/types/$i" && [[ $type != "RoCE v2" ]]; then
        continue
      fi
      hex=${gid#"$SOFTROCE_V4_PREFIX"}
      hex=${hex//:/}
      printf '%d %d.%d.%d.%d\n' "$i" $((16#${hex:0:2})) $((16#${hex:2:2})) \
        $((16#${hex:4:2})) $((16#${hex:6:2}))
      return 0
    done
    sleep 0.05
  done
  softroce_err "no IPv4-mapped RoCE v2 GID among the first $SOFTROCE_GID_SCAN of $dev"
}

softroce_sysctl() { # name value
  local path=/proc/sys/${1//.//}
  echo "$2" >"$path" 2>/dev/null || softroce_err "sysctl $1=$2 failed"
}

# softroce_setup DEVICES MTU [HOST]: loads the modules, creates the netdevs and rxe devices (or
# reuses them when a native host already has them), and fills SOFTROCE_DEVS / SOFTROCE_IPS /
# SOFTROCE_GID_INDEX. HOST (1 or 2): the --hosts 2 layout, one device on the link's eth0. Every
# process costs ~35 ms under TCG, so the netdev work is one `ip -batch` and the rxe links one
# `rdma -b -`.
softroce_setup() {
  local ndevices=$1 mtu=$2 host=${3:-} netmtu netdevs=() addrs=() ip_cmds=() rdma_cmds=() i n cur
  local ready=1
  case $mtu in
    1024) netmtu=1500 ;;
    4096) netmtu=9000 ;;
    *) softroce_err "bad mtu $mtu" || return ;;
  esac
  if [[ -n $host ]]; then
    SOFTROCE_DEVS=(rxe0) netdevs=(eth0) addrs=("10.99.2.$host/24")
  elif [[ $ndevices == 1 ]]; then
    SOFTROCE_DEVS=(rxe0) netdevs=(dummy0) addrs=(10.99.0.1/24)
  else
    SOFTROCE_DEVS=(rxe1 rxe2) netdevs=(veth0 veth1) addrs=(10.99.1.1/24 10.99.1.2/24)
  fi
  for i in "${!SOFTROCE_DEVS[@]}"; do
    softroce_read cur "/sys/class/net/${netdevs[$i]}/mtu" && [[ $cur == "$netmtu" ]] &&
      [[ -e /sys/class/infiniband/${SOFTROCE_DEVS[$i]} ]] || ready=0
  done
  if ((!ready)); then
    if [[ -n $host ]]; then
      # eth0 appears while virtio_net probes the NIC, before modprobe returns.
      modprobe -a virtio_net rdma_rxe ib_uverbs rdma_ucm || softroce_err "modprobe virtio_net rdma_rxe ib_uverbs rdma_ucm" || return
      [[ -e /sys/class/net/eth0 ]] || softroce_err "no eth0 after modprobe virtio_net (the link NIC)" || return
    elif [[ $ndevices == 1 ]]; then
      modprobe -a rdma_rxe ib_uverbs rdma_ucm dummy || softroce_err "modprobe rdma_rxe ib_uverbs rdma_ucm dummy" || return
      [[ -e /sys/class/net/dummy0 ]] || ip_cmds+=("link add dummy0 type dummy")
    else
      modprobe -a rdma_rxe ib_uverbs rdma_ucm veth || softroce_err "modprobe rdma_rxe ib_uverbs rdma_ucm veth" || return
      [[ -e /sys/class/net/veth0 ]] || ip_cmds+=("link add veth0 type veth peer name veth1")
    fi
    for i in "${!netdevs[@]}"; do
      n=${netdevs[$i]}
      ip_cmds+=("link set $n mtu $netmtu" "addr replace ${addrs[$i]} dev $n" "link set $n up")
      [[ -e /sys/class/infiniband/${SOFTROCE_DEVS[$i]} ]] ||
        rdma_cmds+=("link add ${SOFTROCE_DEVS[$i]} type rxe netdev $n")
    done
    printf '%s\n' "${ip_cmds[@]}" | ip -batch - ||
      softroce_err "ip -batch failed: ${ip_cmds[*]}" || return
  fi
  if [[ $ndevices == 2 ]]; then
    for i in all default veth0 veth1; do
      softroce_sysctl "net.ipv4.conf.$i.accept_local" 1 || return
      softroce_sysctl "net.ipv4.conf.$i.rp_filter" 0 || return
    done
  fi
  if ((${#rdma_cmds[@]})); then
    printf '%s\n' "${rdma_cmds[@]}" | rdma -b - ||
      softroce_err "rdma -b failed: ${rdma_cmds[*]}" || return
  fi
  softroce_describe_devices "${SOFTROCE_DEVS[@]}"
}

# Fills SOFTROCE_IPS and SOFTROCE_GID_INDEX for the devices named in the arguments.
softroce_describe_devices() {
  local dev found idx ip
  SOFTROCE_DEVS=("$@")
  SOFTROCE_IPS=()
  SOFTROCE_GID_INDEX=""
  for dev in "$@"; do
    found=$(softroce_find_gid "$dev") || softroce_err "no IPv4 RoCE v2 GID on $dev" || return
    read -r idx ip <<<"$found"
    if [[ -n $SOFTROCE_GID_INDEX && $idx != "$SOFTROCE_GID_INDEX" ]]; then
      softroce_err "GID index differs between devices ($SOFTROCE_GID_INDEX vs $idx on $dev)"
      return
    fi
    SOFTROCE_GID_INDEX=$idx
    SOFTROCE_IPS+=("$ip")
  done
}

# The variables every CMD sees, as NAME=VALUE words for env(1).
softroce_test_env() {
  SOFTROCE_TEST_ENV=(
    "RDMX_TEST_DEVICES=${SOFTROCE_DEVS[*]}"
    "RDMX_TEST_GID_INDEX=$SOFTROCE_GID_INDEX"
    "RDMX_TEST_IPS=${SOFTROCE_IPS[*]}"
    "RDMX_IN_GUEST=1"
  )
}

# softroce_run_cmd TIMEOUT CMD...: runs CMD in its own session (so that the whole process tree can
# be killed) and waits at most TIMEOUT seconds. Sets SOFTROCE_RC to CMD's status, or to 124 with
# SOFTROCE_TIMED_OUT=1 when the watchdog had to kill it (TERM, then KILL 10 s later).
# Redirections of the caller apply to CMD.
softroce_run_cmd() {
  local limit=$1 cpid spid done_pid i
  shift
  SOFTROCE_TIMED_OUT=0
  setsid "$@" &
  cpid=$!
  SOFTROCE_CMD_PGID=$cpid
  sleep "$limit" >/dev/null 2>&1 &
  spid=$!
  while :; do
    done_pid=""
    wait -n -p done_pid "$cpid" "$spid"
    SOFTROCE_RC=$?
    [[ ${done_pid:-} == "$cpid" || ${done_pid:-} == "$spid" ]] && break
    # Interrupted by a trapped signal (native mode): the trap decides; keep waiting otherwise.
  done
  if [[ ${done_pid:-} == "$spid" ]]; then
    SOFTROCE_TIMED_OUT=1
    kill -TERM -- "-$cpid" 2>/dev/null
    for ((i = 0; i < 100; i++)); do
      kill -0 "$cpid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL -- "-$cpid" 2>/dev/null
    wait "$cpid" 2>/dev/null
    SOFTROCE_RC=124
  else
    kill "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null
  fi
  return 0
}
