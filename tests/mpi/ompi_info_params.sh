#!/bin/sh
# ompi_info_params.sh OMPI_INFO NAME...: ompi_info lists mtl_rdmx_NAME for every NAME (with
# OMPI_MCA_mca_base_component_path naming the plugin's folder, set by the test).
info=$1
shift
out=$("$info" --param mtl rdmx --level 9) || { echo "ompi_info failed"; exit 1; }
echo "$out"
echo "$out" | grep -q "MCA mtl: rdmx" || { echo "the rdmx component is not listed"; exit 1; }
for p in "$@"; do
  echo "$out" | grep -q "\"mtl_rdmx_$p\"" || { echo "missing: mtl_rdmx_$p"; exit 1; }
done
echo "all $# parameters listed"
