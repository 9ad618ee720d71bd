# shellcheck shell=bash
# Results go to SOFTROCE_* globals that run reads.
# shellcheck disable=SC2034
# Host-side preparation for run: packages, the Debian kernel and the initramfs, cached under
# $SOFTROCE_CACHE. Sourced by run, never executed.
#
# Cache layout (nothing here is ever committed; ~400 MB per kernel):
#   prepare.lock                 exclusive flock while anything below is created or pruned
#   kernel-package               "PKG APTSTAMP": last answer of `apt-cache depends linux-image-amd64`
#   kernels/KVER/                dpkg -x of linux-image-KVER, plus lib/modules/KVER/modules.dep
#   kernels/KVER/.complete       written last: a kernel dir without it is a crashed extraction
#   kernels/KVER.lock            shared flock held by every run that boots KVER (pruning skips it)
#   initramfs/KVER-HASH.cpio     HASH covers the init scripts, the module list and busybox
#   logs/                        console logs of failed boots (pruned after 7 days)
#   sshd/                        dpkg -x of openssh-server and libwrap0 (--hosts 2 only: the
#                                guests run this sshd; installing the package would start one on
#                                the host itself)

# Packages the harness itself needs on the host (the guest runs the host's binaries).
readonly SOFTROCE_PACKAGES=(qemu-system-x86 busybox-static kmod iproute2 cpio rdma-core
  ibverbs-utils ibverbs-providers coreutils util-linux xz-utils grep openssh-client)

# Loaded with insmod by init, in this order (a module before its dependencies fails with
# "unknown symbol"). virtio_console provides the hvc consoles that carry CMD's stdout/stderr.
readonly SOFTROCE_INITRD_MODULES=(virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev
  virtio_pci 9pnet 9pnet_virtio netfs fscache 9p overlay virtio_console)

# Progress lines only for a human at a terminal: CMD's stderr must stay byte-exact in CI.
softroce_note() {
  [[ -t 2 ]] && echo "softroce: $*" >&2
  return 0
}

# softroce_apt WHAT ARGS...: apt-get with its chatter in a log that the failure message names.
softroce_apt() {
  local what=$1 log
  shift
  log=$SOFTROCE_CACHE/logs/apt-$what-$$.log
  if DEBIAN_FRONTEND=noninteractive apt-get "$@" >"$log" 2>&1; then
    rm -f "$log"
    return 0
  fi
  softroce_die "apt-get $* failed; log: $log"
}

softroce_install_packages() {
  local missing=() p status
  declare -A installed=()
  while read -r p status; do
    [[ $status == installed ]] && installed[${p%%:*}]=1
  done < <(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${SOFTROCE_PACKAGES[@]}" 2>/dev/null)
  for p in "${SOFTROCE_PACKAGES[@]}"; do
    [[ -n ${installed[$p]:-} ]] || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return 0
  if ((EUID != 0)); then
    softroce_die "missing packages (need root to install): ${missing[*]}"
  fi
  softroce_note "installing ${missing[*]}"
  # Only refresh the lists when something is actually missing.
  softroce_apt update update -q
  softroce_apt install install -y -q --no-install-recommends "${missing[@]}"
}

# Sets SOFTROCE_KVER. The answer is cached and trusted while the apt lists are unchanged (it only
# moves when they do; asking apt costs 0.6 s per run).
softroce_resolve_kernel() {
  local stamp pkg cached_pkg cached_stamp
  stamp=$(stat -c %Y /var/lib/apt/lists 2>/dev/null || echo 0)
  if [[ -r $SOFTROCE_CACHE/kernel-package ]]; then
    read -r cached_pkg cached_stamp <"$SOFTROCE_CACHE/kernel-package"
    if [[ $cached_stamp == "$stamp" && -n $cached_pkg ]]; then
      SOFTROCE_KVER=${cached_pkg#linux-image-}
      return 0
    fi
  fi
  pkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
    sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*\)$/\1/p' | head -n 1)
  if [[ -z $pkg ]] && ((EUID == 0)); then
    DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null 2>&1
    stamp=$(stat -c %Y /var/lib/apt/lists 2>/dev/null || echo 0)
    pkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
      sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*\)$/\1/p' | head -n 1)
  fi
  if [[ -z $pkg ]]; then
    # Offline with an old cache: any complete kernel will do.
    pkg=$(find "$SOFTROCE_CACHE/kernels" -mindepth 2 -maxdepth 2 -name .complete -printf '%h\n' \
      2>/dev/null | sort -V | tail -n 1)
    [[ -n $pkg ]] || softroce_die "cannot resolve the kernel: apt-cache depends linux-image-amd64 gave nothing"
    pkg=linux-image-${pkg##*/}
  fi
  echo "$pkg $stamp" >"$SOFTROCE_CACHE/kernel-package.tmp" &&
    mv -f "$SOFTROCE_CACHE/kernel-package.tmp" "$SOFTROCE_CACHE/kernel-package"
  SOFTROCE_KVER=${pkg#linux-image-}
}

softroce_prepare_kernel() {
  local kdir=$SOFTROCE_CACHE/kernels/$SOFTROCE_KVER dl
  if [[ -e $kdir/.complete ]]; then
    # Kernels unpacked before the PVH shortcut existed get it now, once.
    if [[ ! -e $kdir/boot/vmlinux-pvh && ! -e $kdir/boot/.no-pvh ]]; then
      softroce_extract_vmlinux "$kdir/boot/vmlinuz-$SOFTROCE_KVER" "$kdir/boot/vmlinux-pvh"
      [[ -e $kdir/boot/vmlinux-pvh ]] || touch "$kdir/boot/.no-pvh"
    fi
    return 0
  fi
  softroce_note "preparing kernel $SOFTROCE_KVER in $SOFTROCE_CACHE (once)"
  rm -rf "$kdir" "$kdir.partial"
  dl=$(mktemp -d "$SOFTROCE_CACHE/download.XXXXXX") || softroce_die "mktemp in $SOFTROCE_CACHE"
  # apt's sandbox user (_apt) cannot reach a root-only cache dir: download as ourselves.
  (cd "$dl" && softroce_apt download download -q -o APT::Sandbox::User="$(id -un)" \
    "linux-image-$SOFTROCE_KVER") || exit 125
  mkdir -p "$kdir.partial"
  dpkg -x "$dl"/linux-image-"$SOFTROCE_KVER"_*.deb "$kdir.partial" ||
    softroce_die "dpkg -x linux-image-$SOFTROCE_KVER failed"
  rm -rf "$dl"
  # The .deb ships no modules.dep: its postinst normally runs depmod.
  depmod -b "$kdir.partial" "$SOFTROCE_KVER" || softroce_die "depmod -b for $SOFTROCE_KVER failed"
  [[ -r $kdir.partial/boot/vmlinuz-$SOFTROCE_KVER ]] || softroce_die "no vmlinuz in linux-image-$SOFTROCE_KVER"
  softroce_extract_vmlinux "$kdir.partial/boot/vmlinuz-$SOFTROCE_KVER" "$kdir.partial/boot/vmlinux-pvh"
  [[ -e $kdir.partial/boot/vmlinux-pvh ]] || touch "$kdir.partial/boot/.no-pvh"
  mv "$kdir.partial" "$kdir" || softroce_die "cannot rename $kdir.partial"
  touch "$kdir/.complete" || softroce_die "cannot finish $kdir"
}

# Under TCG the bzImage's own xz decompressor takes ~3 s of every boot. The kernel inside is an ELF
# with a PVH entry note (CONFIG_PVH), which qemu boots directly: unpack it once. Without the note
# (or on any error) nothing is written and the bzImage is booted.
softroce_extract_vmlinux() {
  local bz=$1 out=$2 off
  off=$(LC_ALL=C grep -abo -m1 -P '\xfd7zXZ\x00' "$bz" | head -n 1 | cut -d: -f1)
  [[ -n $off ]] || return 0
  # xz stops after the kernel's stream, so tail may die of SIGPIPE: only xz's status counts.
  tail -c +$((off + 1)) "$bz" 2>/dev/null | xz -dc --single-stream >"$out.tmp" 2>/dev/null
  if ((PIPESTATUS[1] != 0)); then
    rm -f "$out.tmp"
    return 0
  fi
  # XEN_ELFNOTE_PHYS32_ENTRY (0x12): namesz 4, descsz 8, type 0x12, "Xen\0".
  if [[ $(head -c 4 "$out.tmp") == $'\x7fELF' ]] &&
    LC_ALL=C grep -qaP '\x04\x00\x00\x00\x08\x00\x00\x00\x12\x00\x00\x00Xen\x00' "$out.tmp"; then
    mv -f "$out.tmp" "$out"
  else
    rm -f "$out.tmp"
  fi
}

# Sets SOFTROCE_INITRD.
softroce_prepare_initramfs() {
  local kdir=$SOFTROCE_CACHE/kernels/$SOFTROCE_KVER mdir hash out tree m path f
  mdir=$kdir/lib/modules/$SOFTROCE_KVER
  hash=$({
    cat "$SOFTROCE_DIR/init" "$SOFTROCE_DIR/guest-main.sh" "$SOFTROCE_DIR/rxe-env.sh"
    echo "${SOFTROCE_INITRD_MODULES[*]}"
    sha256sum </bin/busybox
  } | sha256sum | cut -c1-16)
  out=$SOFTROCE_CACHE/initramfs/$SOFTROCE_KVER-$hash.cpio
  SOFTROCE_INITRD=$out
  if [[ -s $out ]]; then
    touch "$out"
    return 0
  fi
  mkdir -p "$SOFTROCE_CACHE/initramfs"
  tree=$(mktemp -d "$SOFTROCE_CACHE/initramfs/tree.XXXXXX") || softroce_die "mktemp initramfs"
  mkdir -p "$tree/bin" "$tree/modules"
  cp /bin/busybox "$tree/bin/busybox" || softroce_die "copy /bin/busybox"
  install -m 0755 "$SOFTROCE_DIR/init" "$tree/init"
  install -m 0644 "$SOFTROCE_DIR/guest-main.sh" "$SOFTROCE_DIR/rxe-env.sh" "$tree/"
  echo "$SOFTROCE_KVER" >"$tree/kver"
  for m in "${SOFTROCE_INITRD_MODULES[@]}"; do
    path=$(grep -m1 -E "(^|/)$m\.ko(\.[a-z]+)?:" "$mdir/modules.dep" | cut -d: -f1)
    [[ -n $path ]] || softroce_die "module $m not in $SOFTROCE_KVER"
    f=$mdir/$path
    case $f in
      *.ko) cp "$f" "$tree/modules/$m.ko" ;;
      *.ko.xz) xz -dc "$f" >"$tree/modules/$m.ko" ;;
      *.ko.zst) zstd -qdc "$f" >"$tree/modules/$m.ko" ;;
      *.ko.gz) gzip -dc "$f" >"$tree/modules/$m.ko" ;;
      *) false ;;
    esac || softroce_die "cannot copy module $f"
    echo "$m" >>"$tree/modules.order"
  done
  # Uncompressed: the archive is ~3 MB and TCG is slow at decompressing it.
  (cd "$tree" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) >"$out.tmp" ||
    softroce_die "cpio initramfs failed"
  mv -f "$out.tmp" "$out"
  rm -rf "$tree"
}

# --hosts 2: Open MPI's launcher reaches the second guest over ssh. The server is unpacked, not
# installed: the package's postinst would start an sshd on the host. Sets SOFTROCE_SSHD_ROOT (its
# usr/sbin/sshd needs LD_LIBRARY_PATH=ROOT/usr/lib/x86_64-linux-gnu for libwrap).
softroce_prepare_sshd() {
  local dir=$SOFTROCE_CACHE/sshd dl p
  SOFTROCE_SSHD_ROOT=$dir
  [[ -e $dir/.complete ]] && return 0
  softroce_note "unpacking openssh-server into $dir (once)"
  rm -rf "$dir" "$dir.partial"
  apt-cache show openssh-server libwrap0 >/dev/null 2>&1 || softroce_apt update update -q
  dl=$(mktemp -d "$SOFTROCE_CACHE/download.XXXXXX") || softroce_die "mktemp in $SOFTROCE_CACHE"
  (cd "$dl" && softroce_apt download-sshd download -q -o APT::Sandbox::User="$(id -un)" \
    openssh-server libwrap0) || exit 125
  mkdir -p "$dir.partial"
  for p in "$dl"/*.deb; do
    dpkg -x "$p" "$dir.partial" || softroce_die "dpkg -x $p failed"
  done
  rm -rf "$dl"
  [[ -x $dir.partial/usr/sbin/sshd ]] || softroce_die "no usr/sbin/sshd in openssh-server"
  mv "$dir.partial" "$dir" || softroce_die "cannot rename $dir.partial"
  touch "$dir/.complete" || softroce_die "cannot finish $dir"
}

# Removes other kernels nobody is booting (their .lock is free) and stale initramfs and logs.
softroce_prune_cache() {
  local d k fd
  for d in "$SOFTROCE_CACHE"/kernels/*/; do
    [[ -d $d ]] || continue
    k=$(basename "$d")
    [[ $k == "$SOFTROCE_KVER" ]] && continue
    exec {fd}>"$SOFTROCE_CACHE/kernels/$k.lock"
    if flock -n -x "$fd"; then
      rm -rf "$SOFTROCE_CACHE/kernels/$k" "$SOFTROCE_CACHE/kernels/$k.lock" \
        "$SOFTROCE_CACHE/initramfs/$k-"*.cpio
    fi
    exec {fd}>&-
  done
  find "$SOFTROCE_CACHE/initramfs" "$SOFTROCE_CACHE/logs" -maxdepth 1 -type f -mtime +7 \
    -delete 2>/dev/null
  find "$SOFTROCE_CACHE" -maxdepth 2 \( -name 'download.*' -o -name 'tree.*' -o -name '*.partial' \) \
    -mmin +60 -exec rm -rf {} + 2>/dev/null
  return 0
}

# Everything above, under the cache lock. Sets SOFTROCE_KVER, SOFTROCE_KERNEL, SOFTROCE_MODDIR,
# SOFTROCE_INITRD, and with an argument above 1 (hosts) SOFTROCE_SSHD_ROOT.
softroce_prepare() {
  local fd
  mkdir -p "$SOFTROCE_CACHE/kernels" "$SOFTROCE_CACHE/initramfs" "$SOFTROCE_CACHE/logs" ||
    softroce_die "cannot create cache $SOFTROCE_CACHE"
  exec {fd}>"$SOFTROCE_CACHE/prepare.lock"
  flock -w 1800 -x "$fd" || softroce_die "timed out waiting for $SOFTROCE_CACHE/prepare.lock"
  softroce_install_packages
  softroce_resolve_kernel
  softroce_prepare_kernel
  softroce_prepare_initramfs
  if ((${1:-1} > 1)); then softroce_prepare_sshd; fi
  # Taken before the prepare lock is released, so a concurrent prune cannot take this kernel.
  exec {SOFTROCE_KERNEL_LOCK_FD}>"$SOFTROCE_CACHE/kernels/$SOFTROCE_KVER.lock"
  flock -s "$SOFTROCE_KERNEL_LOCK_FD"
  softroce_prune_cache
  exec {fd}>&-
  SOFTROCE_KERNEL=$SOFTROCE_CACHE/kernels/$SOFTROCE_KVER/boot/vmlinux-pvh
  [[ -s $SOFTROCE_KERNEL ]] ||
    SOFTROCE_KERNEL=$SOFTROCE_CACHE/kernels/$SOFTROCE_KVER/boot/vmlinuz-$SOFTROCE_KVER
  SOFTROCE_MODDIR=$SOFTROCE_CACHE/kernels/$SOFTROCE_KVER/lib/modules/$SOFTROCE_KVER
}
