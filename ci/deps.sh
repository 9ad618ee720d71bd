# shellcheck shell=bash
# Sourced by ci/test and ci/demo: installs the Debian bookworm packages rdmx needs, only those
# missing, and unpacks the source of the installed UCX for plugin/ucx (rdmx_fetch_ucx_source), so
# a second run costs nothing. Needs root (apt-get).
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
  if [ ${#missing[@]} -gt 0 ]; then
    echo "rdmx: installing ${missing[*]}"
    if [ "$(id -u)" -ne 0 ]; then
      echo "rdmx: missing packages and not root: run as root or install: ${missing[*]}" >&2
      return 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" \
      >/dev/null || return 1
  fi
  # Without the UCX source only plugin/ucx is skipped (CMake says so): not a failure of the step.
  rdmx_fetch_ucx_source || true
}

# plugin/ucx is built against UCX's internal headers (src/uct/base/*.h, not installed by
# libucx-dev), which must be those of the UCX that runs it: the source of the installed libucx0,
# unpacked (never built) into the cache, outside the repo, where CMake looks by default
# (RDMX_UCX_SOURCE_DIR):
#   $RDMX_UCX_CACHE (default ~/.cache/rdmx-ucx, as ci/softroce keeps its kernel in
#   ~/.cache/rdmx-softroce)/ucx-VERSION/            dpkg-source -x of ucx_VERSION.dsc
#                                      /.complete  written last: without it, a crashed extraction
#   .../fetch.lock                                  flock held while a fetch runs
rdmx_ucx_cache() { echo "${RDMX_UCX_CACHE:-${HOME:-/root}/.cache/rdmx-ucx}"; }

rdmx_fetch_ucx_source() {
  local version cache dir
  version=$(dpkg-query -W -f='${Version}' libucx0 2>/dev/null) || {
    echo "rdmx: libucx0 is not installed: no UCX source for plugin/ucx" >&2
    return 1
  }
  cache=$(rdmx_ucx_cache)
  dir=$cache/ucx-$version
  [ -e "$dir/.complete" ] && return 0
  echo "rdmx: fetching the source of ucx $version into $dir (once)"
  if [ "$(id -u)" -ne 0 ]; then
    echo "rdmx: not root: cannot add deb-src lines or apt-get update; plugin/ucx is skipped" >&2
    return 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  # (showsrc takes no =version: it lists every version it knows.)
  if ! apt-cache showsrc ucx 2>/dev/null | grep -qx "Version: $version"; then
    rdmx_add_deb_src || return 1
    apt-get update -qq || return 1
  fi
  mkdir -p "$cache" || return 1
  # One fetch at a time (two ci runs at once): the second finds the first's tree complete. In a
  # subshell, so that the lock's descriptor closes with it on every path.
  (
    flock -w 600 -x 9 || { echo "rdmx: timed out waiting for $cache/fetch.lock" >&2; exit 1; }
    [ -e "$dir/.complete" ] && exit 0
    rm -rf "$dir" "$dir.partial" "$cache"/download.*
    dl=$(mktemp -d "$cache/download.XXXXXX") || exit 1
    # apt's sandbox user (_apt) cannot write into a root-only cache dir: download as ourselves.
    # The .dsc's signature cannot be checked (no Debian keyring for gpgv): apt already checked
    # the hashes of what it fetched against the signed Sources index, so that warning is dropped.
    if ! log=$(cd "$dl" && apt-get source -qq --download-only -o APT::Sandbox::User="$(id -un)" \
      "ucx=$version" 2>&1 && dpkg-source -x "ucx_${version#*:}.dsc" "$dir.partial" 2>&1); then
      printf '%s\n' "$log" >&2
      echo "rdmx: apt-get source ucx=$version failed; plugin/ucx is skipped" >&2
      rm -rf "$dl" "$dir.partial"
      exit 1
    fi
    # dpkg-source -x leaves the orig tarball beside the tree it made.
    rm -rf "$dl" "$cache"/ucx_*.orig.tar.*
    mv "$dir.partial" "$dir" && touch "$dir/.complete"
  ) 9>"$cache/fetch.lock"
}

# deb-src entries mirroring the deb ones of debian.sources (same URIs, suites and keyring), only
# when no deb-src entry exists already: apt-get source needs them, the image has none.
rdmx_add_deb_src() {
  local src=/etc/apt/sources.list.d/debian.sources out=/etc/apt/sources.list.d/rdmx-deb-src.sources
  if grep -Eqs '^(Types:.*deb-src|deb-src )' /etc/apt/sources.list /etc/apt/sources.list.d/*; then
    return 0
  fi
  [ -r "$src" ] || { echo "rdmx: no $src to mirror as deb-src" >&2; return 1; }
  echo "rdmx: adding deb-src entries ($out, mirroring $src)"
  sed 's/^Types:.*/Types: deb-src/' "$src" >"$out"
}
