#!/usr/bin/env bash
# ci/demo's guest half: runs inside ONE ci/softroce/run boot (or natively), every benchmark over
# every stack, raw outputs into OUT/raw, one progress line per step on stdout.
#   guest.sh OUT BUILD [--quick]
# Stacks (the same programs, bench/osu, over each):
#   rdmx-rc  --mca pml cm --mca mtl rdmx, mtl_rdmx_transport rc
#   rdmx-ud  the same with mtl_rdmx_transport ud
#   ucx      --mca pml ucx with the UCX settings that work on rxe (shared/softroce.md)
#   tcp      --mca pml ob1 --mca btl self,tcp
# and for osu_latency and osu_bw, pml ucx over rdmx's UCT transports (plugin/ucx, loaded by its
# Open MPI hook) beside UCX's own of the same kind, when the build has them:
#   uct-rc   UCX_TLS=rdmx_rc,self     (beside ucx: rc_verbs)
#   uct-ud   UCX_TLS=rdmx_ud,self     beside ucx-ud: UCX_TLS=self,ud_verbs
# (rdmx with shared memory off: every rank is on this one node), and, all ranks on one node with
# each stack's defaults:
#   rdmx-shm  --mca pml cm --mca mtl rdmx (node-local peers through shared memory)
#   ucx-node  --mca pml ucx (UCX's defaults: its shared-memory transports)
#   vader     --mca pml ob1 --mca btl self,vader
# with hpcc at 4 ranks (full mode).
# plus perftest (ib_send_lat, ib_write_bw) on the same device, and the footprint runs (np 2..16).
# Every step is bounded (timeout, and the programs' own per-size watchdog); a stack that fails
# at a size leaves `fail` there and the next step runs. A run that dies mid-sweep is restarted
# from the size after the one it died at (at most twice).
set -uo pipefail
# shellcheck source=ci/bench-lib.sh
. "$(dirname "$0")/../bench-lib.sh"
out=$1 build=$2 quick=0
[ "${3:-}" = --quick ] && quick=1
raw=$out/raw
mkdir -p "$raw"
read -r -a devs <<<"${RDMX_TEST_DEVICES:-rxe0}"
read -r -a ips <<<"${RDMX_TEST_IPS:-127.0.0.1}"
dev=${devs[0]} ip=${ips[0]} gid=${RDMX_TEST_GID_INDEX:-1}
osu=$build/bench/osu
compdir=$(ompi_info --parsable --path pkglibdir 2>/dev/null | sed -n 's/^path:pkglibdir://p')
[ -n "$compdir" ] || compdir=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
export OMPI_MCA_mca_base_component_path=$compdir:$build/plugin/ompi
# shellcheck disable=SC2034 # read by mpi_stack_args (bench-lib.sh)
bench_ompi_dir=$compdir bench_hook_dir=$build/plugin/ucx/hook
export RDMX_STATS=1 # the MTL prints its rdmx_stats_t at finalize when it knows this variable

# ---- what runs --------------------------------------------------------------------------------
stacks=(rdmx-rc rdmx-ud ucx tcp)
local_stacks=(rdmx-shm ucx-node vader)
uct_stacks=(uct-rc ucx-ud uct-ud) uct_benches=(osu_latency osu_bw)
# Without the UCX source at build time (ci/deps.sh fetches it) there is no module and no hook.
[ -f "$bench_hook_dir/mca_hook_rdmx.so" ] || uct_stacks=()
if [ "$quick" = 1 ]; then
  benches=(osu_latency osu_bw)
  local_benches=(osu_latency osu_bw) hpcc_np=()
  lat_sizes=8:65536 bw_sizes=8:65536 budget=0.15 step_s=150 size_s=40
  scale_np=(2 4) ucx_np=()
else
  # Latency and bandwidth over the whole range; the multi-pair, bi-directional and threaded
  # programs to 1 MiB / 64 KiB: the emulated device moves ~40 MB/s, and the run must stay short.
  benches=(osu_latency osu_bw osu_bibw osu_mbw_mr osu_multi_lat osu_latency_mt)
  local_benches=(osu_latency osu_bw osu_bibw osu_mbw_mr) hpcc_np=(4)
  lat_sizes=8:4194304 bw_sizes=8:4194304 budget=0.3 step_s=300 size_s=60
  scale_np=(2 4 8 16) ucx_np=(2 8) # UCX for comparison; its np 16 launch alone costs minutes
fi
pair_sizes=8:1048576 mt_sizes=8:65536
[ "$quick" = 1 ] && pair_sizes=8:65536 mt_sizes=8:4096

bench_args() { # bench -> np and bargs
  local lat=(-x 20 -X 2 -n 5 -D "$budget" -T "$size_s")
  local bw=(-x 2 -X 1 -n 1 -B 8388608 -D "$budget" -T "$size_s")
  np=2
  case $1 in
    osu_latency) bargs=(-m "$lat_sizes" "${lat[@]}") ;;
    osu_multi_lat) np=4 bargs=(-m "$pair_sizes" "${lat[@]}") ;;
    osu_latency_mt) bargs=(-m "$mt_sizes" -t 2 "${lat[@]}") ;;
    osu_bw) bargs=(-m "$bw_sizes" "${bw[@]}") ;;
    osu_bibw) bargs=(-m "$pair_sizes" "${bw[@]}") ;;
    osu_mbw_mr) np=4 bargs=(-m "$pair_sizes" "${bw[@]}") ;;
  esac
}

nsteps=$(( ${#benches[@]} * ${#stacks[@]} + ${#uct_benches[@]} * ${#uct_stacks[@]} + 2 +
  ${#scale_np[@]} * 2 + ${#ucx_np[@]} +
  (${#local_benches[@]} + ${#hpcc_np[@]}) * ${#local_stacks[@]} ))
k=0
t_start=$SECONDS
progress() { # status line for step k
  k=$((k + 1))
  printf '[%2d/%d %4ds] %-34s %s\n' "$k" "$nsteps" "$((SECONDS - t_start))" "$1" "$2"
}

# ---- MPI steps --------------------------------------------------------------------------------
# The sizes a program printed (first column, numbers only) and the first one it never reached.
first_missing() { # outfile min max
  awk -v lo="$2" -v hi="$3" '
    /^[0-9]/ { seen[$1] = 1 }
    END { s = lo; while (s <= hi) { if (!(s in seen)) { print s; exit } s = (s == 0) ? 1 : s * 2 } }' "$1"
}

mpi_step() { # name stack np prog args...
  local name=$1 stack=$2 n=$3 prog=$4
  shift 4
  local f=$raw/$name.$stack t0=$SECONDS rc restarts=0 what
  local -a args=("$@")
  local args_lo="" i
  for i in "${!args[@]}"; do [ "${args[$i]}" = -m ] && args_lo=${args[$((i + 1))]%%:*}; done
  mpi_stack_args "$stack" "$dev"
  : >"$f.out"
  : >"$f.err"
  while :; do
    echo "\$ mpirun -np $n ${sargs[*]} $prog ${args[*]}" >>"$f.err"
    timeout -k 5 "$step_s" mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$n" \
      "${sargs[@]}" "$osu/$prog" "${args[@]}" >>"$f.out" 2>>"$f.err" </dev/null
    rc=$?
    # Done, or out of time (the step's timeout is its whole budget: no restart after it).
    [ $rc -eq 0 ] || [ $rc -eq 124 ] && break
    # Died mid-sweep: restart after the size it died at (the table shows that one as fail).
    local m lo hi i
    for i in "${!args[@]}"; do [ "${args[$i]}" = -m ] && { lo=${args[$((i + 1))]%%:*}; hi=${args[$((i + 1))]##*:}; }; done
    m=$(first_missing "$f.out" "${lo:-0}" "${hi:-0}")
    # Not when it died before its first size (a stack that cannot start: restarts cost launches).
    [ -z "$m" ] || [ "$m" = "${args_lo:-}" ] || [ $restarts -ge 2 ] || [ $((m * 2)) -gt "${hi:-0}" ] && break
    restarts=$((restarts + 1))
    echo "# restart: died at size $m (exit $rc), going on from $((m * 2))" >>"$f.out"
    for i in "${!args[@]}"; do [ "${args[$i]}" = -m ] && args[$((i + 1))]="$((m * 2)):$hi"; done
  done
  what=ok
  [ $rc -eq 124 ] && what="TIMED OUT after ${step_s}s"
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && what="failed (exit $rc)"
  [ $restarts -gt 0 ] && what="$what, $restarts restart(s)"
  grep -q ' fail$' "$f.out" && what="$what, some sizes fail"
  echo "$name $stack rc=$rc restarts=$restarts seconds=$((SECONDS - t0))" >>"$raw/steps.txt"
  progress "$name $stack" "$what ($((SECONDS - t0)) s)"
}

# ---- perftest ---------------------------------------------------------------------------------
port=18700
perftest_step() { # name tool args... (server in the background, client against $ip)
  local name=$1 tool=$2 t0=$SECONDS rc spid _
  shift 2
  port=$((port + 1))
  timeout -k 5 "$step_s" "$tool" -d "$dev" -x "$gid" -p "$port" -F "$@" >"$raw/$name.srv" 2>&1 &
  spid=$!
  for _ in $(seq 1 100); do # until it listens, at most 10 s
    ss -ltn 2>/dev/null | grep -q ":$port " && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.1
  done
  echo "\$ $tool -d $dev -x $gid -p $port -F $* $ip (server: the same without $ip)" >"$raw/$name.err"
  timeout -k 5 "$step_s" "$tool" -d "$dev" -x "$gid" -p "$port" -F "$@" "$ip" \
    >"$raw/$name.out" 2>>"$raw/$name.err" </dev/null
  rc=$?
  kill "$spid" 2>/dev/null
  wait "$spid" 2>/dev/null
  echo "$name perftest rc=$rc seconds=$((SECONDS - t0))" >>"$raw/steps.txt"
  progress "$name ($tool $*)" "$([ $rc -eq 0 ] && echo ok || echo "failed (exit $rc)") ($((SECONDS - t0)) s)"
}

# ---- run ----------------------------------------------------------------------------------------
{
  echo "date_utc $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "mode $([ "$quick" = 1 ] && echo quick || echo full)"
  echo "where $([ "${RDMX_IN_GUEST:-0}" = 1 ] && echo "Soft-RoCE guest (qemu TCG, 2 vCPUs)" || echo native)"
  echo "kernel $(uname -r)"
  echo "device $dev"
  echo "active_mtu $(timeout 20 ibv_devinfo -d "$dev" 2>/dev/null | awk '/active_mtu/ { print $2; exit }')"
  echo "max_qp $(timeout 20 ibv_devinfo -v -d "$dev" 2>/dev/null | awk '$1 == "max_qp:" { print $2; exit }')"
  echo "gid_index $gid"
  echo "open_mpi $(ompi_info --parsable 2>/dev/null | sed -n 's/^ompi:version:full://p')"
  echo "ucx $(ucx_info -v 2>/dev/null | sed -n 's/^# Version //p' | head -n 1)"
  echo "guest_load_start $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$out/run-info.txt"
: >"$raw/steps.txt"
echo "== demo: ${#stacks[@]} stacks x ${#benches[@]} benchmarks, perftest, footprint np ${scale_np[*]} (UCX: ${ucx_np[*]:-none}); device $dev; $nsteps steps"

# Interleaved by benchmark, so that every stack of one table sees about the same host load.
for b in "${benches[@]}"; do
  bench_args "$b"
  for s in "${stacks[@]}"; do
    mpi_step "$b" "$s" "$np" "$b" "${bargs[@]}"
  done
done
for b in "${uct_benches[@]}"; do
  bench_args "$b"
  for s in "${uct_stacks[@]}"; do
    mpi_step "$b" "$s" "$np" "$b" "${bargs[@]}"
  done
done
for b in "${local_benches[@]}"; do
  bench_args "$b"
  for s in "${local_stacks[@]}"; do
    mpi_step "$b" "$s" "$np" "$b" "${bargs[@]}"
  done
done
for s in "${local_stacks[@]}"; do
  [ ${#hpcc_np[@]} -gt 0 ] || break
  t0=$SECONDS
  mpi_stack_args "$s" "$dev"
  echo "\$ mpirun -np 4 ${sargs[*]} hpcc (tests/mpi/hpcc/hpccinf-np4.txt, tests/mpi/hpcc_run.sh)" \
    >"$raw/hpcc.$s.err"
  sh "$(dirname "$0")/../../tests/mpi/hpcc_run.sh" "$(dirname "$0")/../../tests/mpi/hpcc/hpccinf-np4.txt" \
    -- timeout -k 5 600 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4 \
    "${sargs[@]}" hpcc >"$raw/hpcc.$s.out" 2>>"$raw/hpcc.$s.err" </dev/null
  rc=$?
  echo "hpcc $s rc=$rc seconds=$((SECONDS - t0))" >>"$raw/steps.txt"
  progress "hpcc np4 $s" "$([ $rc -eq 0 ] && echo ok || echo "failed (exit $rc)") ($((SECONDS - t0)) s)"
done
if [ "$quick" = 1 ]; then
  perftest_step ib_send_lat ib_send_lat -s 8 -n 1000
  perftest_step ib_write_bw ib_write_bw -s 65536 -n 200
else
  perftest_step ib_send_lat ib_send_lat -s 8 -n 2000
  perftest_step ib_write_bw ib_write_bw -a -n 20
fi
for n in "${scale_np[@]}"; do
  for s in rdmx-rc rdmx-ud; do
    mpi_step "footprint_np$n" "$s" "$n" mpi_footprint -T 240
  done
  [[ " ${ucx_np[*]} " = *" $n "* ]] && mpi_step "footprint_np$n" ucx "$n" mpi_footprint -T 240
done
echo "guest_load_end $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/run-info.txt"
echo "guest_seconds $((SECONDS - t_start))" >>"$out/run-info.txt"
echo "== demo: guest part done in $((SECONDS - t_start)) s"
