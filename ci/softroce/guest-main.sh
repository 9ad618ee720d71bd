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
# tags rw0, rw1, ...), SOFTROCE_ENV (NAME=VALUE words), SOFTROCE_CMD; with --hosts 2 also
# SOFTROCE_HOST (this guest: 1 runs CMD, 2 serves ssh), SOFTROCE_HOSTS, SOFTROCE_SSHD_ROOT and
# SOFTROCE_LINK_TIMEOUT.
# shellcheck source=/dev/null
source "$R/config.sh" || fail "source config.sh"
readonly HOSTS=${SOFTROCE_HOSTS:-1} HOST=${SOFTROCE_HOST:-1}

stage rxe
if ((HOSTS > 1)); then
  softroce_setup 1 "$SOFTROCE_MTU" "$HOST" || fail "$SOFTROCE_ERR"
else
  softroce_setup "$SOFTROCE_DEVICES" "$SOFTROCE_MTU" || fail "$SOFTROCE_ERR"
fi
softroce_test_env
ulimit -l unlimited || fail "ulimit -l unlimited"

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

# --hosts 2: names for every host, ssh keys made for this boot by run (in $R/ssh), an sshd on
# the hosts that serve, and the client settings on all (Open MPI's launcher is plain ssh).
if ((HOSTS > 1)); then
  stage ssh
  names=() ips=()
  for ((h = 1; h <= HOSTS; h++)); do
    names+=("rdmx-host$h") ips+=("10.99.2.$h")
  done
  {
    printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n'
    for h in "${!names[@]}"; do printf '%s\t%s\n' "${ips[$h]}" "${names[$h]}"; done
  } >/etc/hosts || fail "write /etc/hosts"
  for h in "${names[@]}"; do echo "$h slots=2"; done >"$SR/hostfile" || fail "write hostfile"
  mkdir -p "$SR/ssh" || fail "mkdir $SR/ssh"
  install -m 0600 "$R/ssh/"* "$SR/ssh/" || fail "copy the ssh keys"
  # The whole client config: the guest's root is an overlay, this changes nothing on the host.
  cat >/etc/ssh/ssh_config <<EOF || fail "write /etc/ssh/ssh_config"
Host *
  IdentityFile $SR/ssh/id_ed25519
  UserKnownHostsFile $SR/ssh/known_hosts
  StrictHostKeyChecking yes
  BatchMode yes
  ConnectTimeout 10
  LogLevel ERROR
EOF
  if ((HOST > 1)); then
    grep -q '^sshd:' /etc/passwd ||
      echo 'sshd:x:101:65534::/run/sshd:/usr/sbin/nologin' >>/etc/passwd || fail "add user sshd"
    mkdir -m 0755 /run/sshd || fail "mkdir /run/sshd"
    cat >"$SR/ssh/sshd_config" <<EOF || fail "write sshd_config"
ListenAddress ${ips[$((HOST - 1))]}
HostKey $SR/ssh/host${HOST}_ed25519
AuthorizedKeysFile $SR/ssh/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
MaxStartups 64
PidFile /run/sshd.pid
EOF
    # Sessions inherit the limits of sshd (no PAM): registered memory needs ulimit -l unlimited.
    LD_LIBRARY_PATH=$SOFTROCE_SSHD_ROOT/usr/lib/x86_64-linux-gnu \
      "$SOFTROCE_SSHD_ROOT/usr/sbin/sshd" -f "$SR/ssh/sshd_config" -E "$SR/sshd.log" ||
      fail "sshd did not start: $(tail -n 3 "$SR/sshd.log" 2>/dev/null)"
    stage serve
    # run stops this guest when the first one is done.
    while :; do sleep 3600; done
  fi
  stage peers
  for ((h = 2; h <= HOSTS; h++)); do
    deadline=$((EPOCHSECONDS + SOFTROCE_LINK_TIMEOUT))
    until ssh "rdmx-host$h" true 2>"$SR/ssh.err"; do
      ((EPOCHSECONDS < deadline)) ||
        fail "rdmx-host$h (${ips[$((h - 1))]}) did not answer ssh over the link within $SOFTROCE_LINK_TIMEOUT s: $(head -n 1 "$SR/ssh.err")"
      sleep 1
    done
  done
  SOFTROCE_TEST_ENV+=("RDMX_TEST_HOSTS=${names[*]}" "RDMX_TEST_HOST_IPS=${ips[*]}"
    "RDMX_TEST_HOSTFILE=$SR/hostfile")
fi

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
