#!/bin/bash
# --hosts 2: two guests on a link. CMD runs on rdmx-host1, reaches rdmx-host2 by name over ssh,
# and RoCE packets cross the link (an RC ping-pong between the hosts' rxe0 devices moves the
# second host's receive counter). The harness's failures with two guests: the second host
# failing to boot, the link down, a CMD that hangs; bad arguments. None leaves a qemu behind.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The server side of ibv_rc_pingpong starts on host 2 first; the client retries its connection
# while the server comes up. rcvd_pkts is rxe's count of RoCE packets that host 2 received.
cat >"$T/cmd.sh" <<'CMD'
#!/bin/bash
c=/sys/class/infiniband/rxe0/ports/1/hw_counters/rcvd_pkts
echo "$(hostname) $(ssh rdmx-host2 hostname) $RDMX_TEST_HOSTS $RDMX_TEST_HOST_IPS $RDMX_TEST_DEVICES"
before=$(ssh rdmx-host2 cat $c)
ssh rdmx-host2 "timeout 60 ibv_rc_pingpong -d rxe0 -g $RDMX_TEST_GID_INDEX -n 100 >/tmp/srv.log 2>&1 &"
for i in $(seq 30); do
  timeout 60 ibv_rc_pingpong -d rxe0 -g "$RDMX_TEST_GID_INDEX" -n 100 rdmx-host2 >/tmp/cli.log 2>&1 && break
  sleep 1
done
grep -q 'iters in' /tmp/cli.log || { cat /tmp/cli.log >&2; exit 3; }
after=$(ssh rdmx-host2 cat $c)
((after - before >= 100)) && echo "packets crossed" || echo "rcvd_pkts $before -> $after"
CMD
chmod +x "$T/cmd.sh"
"$RUN" --hosts 2 --timeout 240 -- "$T/cmd.sh" </dev/null >"$T/stdout" 2>"$T/stderr"
expect_eq "exit status of a two-host CMD" "$?" 0
expect_file_eq "stdout of a two-host CMD" "$T/stdout" "rdmx-host1 rdmx-host2 rdmx-host1 rdmx-host2 10.99.2.1 10.99.2.2 rxe0
packets crossed
"
expect_file_eq "stderr of a two-host CMD" "$T/stderr" ""

# The second host fails to boot (injected at its rxe step): 125, naming the host and the step.
RDMX_SOFTROCE_FAULT=host2:rxe "$RUN" --hosts 2 -- echo never </dev/null >"$T/stdout" 2>"$T/stderr"
expect_eq "exit status when host 2 fails" "$?" 125
expect_file_eq "stdout when host 2 fails" "$T/stdout" ""
msg=$(cat "$T/stderr")
if [[ $msg =~ ^softroce:\ host\ rdmx-host2\ failed\ at\ rxe:\ injected\ .*console\ log:\ (/[^ ]+)$ ]]; then
  pass "message names host 2, the step and its log"
  if grep -q 'softroce-guest: FAILED step=rxe' "${BASH_REMATCH[1]}"; then
    pass "host 2's console log kept"
  else
    fail "console log ${BASH_REMATCH[1]} missing or without the failure"
  fi
  rm -f "${BASH_REMATCH[1]}"
else
  fail "message: $msg"
fi

# The link is down (host 1's packets go nowhere): host 1 gives up waiting for host 2's ssh.
RDMX_SOFTROCE_FAULT=link RDMX_SOFTROCE_LINK_TIMEOUT=20 "$RUN" --hosts 2 -- echo never \
  </dev/null >"$T/stdout" 2>"$T/stderr"
expect_eq "exit status with the link down" "$?" 125
msg=$(cat "$T/stderr")
if [[ $msg =~ ^softroce:\ guest\ failed\ at\ peers:\ rdmx-host2\ \(10.99.2.2\)\ did\ not\ answer\ ssh\ over\ the\ link\ within\ 20\ s.*console\ log:\ (/[^ ]+)\ (/[^ ]+)$ ]]; then
  pass "message names the link and keeps both hosts' logs"
  rm -f "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"
else
  fail "message: $msg"
fi

# A CMD that hangs on the second host: killed at --timeout, 124, both guests gone.
"$RUN" --hosts 2 --timeout 20 -- ssh rdmx-host2 sleep 1000 </dev/null >"$T/stdout" 2>"$T/stderr"
expect_eq "exit status of a hanging CMD" "$?" 124
expect_file_eq "stderr of a hanging CMD" "$T/stderr" "softroce: CMD exceeded --timeout 20 s and was killed
"

"$RUN" --hosts 3 -- true </dev/null >"$T/stdout" 2>"$T/stderr"
expect_eq "exit status of --hosts 3" "$?" 125
expect_eq "message for --hosts 3" "$(head -n 1 "$T/stderr")" "softroce: --hosts must be 1 or 2, not '3'"
"$RUN" --hosts 2 --devices 2 -- true </dev/null >"$T/stdout" 2>"$T/stderr"
expect_eq "exit status of --hosts 2 --devices 2" "$?" 125
expect_eq "message for --hosts 2 --devices 2" "$(head -n 1 "$T/stderr")" \
  "softroce: --hosts 2 gives each host one device (rxe0 on the link): drop --devices 2"
expect_nothing_left
finish
