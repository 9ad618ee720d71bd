#!/bin/sh
# node_split.sh PROG ARGS...: runs PROG as if ranks 0-1, 2-3, ... were on different nodes (a
# node identity per pair, RDMX_NODE_ID): within a pair shared memory, across pairs the device.
RDMX_NODE_ID=$((${OMPI_COMM_WORLD_RANK:-0} / 2 + 1))
export RDMX_NODE_ID
exec "$@"
