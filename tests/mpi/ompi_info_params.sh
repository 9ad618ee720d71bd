#!/bin/sh
# ompi_info_params.sh OMPI_INFO NAME... [--pvars PVAR...]: ompi_info lists the parameter
# mtl_rdmx_NAME for every NAME and the performance variable mtl_rdmx_PVAR for every PVAR (with
# OMPI_MCA_mca_base_component_path naming the plugin's folder, set by the test).
info=$1
shift
out=$("$info" --param mtl rdmx --level 9) || { echo "ompi_info failed"; exit 1; }
echo "$out"
echo "$out" | grep -q "MCA mtl: rdmx" || { echo "the rdmx component is not listed"; exit 1; }
what=parameter
n=0
for p in "$@"; do
  if [ "$p" = --pvars ]; then
    what=performance
    continue
  fi
  echo "$out" | grep -q "MCA mtl rdmx: $what \"mtl_rdmx_$p\"" ||
    { echo "missing: $what mtl_rdmx_$p"; exit 1; }
  n=$((n + 1))
done
echo "all $n parameters and performance variables listed"
