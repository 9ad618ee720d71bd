#!/bin/sh
# hpcc_compare.sh BUILD NP [ROUNDS]: in this boot (run it under ci/softroce/run), hpcc with
# tests/mpi/hpcc/hpccinf-npNP.txt over the rdmx MTL of BUILD and over pml ucx (the UCX settings
# of ../shared/softroce.md), alternating, ROUNDS times (default 1). Prints each run's wall time
# and hpcc's figures, for the side-by-side note:
#   ci/softroce/run --devices 2 --timeout 3000 --rw $PWD/build -- tests/mpi/hpcc_compare.sh $PWD/build 2
here=$(cd "$(dirname "$0")" && pwd)
build=$1
np=$2
rounds=${3:-1}
[ -d "$build/plugin/ompi" ] && [ -r "$here/hpcc/hpccinf-np$np.txt" ] ||
  { echo "usage: $0 BUILD NP [ROUNDS] (hpcc/hpccinf-npNP.txt must exist)" >&2; exit 2; }
pkglib=$(ompi_info --parsable --path pkglibdir | sed -n 's/^path:pkglibdir://p')
dev=${RDMX_TEST_DEVICES%% *}
common="--allow-run-as-root --oversubscribe --bind-to none -np $np"
uptime
i=1
while [ $i -le "$rounds" ]; do
  echo "=== round $i: rdmx"
  sh "$here/hpcc_run.sh" "$here/hpcc/hpccinf-np$np.txt" -- timeout 1800 mpirun $common \
    --mca pml cm --mca mtl rdmx --mca mca_base_component_path "$pkglib:$build/plugin/ompi" hpcc
  echo "=== round $i: pml ucx"
  sh "$here/hpcc_run.sh" "$here/hpcc/hpccinf-np$np.txt" -- timeout 1800 mpirun $common \
    --mca pml ucx -x UCX_TLS=self,rc_verbs,ud_verbs -x "UCX_NET_DEVICES=${dev:-rxe0}:1" \
    -x UCX_UD_VERBS_ETH_DGID_CHECK=n hpcc
  i=$((i + 1))
done
uptime
