#!/bin/sh
# hpcc_run.sh HPCCINF -- MPIRUN_LINE...: runs Debian's hpcc (HPC Challenge) with HPCCINF as
# ./hpccinf.txt in a fresh folder; passes when hpccoutf.txt reports Success=1. Prints the wall
# time and hpcc's summary figures. The MPIRUN_LINE ends with the hpcc binary.
inf=$1
shift
[ "$1" = "--" ] && shift
[ -r "$inf" ] && [ $# -gt 0 ] || { echo "usage: $0 HPCCINF -- MPIRUN_LINE..." >&2; exit 2; }
dir=$(mktemp -d) || exit 2
trap 'rm -rf "$dir"' EXIT
cp "$inf" "$dir/hpccinf.txt" && cd "$dir" || exit 2
start=$(date +%s%N)
"$@"
rc=$?
ms=$((($(date +%s%N) - start) / 1000000))
echo "hpcc: exit $rc after $ms ms"
[ -s hpccoutf.txt ] || { echo "FAIL: no hpccoutf.txt"; exit 1; }
# Where the time went (each section starts and ends with a timestamp).
grep -E '^(Begin of|End of|Current time)' hpccoutf.txt | paste - - | sed 's/ *Current time ([0-9]*) is / /'
# The summary block: figures worth a note, and the verdict.
grep -E '^(HPL_N|HPL_Tflops|HPL_time|PTRANS_GBs|MPIRandomAccess_GUPs|MPIFFT_Gflops|MaxPingPongLatency_usec|MinPingPongBandwidth_GBytes|RandomlyOrderedRingLatency_usec|RandomlyOrderedRingBandwidth_GBytes|Failure|Success)=' hpccoutf.txt
if [ $rc -ne 0 ] || ! grep -q '^Success=1' hpccoutf.txt; then
  echo "FAIL: hpcc did not report Success=1 (exit $rc); the end of hpccoutf.txt:"
  tail -40 hpccoutf.txt
  exit 1
fi
echo "PASS hpcc ($ms ms)"
