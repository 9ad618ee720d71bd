#!/bin/bash
# Stage 2 of the Soft-RoCE guest, run by the host's bash after switch_root (init copies it to
# /run/softroce; init has already mounted /dev/pts, /dev/shm, /tmp, set the hostname, brought lo
# up and bound the kernel's modules). Sets up rxe, runs CMD with its stdout and stderr on two
# virtio consoles, records CMD's status on the results export, and powers off.
#
# Channels (see run): /dev/console = ttyS0 = the console log file on the host; /dev/hvc0 = CMD's
# stdout; /dev/hvc1 = CMD's stderr; /run/softroce/results = read-write 9p export of the host's
# temp dir (config.sh in, stage/rc/timedout/failed out).
# SOFTROCE_* configuration comes from the sourced config.sh.
# shellcheck disable=SC2153
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
exec </dev/null >/dev/console 2>&1

readonly SR=/run/softroce
readonly R=$SR/results
step=start

stage() {
  local up
  step=$1
  echo "$step" >"$R/stage"
  read -r up _ </proc/uptime
  echo "softroce-guest: $step at ${up}s"
  # RDMX_SOFTROCE_FAULT=STEP makes the harness's own tests see a guest failure at STEP.
  [[ $step == "${SOFTROCE_FAULT:-}" ]] && fail "injected fault (RDMX_SOFTROCE_FAULT)"
  return 0
}
poweroff_now() {
  sync
  busybox poweroff -f
  sleep 60
}
fail() {
  echo "softroce-guest: FAILED step=$step: $*"
  echo "$step: $*" >"$R/failed"
  poweroff_now
}

# shellcheck source=ci/softroce/rxe-env.sh
source "$SR/rxe-env.sh" || fail "source rxe-env.sh"
# Written by run: SOFTROCE_{DEVICES,MTU,TIMEOUT,CWD,FAULT}, SOFTROCE_RW (dirs, exported as
# tags rw0, rw1, ...), SOFTROCE_ENV (NAME=VALUE words), SOFTROCE_CMD.
# shellcheck source=/dev/null
source "$R/config.sh" || fail "source config.sh"

stage rxe
softroce_setup "$SOFTROCE_DEVICES" "$SOFTROCE_MTU" || fail "$SOFTROCE_ERR"
softroce_test_env

stage paths
# /tmp (and /run, /dev/shm) are fresh tmpfs in the guest. A host path under them that CMD needs
# (the working directory of a build in /tmp, an absolute CMD or argument) gets its top-level
# entry back as an overlay of the host's copy, writable in RAM like the rest of the root.
declare -A exposed=()
expose() {
  local p=$1 base rest top n
  case $p in
    /tmp/*) base=/tmp ;;
    /run/*) base=/run ;;
    /dev/shm/*) base=/dev/shm ;;
    *) return 0 ;;
  esac
  rest=${p#"$base"/}
  top=$base/${rest%%/*}
  [[ -z ${exposed[$top]:-} && $top != "$SR" && -d $SR/lower$top ]] || return 0
  n=${#exposed[@]}
  mkdir -p "$SR/expose/$n/upper" "$SR/expose/$n/work" "$top" || fail "mkdir for $top"
  mount -t overlay -o "lowerdir=$SR/lower$top,upperdir=$SR/expose/$n/upper,workdir=$SR/expose/$n/work" \
    overlay "$top" || fail "overlay for $top"
  exposed[$top]=1
}
expose "$SOFTROCE_CWD"
for a in "${SOFTROCE_CMD[@]}"; do
  [[ $a == /* ]] && expose "$a"
done

stage rw
for ((i = 0; i < ${#SOFTROCE_RW[@]}; i++)); do
  d=${SOFTROCE_RW[$i]}
  mkdir -p "$d" || fail "mkdir $d"
  # cache=mmap: CMD may mmap(MAP_SHARED) files it writes there.
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=mmap "rw$i" "$d" ||
    fail "mount 9p rw$i on $d"
done
cd "$SOFTROCE_CWD" || fail "cd $SOFTROCE_CWD"

stage consoles
# The consoles are ttys: raw mode so \n is not turned into \r\n and nothing is echoed. CMD gets
# pipes, not the ttys (isatty() would change its buffering and colours); cat relays them, and
# virtio's hvc write path only returns once the host has taken the bytes.
# hvc resets termios on its last close: keep both open before setting the mode.
[[ -c /dev/hvc0 && -c /dev/hvc1 ]] || fail "/dev/hvc0 or /dev/hvc1 missing (virtio_console)"
exec 3>/dev/hvc0 4>/dev/hvc1 || fail "open /dev/hvc0 /dev/hvc1"
stty -F /dev/hvc0 raw -echo || fail "stty raw on /dev/hvc0"
stty -F /dev/hvc1 raw -echo || fail "stty raw on /dev/hvc1"
mkfifo "$SR/out" "$SR/err" || fail "mkfifo"
cat "$SR/out" >&3 &
opid=$!
cat "$SR/err" >&4 &
epid=$!

ulimit -l unlimited || fail "ulimit -l unlimited"
stage cmd
softroce_run_cmd "$SOFTROCE_TIMEOUT" env -i "${SOFTROCE_ENV[@]}" "${SOFTROCE_TEST_ENV[@]}" \
  "${SOFTROCE_CMD[@]}" </dev/null >"$SR/out" 2>"$SR/err"
rc=$SOFTROCE_RC
# Background processes CMD left behind would hold the pipes open.
kill -KILL -- "-$SOFTROCE_CMD_PGID" 2>/dev/null
for ((i = 0; i < 100; i++)); do
  kill -0 "$opid" 2>/dev/null || kill -0 "$epid" 2>/dev/null || break
  sleep 0.1
done
kill "$opid" "$epid" 2>/dev/null
# stty sets the mode with TCSADRAIN: returns once the consoles have sent everything.
stty -F /dev/hvc0 raw
stty -F /dev/hvc1 raw

stage finished
[[ $SOFTROCE_TIMED_OUT == 1 ]] && echo "$SOFTROCE_TIMEOUT" >"$R/timedout"
echo "$rc" >"$R/rc"
poweroff_now
