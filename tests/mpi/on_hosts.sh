#!/bin/sh
# on_hosts.sh CMD [ARG]...: runs CMD (an mpirun line, or a script that runs one) across the
# hosts of `ci/softroce/run --hosts 2` (label "hosts"): Open MPI's default hostfile becomes the
# harness's, so every mpirun in CMD places ranks on both hosts (--map-by node: one per host in
# turn; the default, by slot: two on the first, then two on the second). Elsewhere it skips.
if [ -z "${RDMX_TEST_HOSTFILE:-}" ]; then
  echo "SKIP: needs two hosts: ci/softroce/run --hosts 2 -- ctest -L hosts"
  exit 77
fi
OMPI_MCA_orte_default_hostfile=$RDMX_TEST_HOSTFILE exec "$@"
