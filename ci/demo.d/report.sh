#!/usr/bin/env bash
# ci/demo's report half (host): reads OUT/raw (written by guest.sh) and writes OUT/report.md
# (tables, scale figures and model), OUT/data/*.dat and OUT/*.png (gnuplot, log axes); prints
# the tables. Can be rerun on an old report folder: ci/demo.d/report.sh OUT
set -uo pipefail
out=$1
raw=$out/raw
data=$out/data
mkdir -p "$data"
md=$out/report.md

# value of one stack at one size: the figure column (col) of the first row with that size in the
# program's output; "fail" when the program printed fail or never reached the size; "-" when it
# did not run at all.
extract() { # file col -> "size value" lines
  [ -s "$1" ] || return 0
  awk -v c="$2" '/^[0-9]/ && !($1 in seen) { seen[$1] = 1; print $1, ($2 == "fail" ? "fail" : $c) }' "$1"
}

# perftest rows -> "size value": ib_send_lat t_avg (us, one way), ib_write_bw BW average
# converted from perftest's MiB/s to MB/s (10^6 B).
perftest_rows() { # name
  local f=$raw/$1.out
  [ -s "$f" ] || return 0
  case $1 in
    ib_send_lat) awk '/t_avg/ { on = 1; next } on && $1 ~ /^[0-9]+$/ && NF >= 6 { print $1, $6 }' "$f" ;;
    ib_write_bw) awk '/BW average/ { on = 1; next }
                      on && $1 ~ /^[0-9]+$/ && NF >= 5 { printf "%s %.2f\n", $1, $4 * 1.048576 }' "$f" ;;
  esac
}

# One table: bench col perftest title [data-name, default bench] -> markdown on stdout, gnuplot
# data in $data. The stacks are $tstacks (names $tnames, "|"-separated), each one whose name
# matches $tratio (an ERE) with its ratio to $tref; the gnuplot data has one column per stack,
# then perftest.
tstacks="rdmx-rc rdmx-ud ucx tcp" tnames="rdmx RC|rdmx UD|UCX|ob1 TCP" tref=ucx tratio=^rdmx
table() {
  local b=$1 col=$2 pt=$3 title=$4 dat=${5:-$1} s
  local tmp
  tmp=$(mktemp -d)
  for s in $tstacks; do
    if [ -f "$raw/$b.$s.out" ]; then
      extract "$raw/$b.$s.out" "$col" >"$tmp/$s"
    fi
  done
  [ -n "$pt" ] && perftest_rows "$pt" >"$tmp/perftest"
  ls "$tmp"/* >/dev/null 2>&1 || { rm -rf "$tmp"; return 1; }
  # The expected sizes come from the runs' -m (fail rows included); perftest adds none.
  awk -v dir="$tmp" -v pt="$pt" -v title="$title" -v datf="$data/$dat.dat" \
      -v stacks="$tstacks" -v names="$tnames" -v ref="$tref" -v rre="$tratio" '
    function v(s, z) { return (s SUBSEP z) in val ? val[s, z] : "-" }
    function num(x) { return x ~ /^[0-9.]+([eE][-+]?[0-9]+)?$/ }
    function ratio(a, b) { return (num(a) && num(b) && b + 0 > 0) ? sprintf("%.2f", a / b) : "-" }
    function g(x) { return num(x) ? x : "?" }
    BEGIN {
      n = split(stacks " perftest", S, " ")
      split(names, N, "|")
      for (i = 1; i <= n; ++i) {
        f = dir "/" S[i]
        while ((getline line < f) > 0) {
          split(line, a, " ")
          val[S[i], a[1]] = a[2]; has[S[i]] = 1
          if (S[i] != "perftest") sizes[a[1] + 0] = 1
        }
      }
      m = 0; for (z in sizes) order[++m] = z + 0
      for (i = 2; i <= m; ++i) { x = order[i]; j = i - 1; while (j > 0 && order[j] > x) { order[j + 1] = order[j]; --j } order[j + 1] = x }
      hdr = "| Size (B) |"; sep = "|---:|"; rhdr = ""; rsep = ""; cols = "# size"
      for (i = 1; i < n; ++i) {
        hdr = hdr " " N[i] " |"; sep = sep "---:|"; cols = cols " " S[i]
        if (S[i] ~ rre) { rhdr = rhdr " " N[i] " / " ref " |"; rsep = rsep "---:|" }
      }
      if (pt != "") { hdr = hdr " perftest " pt " |"; sep = sep "---:|" }
      print "### " title "\n"
      print hdr rhdr
      print sep rsep
      print cols " perftest" > datf
      for (k = 1; k <= m; ++k) {
        z = order[k]; line = "| " z " |"; rl = ""; dl = z
        for (i = 1; i < n; ++i) {
          line = line " " v(S[i], z) " |"; dl = dl " " g(v(S[i], z))
          if (S[i] ~ rre) rl = rl " " ratio(v(S[i], z), v(ref, z)) " |"
        }
        if (pt != "") line = line " " v("perftest", z) " |"
        print line rl
        print dl, g(v("perftest", z)) > datf
      }
      print ""
    }'
  rm -rf "$tmp"
}

plot() { # data-name ylabel title: a line per stack column of the data, perftest as points
  local b=$1 f term=pngcairo
  f=$data/$b.dat
  [ -s "$f" ] || return 0
  command -v gnuplot >/dev/null || return 0
  echo 'set terminal' | gnuplot 2>&1 | grep -q pngcairo || term=png
  local cols series="" i=2 c
  read -r -a cols < <(head -n 1 "$f" | sed 's/^# size //')
  for c in "${cols[@]}"; do
    if [ "$c" = perftest ]; then
      series="$series, \"\" using 1:$i with points pt 7 ps 1.5 lc rgb \"black\" title \"perftest (raw verbs)\""
    else
      series="$series, \"\" using 1:$i with linespoints lw 2 title \"$(label "$c")\""
    fi
    i=$((i + 1))
  done
  gnuplot <<EOF 2>>"$out/gnuplot.log"
set terminal $term size 900,560 noenhanced
set output "$out/$b.png"
set title "$3"
set xlabel "message size (bytes)"
set ylabel "$2"
set logscale x 2
set logscale y 10
set xtics ("1" 1, "8" 8, "64" 64, "512" 512, "4K" 4096, "32K" 32768, "256K" 262144, "2M" 2097152)
set offsets graph 0.03, graph 0.03, 0, 0
set grid
set key top left
set datafile missing "?"
plot "$f" using 1:2 notitle with dots lc rgb "white"$series
EOF
}
label() { # stack -> its legend
  case $1 in
    rdmx-rc) echo "rdmx MTL, RC" ;;
    rdmx-ud) echo "rdmx MTL, UD" ;;
    ucx) echo "pml ucx (rc/ud_verbs)" ;;
    tcp) echo "pml ob1, btl tcp" ;;
    uct-rc) echo "pml ucx over rdmx_rc" ;;
    uct-ud) echo "pml ucx over rdmx_ud" ;;
    ucx-ud) echo "pml ucx (ud_verbs)" ;;
    rdmx-shm) echo "rdmx MTL, shared memory" ;;
    ucx-node) echo "pml ucx, UCX defaults" ;;
    vader) echo "pml ob1, btl vader" ;;
    *) echo "$1" ;;
  esac
}

# ---- scale figures --------------------------------------------------------------------------
# From mpi_footprint's "# summary" line per run; the MTL's own rdmx_stats_t line
# (`mtl rdmx stats: ... recv_mem_bytes N num_qps N ... ring_mem_bytes N`) when the MTL prints
# it: the registered receive memory is the SRQs' plus the eager rings' (RC).
scale() {
  local rows=$out/data/footprint.txt f s n
  : >"$rows"
  for f in "$raw"/footprint_np*.out; do
    [ -e "$f" ] || continue
    n=${f##*/footprint_np}; n=${n%%.*}
    s=${f%.out}; s=${s##*.}
    awk -v np="$n" -v st="$s" -v errf="${f%.out}.err" '
      function kv(k,   i) { for (i = 1; i < NF; ++i) if ($i == k) return $(i + 1); return "" }
      /^# summary/ { q = kv("qps_max"); m = kv("mr_bytes_max"); r = kv("rss_kb_max") }
      END {
        rm = ""; rq = ""
        while ((getline line < errf) > 0) {
          if (line !~ /rdmx stats/) continue
          k = split(line, a, " ")
          mem = ""
          for (i = 1; i < k; ++i) {
            if (a[i] == "recv_mem_bytes" || a[i] == "ring_mem_bytes") mem = mem + a[i + 1]
            if (a[i] == "num_qps" && a[i + 1] + 0 > rq + 0) rq = a[i + 1]
          }
          if (mem != "" && mem + 0 > rm + 0) rm = mem
        }
        if (q == "") q = "fail"
        print st, np, q, (m == "" ? "fail" : m), (r == "" ? "fail" : r), (rm == "" ? "-" : rm), (rq == "" ? "-" : rq)
      }' "$f" >>"$rows"
  done
  [ -s "$rows" ] || return 0
  sort -k1,1 -k2,2n "$rows" -o "$rows"
  echo "### Footprint per process (mpi_footprint, every peer connected, np oversubscribed on one device)"
  echo
  echo "| stack | np | QPs | registered memory, all MRs (MB) | recv memory (MB, rdmx_stats_t) | RSS (MB) |"
  echo "|---|---:|---:|---:|---:|---:|"
  awk '{ mb = ($4 ~ /^[0-9]+$/) ? sprintf("%.2f", $4 / 1e6) : $4
         rm = ($6 ~ /^[0-9]+$/) ? sprintf("%.2f", $6 / 1e6) : $6
         rs = ($5 ~ /^[0-9]+$/) ? sprintf("%.1f", $5 * 1024 / 1e6) : $5
         print "| " $1 " | " $2 " | " $3 " | " mb " | " rm " | " rs " |" }' "$rows"
  echo
  echo "### Model for large jobs (per process)"
  echo
  echo 'Least-squares fit over the measured np of `y(N) = a + b * (N - 1)` (N ranks, N - 1 peers),'
  echo 'extrapolated. The structure behind it: rdmx RC opens one QP per peer per size class (2) plus'
  echo 'one UD control QP, and all peers share the two SRQs, so its receive memory is flat and its'
  echo 'QPs grow by 2 per peer; rdmx UD uses one QP per size class plus the control QP and the same'
  echo 'SRQs, so QPs and receive memory are both flat in peers (the footprint run sends eager sizes'
  echo 'only; in UD mode the rendezvous connects RC QPs on demand to the peers it moves large messages'
  echo 'with, at most RDMX_MAX_RC_PEERS = 64, least recently used retired: +64 QPs at worst, any N). RSS is what the process touched'
  echo '(Open MPI included); a negative slope (noise under load) is taken as 0. With transport auto'
  echo 'the MTL picks UD from 64 peers on (mtl_rdmx_auto_ud_peers): RC at 10k ranks would need'
  local maxqp
  maxqp=$(awk '/^max_qp / { print $2 }' "$out/run-info.txt" 2>/dev/null)
  echo "20k QPs per process, times the processes per node, against the device's max_qp${maxqp:+ ($maxqp here)}."
  echo
  echo "| stack | figure | a | b (per peer) | 1k ranks | 10k ranks | 100k ranks |"
  echo "|---|---|---:|---:|---:|---:|---:|"
  local st
  for st in $(awk '{ print $1 }' "$rows" | sort -u); do
    awk -v st="$st" '
      $1 == st && $3 ~ /^[0-9]+$/ { n++; x[n] = $2 - 1; q[n] = $3; m[n] = $4 / 1e6; r[n] = $5 * 1024 / 1e6
                                    if ($6 ~ /^[0-9]+$/) { rv[n] = $6 / 1e6; nr++ } }
      function fit(y, name, unit, fmt,   i, sx, sy, sxx, sxy, a, b, d) {
        sx = sy = sxx = sxy = 0
        for (i = 1; i <= n; ++i) { sx += x[i]; sy += y[i]; sxx += x[i] * x[i]; sxy += x[i] * y[i] }
        d = n * sxx - sx * sx
        b = (d != 0) ? (n * sxy - sx * sy) / d : 0
        if (b < 0) b = 0 # a shrinking footprint is measurement noise (RSS under load): flat
        a = (sy - b * sx) / n
        printf "| %s | %s | " fmt " | " fmt " | " fmt " | " fmt " | " fmt " |\n", st, name " (" unit ")", a, b, a + b * 999, a + b * 9999, a + b * 99999
      }
      END {
        if (n < 2) exit
        fit(q, "QPs", "count", "%.0f")
        fit(m, "registered MR", "MB", "%.2f")
        if (nr == n) fit(rv, "recv memory", "MB", "%.2f")
        fit(r, "RSS", "MB", "%.1f")
      }' "$rows"
  done
  echo
  # The UD promise: receive memory flat in the number of peers (within 5 % over the np measured).
  awk '$1 == "rdmx-ud" { v = ($6 ~ /^[0-9]+$/) ? $6 : $4; if (v !~ /^[0-9]+$/) next
                         if (lo == "" || v < lo) lo = v; if (v > hi) hi = v; nps = nps " " $2; src = ($6 ~ /^[0-9]+$/) ? "rdmx_stats_t recv_mem_bytes" : "registered MR bytes" }
       END { if (lo == "") exit
             printf "UD receive memory flat in peers: %s (%s: %.2f .. %.2f MB over np%s)\n\n",
                    (hi <= lo * 1.05) ? "yes" : "NO", src, lo / 1e6, hi / 1e6, nps }' "$rows"
}

# hpcc at 4 ranks per node-local stack: wall time from hpcc_run.sh's PASS line.
hpcc_wall() { # stack -> seconds, or nothing
  awk '/^PASS hpcc/ { gsub(/[()]/, "", $3); printf "%.1f", $3 / 1000 }' "$raw/hpcc.$1.out" 2>/dev/null
}
hpcc_table() {
  local st t u
  ls "$raw"/hpcc.*.out >/dev/null 2>&1 || return 0
  u=$(hpcc_wall ucx-node)
  echo "### node-local hpcc, 4 ranks, N = 500 (tests/mpi/hpcc/hpccinf-np4.txt): wall time (s)"
  echo
  echo "| stack | wall (s) | / UCX defaults |"
  echo "|---|---:|---:|"
  for st in rdmx-shm ucx-node vader; do
    t=$(hpcc_wall "$st")
    echo "| $(label "$st") | ${t:-fail} | $(awk -v a="$t" -v b="$u" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-" }') |"
  done
  echo
}

# ---- headline ratios against the MTL issue's targets -------------------------------------------
headline() {
  awk -v lat="$data/osu_latency.dat" -v bw="$data/osu_bw.dat" '
    function num(x) { return x ~ /^[0-9.]+([eE][-+]?[0-9]+)?$/ }
    function r(a, b) { return (num(a) && num(b) && b + 0 > 0) ? a / b : -1 }
    function show(x) { return x < 0 ? "n/a" : sprintf("%.2f", x) }
    BEGIN {
      while ((getline l < lat) > 0) { split(l, a, " "); if (a[1] == 8) { lrc = r(a[2], a[4]); lud = r(a[3], a[4]) } }
      while ((getline l < bw) > 0) {
        split(l, a, " "); if (a[1] !~ /^[0-9]+$/) continue
        if (a[1] == 8) { brc = r(a[2], a[4]); bud = r(a[3], a[4]) }
        if (a[1] >= 8192) { x = r(a[2], a[4]); if (x >= 0 && (minrc == "" || x < minrc)) { minrc = x; atrc = a[1] }
                            if (x < 0 && num(a[4])) missing = missing " " a[1] }
      }
      print "| figure (rdmx / UCX) | RC | UD | target |"
      print "|---|---:|---:|---|"
      print "| 8 B latency | " show(lrc) " | " show(lud) " | <= 0.9 |"
      print "| 8 B bandwidth (message rate) | " show(brc) " | " show(bud) " | >= 1.3 |"
      printf "| lowest bandwidth ratio from 8 KiB up (RC) | %s%s | | >= 1.0 |\n", (minrc == "" ? "n/a" : sprintf("%.2f", minrc)), (minrc == "" ? "" : " at " atrc " B")
      if (missing != "") print "\nRC sizes from 8 KiB up without a figure (fail): " missing
      print ""
    }'
}

{
  echo "# rdmx demo report"
  echo
  echo "Same MPI programs (bench/osu, OSU micro-benchmark conventions) over each stack, in one boot."
  echo 'Latency: half round trip, mean (us); bandwidth: MB/s with MB = 10^6 B. `fail`: the stack'
  echo 'refused or corrupted that size (or died at it); `-`: not measured. Ratios: rdmx / UCX (for'
  echo 'latency lower is better, for bandwidth higher is better).'
  echo
  echo '```'
  cat "$out/run-info.txt" 2>/dev/null
  [ -f "$out/host-info.txt" ] && cat "$out/host-info.txt"
  echo '```'
  echo
  echo "## Headline (issue 5 targets)"
  echo
} >"$md"
{
  echo "## Tables"
  echo
  table osu_latency 2 ib_send_lat "osu_latency: latency (us), np 2"
  table osu_bw 2 ib_write_bw "osu_bw: bandwidth (MB/s), window 64 (at most 8 MiB in flight), np 2"
  table osu_bibw 2 "" "osu_bibw: bi-directional bandwidth (MB/s), window 64 (at most 8 MiB in flight), np 2"
  table osu_mbw_mr 2 "" "osu_mbw_mr: aggregate bandwidth (MB/s), 2 pairs, np 4"
  table osu_mbw_mr 3 "" "osu_mbw_mr: aggregate message rate (messages/s), 2 pairs, np 4" \
    osu_mbw_mr_rate
  table osu_multi_lat 2 "" "osu_multi_lat: latency (us), 2 pairs at once, np 4"
  table osu_latency_mt 2 "" "osu_latency_mt: latency (us), 2 threads per rank, MPI_THREAD_MULTIPLE"
  echo "## All ranks on one node"
  echo
  echo "The same programs, every rank on one node: the rdmx MTL with its defaults (node-local peers"
  echo "through shared memory, rendezvous by cross-memory attach), pml ucx with UCX's defaults, pml"
  echo "ob1 with btl vader. ci/bench-local repeats the figures with targets in interleaved rounds."
  echo
  tstacks="rdmx-shm ucx-node vader" tnames="rdmx shm|UCX defaults|ob1 vader" tref=ucx-node
  table osu_latency 2 "" "node-local osu_latency: latency (us), np 2" local_osu_latency
  table osu_bw 2 "" "node-local osu_bw: bandwidth (MB/s), np 2" local_osu_bw
  table osu_bibw 2 "" "node-local osu_bibw: bandwidth (MB/s), np 2" local_osu_bibw
  table osu_mbw_mr 2 "" "node-local osu_mbw_mr: aggregate bandwidth (MB/s), 2 pairs, np 4"     local_osu_mbw_mr
  hpcc_table
  if [ -f "$raw/osu_latency.uct-rc.out" ] || [ -f "$raw/osu_latency.uct-ud.out" ]; then
    echo "## pml ucx over rdmx's UCT transports"
    echo
    echo "The same osu_latency and osu_bw through pml ucx (UCX $(sed -n 's/^ucx //p' "$out/run-info.txt"))"
    echo "over rdmx's transports (plugin/ucx, loaded by its Open MPI hook), each beside UCX's own"
    echo "transport of the same kind (issue-27 targets: latency <= 1.05x, bandwidth >= 1.0x from 8 KiB)."
    echo
    tstacks="uct-rc ucx" tnames="rdmx_rc|UCX rc_verbs" tref=ucx tratio=^uct
    table osu_latency 2 "" "osu_latency over rdmx_rc: latency (us), np 2" uct_rc_osu_latency
    table osu_bw 2 "" "osu_bw over rdmx_rc: bandwidth (MB/s), np 2" uct_rc_osu_bw
    tstacks="uct-ud ucx-ud" tnames="rdmx_ud|UCX ud_verbs" tref=ucx-ud
    table osu_latency 2 "" "osu_latency over rdmx_ud: latency (us), np 2" uct_ud_osu_latency
    table osu_bw 2 "" "osu_bw over rdmx_ud: bandwidth (MB/s), np 2" uct_ud_osu_bw
  fi
  tstacks="rdmx-rc rdmx-ud ucx tcp" tnames="rdmx RC|rdmx UD|UCX|ob1 TCP" tref=ucx tratio=^rdmx
  echo "## Scale"
  echo
  scale
  echo "## Commands"
  echo
  echo 'Each step as it ran in the guest (first line of its raw/*.err; ci/demo.d/guest.sh has the'
  echo 'rest: `mpirun --allow-run-as-root --oversubscribe --bind-to none`, programs in'
  echo 'BUILD/bench/osu, OMPI_MCA_mca_base_component_path naming BUILD/plugin/ompi, RDMX_STATS=1).'
  echo
  echo '```'
  for f in "$raw"/*.err; do
    [ -e "$f" ] && head -n 1 "$f" | grep '^\$' | sed "s|$raw/||"
  done
  echo '```'
  echo
} >"$out/tables.md"
headline >>"$md"
cat "$out/tables.md" >>"$md"
rm -f "$out/tables.md"

plot osu_latency "latency (us)" "osu_latency: half round trip (log axes)"
plot osu_bw "bandwidth (MB/s)" "osu_bw: window 64 (log axes)"
plot osu_bibw "bandwidth (MB/s)" "osu_bibw (log axes)"
plot osu_mbw_mr "aggregate bandwidth (MB/s)" "osu_mbw_mr, 2 pairs (log axes)"
plot osu_multi_lat "latency (us)" "osu_multi_lat, 2 pairs (log axes)"
plot osu_latency_mt "latency (us)" "osu_latency_mt, 2 threads per rank (log axes)"
plot local_osu_latency "latency (us)" "node-local osu_latency (log axes)"
plot local_osu_bw "bandwidth (MB/s)" "node-local osu_bw (log axes)"
{
  echo "## Plots"
  echo
  for p in osu_latency osu_bw osu_bibw osu_mbw_mr osu_multi_lat osu_latency_mt local_osu_latency \
    local_osu_bw; do
    [ -f "$out/$p.png" ] && echo "![$p]($p.png)"
  done
  echo
  echo "Raw outputs (program stdout and stderr, perftest, steps.txt with exit codes and seconds): raw/."
} >>"$md"
