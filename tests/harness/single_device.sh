#!/bin/bash
# One boot with --devices 1: CMD's status, byte-exact separate stdout/stderr, the promised
# environment (rxe0, GID, variables passed and withheld, mounts, localhost), --rw, and cleanup.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

mkdir -p "$T/rw" "$T/cwd"
cd "$T/cwd" || exit 1
start=$SECONDS
RDMX_HARNESS_PROBE="two  words" HARNESS_EXTRA=passed HARNESS_NOT_PASSED=leaked \
  "$RUN" --devices 1 --timeout 120 --rw "$T/rw" --env HARNESS_EXTRA -- \
  bash "$HERE/probe_single.sh" "$T/rw" </dev/null >"$T/stdout" 2>"$T/stderr"
rc=$?
echo "run took $((SECONDS - start)) s"

expect_eq "exit status of CMD" "$rc" 7
tail=$'tail:\001\002\r\n\377no newline'
expect_file_eq "stdout" "$T/stdout" "devices=rxe0
ips=10.99.0.1
in_guest=1
ibv_devices=rxe0 
gid_is_ipv4_mapped=yes
active_mtu=1024
cwd=$T/cwd
uid=0
memlock=unlimited
probe=two  words
extra=passed
not_passed=unset
lo=up
localhost=127.0.0.1
hostname_resolves=yes
mount /proc=proc
mount /sys=sysfs
mount /dev=devtmpfs
mount /dev/pts=devpts
mount /dev/shm=tmpfs
mount /tmp=tmpfs
mount /run=tmpfs
stdin_is_null=yes
stdout_tty=no
$tail"
expect_file_eq "stderr" "$T/stderr" $'err 1\nerr 2\twith tab\n'
expect_eq "file written under --rw" "$(cat "$T/rw/from-guest.txt" 2>&1)" written
expect_nothing_left
finish
