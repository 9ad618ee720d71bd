# ci/bench-lib.sh: what ci/bench-eager, ci/bench-rndv, ci/bench-mpi, ci/bench-local and ci/demo
# share (sourced).
#   figures:  median, valid, ratio, human, verdict, each_round, over_rounds
#   guest:    bench_step, bench_perftest (they read the caller's $work, $port, $sdev, $cdev,
#             $gid and $sip: bash functions see the locals of the function that calls them);
#             mpi_stack_args STACK DEV (mpirun arguments of one MPI stack, into $sargs)
#   host:     bench_build BUILD TOP TARGET... (packages, configure without tests, build)
# shellcheck shell=bash disable=SC2154 # the caller's locals, see above

median() { # numbers on stdin (n/a and empty lines ignored) -> median or n/a
  grep -E '^[0-9.]+([eE][-+]?[0-9]+)?$' | sort -g | awk '{a[NR]=$1} END {
    if (NR == 0) { print "n/a"; exit }
    if (NR % 2) print a[(NR + 1) / 2]; else printf "%.2f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

valid() { # a positive finite number, else n/a
  awk -v x="${1:-}" 'BEGIN { if (x ~ /^[0-9.]+([eE][-+]?[0-9]+)?$/ && x + 0 > 0) print x + 0; else print "n/a" }'
}

ratio() { # a b -> a/b with 2 decimals, or n/a
  awk -v a="$1" -v b="$2" 'BEGIN {
    num = "^[0-9.]+([eE][-+]?[0-9]+)?$"
    if (a ~ num && b ~ num && b + 0 > 0) printf "%.2f", a / b; else print "n/a" }'
}

human() { # bytes -> 64K, 1M, 8193
  awk -v n="$1" 'BEGIN {
    if (n >= 1048576 && n % 1048576 == 0) printf "%dM", n / 1048576
    else if (n >= 1024 && n % 1024 == 0) printf "%dK", n / 1024
    else print n }'
}

# fn args... -> `fn args... ROUND` for rounds 1..$rounds (the caller's), one line each.
each_round() {
  local i
  for i in $(seq 1 "$rounds"); do printf '%s\n' "$("$@" "$i")"; done
}

# fn args... -> the median over the rounds of `fn args... ROUND`.
over_rounds() { each_round "$@" | median; }

verdict() { # ratio op limit -> PASS/FAIL/n/a
  awk -v r="$1" -v op="$2" -v l="$3" 'BEGIN {
    if (r !~ /^[0-9.]+$/) { print "n/a"; exit }
    ok = (op == "<=") ? (r + 0 <= l + 0) : (r + 0 >= l + 0); print ok ? "PASS" : "FAIL" }'
}

# name seconds cmd... -> output in $work/name.out, .err; prints one status line; CMD's status.
bench_step() {
  local name=$1 secs=$2; shift 2
  local t0=$SECONDS
  timeout -k 5 "$secs" "$@" >"$work/$name.out" 2>"$work/$name.err"
  local rc=$?
  local what=ok
  [ $rc -eq 124 ] && what="TIMED OUT after ${secs}s"
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && what="failed (exit $rc)"
  echo "   step $name: $what ($((SECONDS - t0)) s)"
  if [ $rc -ne 0 ]; then
    grep -v LAST_WQE_REACHED "$work/$name.err" | tail -n 5 | sed 's/^/     | /'
  fi
  return $rc
}

# name seconds tool args...: a perftest server on $sdev in the background, the client on $cdev
# against $sip, both on a fresh port above $port; the client's output in $work/name.out.
bench_perftest() {
  local name=$1 secs=$2 tool=$3; shift 3
  port=$((port + 1))
  timeout -k 5 "$secs" "$tool" -d "$sdev" -x "$gid" -p "$port" -F "$@" \
    >"$work/$name.srv" 2>&1 &
  local spid=$! _
  for _ in $(seq 1 100); do # until it listens, at most 10 s
    ss -ltn 2>/dev/null | grep -q ":$port " && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.1
  done
  bench_step "$name" "$secs" "$tool" -d "$cdev" -x "$gid" -p "$port" -F "$@" "$sip"
  local rc=$?
  kill "$spid" 2>/dev/null
  wait "$spid" 2>/dev/null
  return $rc
}

# stack dev -> sargs: the mpirun arguments of one MPI stack, the same programs over each:
#   rdmx-rc / rdmx-ud  pml cm + the rdmx MTL in RC / UD mode
#   ucx                pml ucx with the settings that work on rxe (shared/softroce.md)
#   ucx-ud             the same over UCX's ud_verbs alone
#   uct-rc / uct-ud    pml ucx over rdmx's UCT transports rdmx_rc / rdmx_ud (plugin/ucx)
#   tcp                pml ob1 + btl tcp
# shellcheck disable=SC2034,SC2054 # sargs is the caller's; the commas are MCA lists
mpi_stack_args() {
  case $1 in
    # The device's channels: shared memory off, or these ranks (all on one node) would not use
    # the device at all.
    rdmx-rc) sargs=(--mca pml cm --mca mtl rdmx --mca mtl_rdmx_transport rc --mca mtl_rdmx_shm 0) ;;
    rdmx-ud) sargs=(--mca pml cm --mca mtl rdmx --mca mtl_rdmx_transport ud --mca mtl_rdmx_shm 0) ;;
    # Node-local stacks (ci/bench-local, ci/demo), each with its defaults; UCX's UD wire-up
    # (its defaults open ud_verbs on rxe too) dies without the DGID check off (softroce.md).
    rdmx-shm) sargs=(--mca pml cm --mca mtl rdmx) ;;
    ucx-node) sargs=(--mca pml ucx -x UCX_UD_VERBS_ETH_DGID_CHECK=n) ;;
    vader) sargs=(--mca pml ob1 --mca btl self,vader) ;;
    ucx) sargs=(--mca pml ucx -x UCX_TLS=self,rc_verbs,ud_verbs -x "UCX_NET_DEVICES=$2:1"
                -x UCX_UD_VERBS_ETH_DGID_CHECK=n) ;;
    ucx-put) mpi_stack_args ucx "$2"; sargs+=(-x UCX_RNDV_SCHEME=put_zcopy) ;;
    ucx-ud) sargs=(--mca pml ucx -x UCX_TLS=self,ud_verbs -x "UCX_NET_DEVICES=$2:1"
                   -x UCX_UD_VERBS_ETH_DGID_CHECK=n) ;;
    # pml ucx over rdmx's UCT transports, loaded by the Open MPI hook in $bench_hook_dir
    # (plugin/ucx/README.md, "Loading"); the caller sets bench_ompi_dir, Open MPI's own folder.
    uct-rc | uct-ud)
      sargs=(--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any
             --mca mca_base_component_path "$bench_ompi_dir:$bench_hook_dir"
             -x "UCX_TLS=rdmx_${1#uct-},self" -x "UCX_NET_DEVICES=$2:1") ;;
    tcp) sargs=(--mca pml ob1 --mca btl self,tcp) ;;
  esac
}

# The guest kernel arguments of the benchmarks' --tsc: clock_gettime through the vDSO instead of
# a system call reading the emulated hpet (the guest's own choice: TCG's TSCs look unsynchronized).
# shellcheck disable=SC2034 # used by the scripts that source this file
bench_tsc_append="clocksource=tsc tsc=reliable"

# build top target...: installs what is missing, configures BUILD (no tests) once, builds. An
# existing BUILD is regenerated first: a target added to the tree since would be unknown to it.
bench_build() {
  local build=$1 top=$2
  shift 2
  # shellcheck source=ci/deps.sh
  . "$top/ci/deps.sh"
  rdmx_install_deps || return 2
  echo "== build $* in $build"
  if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S "$top" -B "$build" -DRDMX_BUILD_TESTS=OFF >"$build.configure.log" 2>&1 ||
      { cat "$build.configure.log"; return 2; }
  else
    cmake "$build" >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; return 2; }
  fi
  timeout 3600 cmake --build "$build" -j"$(nproc)" --target "$@" 2>&1 | tail -n 3
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "build of $* failed" >&2; return 2; }
}
