# Sourced by ci/test and ci/demo: installs the Debian bookworm packages rdmx needs, only those
# missing, so a second run costs nothing. Needs root (apt-get).
rdmx_packages=(
  build-essential cmake pkg-config git libgtest-dev
  clang-14 libclang-rt-14-dev
  libibverbs-dev rdma-core ibverbs-utils ibverbs-providers perftest
  iproute2 kmod cpio busybox-static qemu-system-x86
  openmpi-bin libopenmpi-dev libucx0 libucx-dev ucx-utils hpcc
  gnuplot-nox
)

rdmx_install_deps() {
  local missing=()
  local p
  for p in "${rdmx_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "rdmx: installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "rdmx: missing packages and not root: run as root or install: ${missing[*]}" >&2
    return 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
