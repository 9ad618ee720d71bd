#!/bin/sh
# install_test.sh BUILD_DIR SOURCE_DIR LIBDIR [plugin|plugin,hook] [CFLAGS]
# `cmake --install` into a fresh prefix, then use only what landed there, as a user would:
#   1. build consumer.c with cc against <prefix>/include and -lrdmx from <prefix>/LIBDIR
#      (C11, warnings are errors) and run it: every public function links, and the ones that
#      need no device behave (rdmx_worker_create on a missing device: RDMX_ERR_NO_DEVICE);
#   2. the same program built with the flags `pkg-config --cflags --libs rdmx` gives from the
#      installed rdmx.pc, and by a CMake project that only says find_package(rdmx) and links
#      rdmx::rdmx (cmake_consumer/), each run too;
#   3. with `plugin` (the build has one): ompi_info finds the installed plugin in
#      <prefix>/lib/rdmx/openmpi, whose RPATH must lead to the installed librdmx.so, and the
#      install said how to point Open MPI at that folder;
#   4. with `plugin`, installed for Open MPI's own prefix (under DESTDIR, so the system is not
#      touched): the plugin lands in Open MPI's component folder, and the install says so;
#   5. with `hook` (the UCT module and its Open MPI hook are built): the module lands in
#      <prefix>/LIBDIR/ucx, the hook beside the plugin, the installed hook resolves the installed
#      module (ldd) and ompi_info lists it; in Open MPI's folder (step 4) its copy names the
#      module by absolute path.
set -eu
build=$1 src=$2 libdir=$3 what=${4:-} cflags=${5:-}
plugin=${what%%,*} hook=
case $what in *,hook) hook=hook ;; esac
prefix=$(mktemp -d /tmp/rdmx-install.XXXXXX)
trap 'rm -rf "$prefix"' EXIT
fail() { echo "install_test: FAILED: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" >"$prefix/install.log" 2>&1 ||
  { cat "$prefix/install.log" >&2; fail "cmake --install $build --prefix $prefix"; }
[ -f "$prefix/include/rdmx/rdmx.h" ] || fail "no include/rdmx/rdmx.h under the prefix"
[ -e "$prefix/$libdir/librdmx.so" ] || fail "no $libdir/librdmx.so under the prefix"

# shellcheck disable=SC2086 # CFLAGS: words
cc -std=c11 -Wall -Wextra -Werror $cflags -o "$prefix/consumer" "$src/consumer.c" \
  -I"$prefix/include" -L"$prefix/$libdir" -lrdmx -Wl,-rpath,"$prefix/$libdir" ||
  fail "consumer.c does not build against the installed header and librdmx.so"
RDMX_DEVICE=rdmx_no_such_device "$prefix/consumer" || fail "consumer"

pc_dir=$prefix/$libdir/pkgconfig
[ -f "$pc_dir/rdmx.pc" ] || fail "no $libdir/pkgconfig/rdmx.pc under the prefix"
pc_flags=$(PKG_CONFIG_PATH=$pc_dir pkg-config --cflags --libs rdmx) ||
  fail "pkg-config --cflags --libs rdmx (PKG_CONFIG_PATH=$pc_dir)"
case $pc_flags in *"$prefix"*) ;; *) fail "rdmx.pc does not point into the prefix: $pc_flags" ;; esac
# shellcheck disable=SC2086 # flags: words
cc -std=c11 -Wall -Wextra -Werror $cflags -o "$prefix/consumer_pc" "$src/consumer.c" $pc_flags \
  -Wl,-rpath,"$prefix/$libdir" || fail "consumer.c does not build with pkg-config's flags ($pc_flags)"
RDMX_DEVICE=rdmx_no_such_device "$prefix/consumer_pc" || fail "consumer built with pkg-config"
echo "install_test: pkg-config: $pc_flags"

if ! cmake -S "$src/cmake_consumer" -B "$prefix/cmake_build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_FLAGS="$cflags" >"$prefix/cmake.log" 2>&1 ||
  ! cmake --build "$prefix/cmake_build" >>"$prefix/cmake.log" 2>&1; then
  cat "$prefix/cmake.log" >&2
  fail "a CMake project with find_package(rdmx) does not build"
fi
RDMX_DEVICE=rdmx_no_such_device "$prefix/cmake_build/consumer" ||
  fail "consumer built with find_package(rdmx)"
echo "install_test: find_package(rdmx) gives rdmx::rdmx"

if [ "$plugin" = plugin ]; then
  # Open MPI's own folder stays on the path, or ompi_info loses its other components.
  ompi_dir=$(ompi_info --parsable --path pkglibdir | sed -n 's/^path:pkglibdir://p')
  plugin_dir=$prefix/lib/rdmx/openmpi
  [ -f "$plugin_dir/mca_mtl_rdmx.so" ] || fail "no lib/rdmx/openmpi/mca_mtl_rdmx.so under the prefix"
  out=$(OMPI_MCA_mca_base_component_path="$ompi_dir:$plugin_dir" ompi_info 2>&1) || true
  echo "$out" | grep -q "MCA mtl: rdmx" ||
    { echo "$out" | grep -i "rdmx\|error" >&2; fail "ompi_info does not list the installed plugin"; }
  echo "install_test: ompi_info lists the installed plugin ($plugin_dir)"
  grep -q "point Open MPI at it with --mca mca_base_component_path $ompi_dir:$plugin_dir" \
    "$prefix/install.log" || fail "the install did not say how to point Open MPI at $plugin_dir"
  if [ -n "$hook" ]; then
    module=$prefix/$libdir/ucx/libuct_rdmx.so
    [ -f "$module" ] || fail "no $libdir/ucx/libuct_rdmx.so under the prefix"
    [ -f "$plugin_dir/mca_hook_rdmx.so" ] || fail "no lib/rdmx/openmpi/mca_hook_rdmx.so"
    # The installed module, not the build tree's (its RUNPATH is $ORIGIN-relative).
    found=$(ldd "$plugin_dir/mca_hook_rdmx.so" |
      sed -n 's/^[[:space:]]*libuct_rdmx\.so => \(.*\) (0x.*/\1/p')
    [ "$(readlink -f "${found:-/nonexistent}")" = "$(readlink -f "$module")" ] ||
      fail "the installed hook loads '$found', not $module"
    echo "$out" | grep -q "MCA hook: rdmx" || fail "ompi_info does not list the installed hook"
    echo "install_test: the installed hook loads $module; ompi_info lists it"
  fi

  ompi_prefix=$(ompi_info --parsable --path prefix | sed -n 's/^path:prefix://p')
  # A plugin already in the system folder would answer for the copy checked below.
  for f in mca_mtl_rdmx.so ${hook:+mca_hook_rdmx.so}; do
    [ ! -e "$ompi_dir/$f" ] ||
      fail "$ompi_dir/$f exists already (a system install): remove it to run this test"
  done
  dest=$prefix/destdir
  DESTDIR=$dest cmake --install "$build" --prefix "$ompi_prefix" >"$prefix/system.log" 2>&1 ||
    { cat "$prefix/system.log" >&2; fail "DESTDIR=$dest cmake --install --prefix $ompi_prefix"; }
  [ -f "$dest$ompi_dir/mca_mtl_rdmx.so" ] ||
    fail "installing for $ompi_prefix did not put mca_mtl_rdmx.so in $ompi_dir"
  grep -q "is in Open MPI's component folder $ompi_dir" "$prefix/system.log" ||
    fail "the install for $ompi_prefix did not say where the plugin went"
  # Its RPATH names the installed librdmx.so by absolute path (here under DESTDIR: the
  # loader is told where DESTDIR put it).
  rpath=$(readelf -d "$dest$ompi_dir/mca_mtl_rdmx.so" | sed -n 's/.*R.*PATH.*\[\(.*\)\]/\1/p')
  [ "$rpath" = "$ompi_prefix/$libdir" ] ||
    fail "the copy in $ompi_dir has RPATH '$rpath', not $ompi_prefix/$libdir"
  out=$(LD_LIBRARY_PATH="$dest$ompi_prefix/$libdir:$dest$ompi_prefix/$libdir/ucx" \
    OMPI_MCA_mca_base_component_path="$ompi_dir:$dest$ompi_dir" ompi_info 2>&1) || true
  echo "$out" | grep -q "MCA mtl: rdmx" || fail "ompi_info cannot load $dest$ompi_dir/mca_mtl_rdmx.so"
  if [ -n "$hook" ]; then
    rpath=$(readelf -d "$dest$ompi_dir/mca_hook_rdmx.so" | sed -n 's/.*R.*PATH.*\[\(.*\)\]/\1/p')
    [ "$rpath" = "$ompi_prefix/$libdir/ucx" ] ||
      fail "the hook's copy in $ompi_dir has RUNPATH '$rpath', not $ompi_prefix/$libdir/ucx"
    echo "$out" | grep -q "MCA hook: rdmx" ||
      fail "ompi_info cannot load $dest$ompi_dir/mca_hook_rdmx.so"
  fi
  echo "install_test: for $ompi_prefix the plugin goes to $ompi_dir"
fi
echo "install_test: ok"
