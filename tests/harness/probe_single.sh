#!/bin/bash
# Runs inside the guest for single_device.sh: prints facts about the environment run promised,
# one per line, so the host can compare stdout byte for byte. $1 is the --rw dir.
set -u
rw=$1
echo "devices=$RDMX_TEST_DEVICES"
echo "ips=$RDMX_TEST_IPS"
echo "in_guest=$RDMX_IN_GUEST"
echo "ibv_devices=$(ibv_devices | awk 'NR > 2 { printf "%s ", $1 }')"
gid=$(cat "/sys/class/infiniband/$RDMX_TEST_DEVICES/ports/1/gids/$RDMX_TEST_GID_INDEX")
echo "gid_is_ipv4_mapped=$([[ $gid == 0000:0000:0000:0000:0000:ffff:0a63:* ]] && echo yes || echo "no ($gid)")"
echo "active_mtu=$(ibv_devinfo -d "$RDMX_TEST_DEVICES" | awk '/active_mtu/ { print $2 }')"
echo "cwd=$(pwd -P)"
echo "uid=$(id -u)"
echo "memlock=$(ulimit -l)"
echo "probe=${RDMX_HARNESS_PROBE-unset}"
echo "extra=${HARNESS_EXTRA-unset}"
echo "not_passed=${HARNESS_NOT_PASSED-unset}"
echo "lo=$(ip -o link show lo | grep -q 'UP' && echo up || echo down)"
echo "localhost=$(getent ahostsv4 localhost | awk 'NR == 1 { print $1 }')"
echo "hostname_resolves=$(getent hosts "$(hostname)" >/dev/null && echo yes || echo no)"
for m in /proc /sys /dev /dev/pts /dev/shm /tmp /run; do
  echo "mount $m=$(findmnt -n -o FSTYPE "$m")"
done
echo "stdin_is_null=$([[ $(readlink /proc/self/fd/0) == /dev/null ]] && echo yes || echo no)"
echo "stdout_tty=$([[ -t 1 ]] && echo yes || echo no)"
echo "written" >"$rw/from-guest.txt"
printf 'tail:\001\002\r\n\377no newline'
printf 'err 1\n' >&2
printf 'err 2\twith tab\n' >&2
exit 7
