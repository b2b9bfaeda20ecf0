#!/usr/bin/env bash
# run.sh - run a static Linux/amd64 binary (e.g. a Go test binary built with
# CGO_ENABLED=0 go test -c) inside a QEMU (TCG) guest that has real zoned
# block devices:
#   /dev/nullb0              null_blk, host-managed zoned, memory backed
#   /dev/nvme0n1, /dev/ng0n1 QEMU-emulated NVMe ZNS namespace (block + generic char dev)
# The binary's stdout+stderr are streamed to this script's stdout, and this
# script exits with the binary's exit status.
#
# Usage: testdata/vm/run.sh [options] [--] BINARY [ARGS...]
#   --cache DIR        cache dir for kernel/busybox/initramfs    [$ZVM_CACHE or <repo>/build/vm]
#   --zone-mb N        null_blk zone size, MiB                    [64]
#   --zone-cap-mb N    null_blk zone capacity, MiB (0 = zone size) [0]
#   --nullb-gb N       null_blk size, GiB                         [1]
#   --nullb-args STR   extra null_blk params, e.g. "zone_nr_conv=1 zone_max_open=8 bs=4096"
#   --nullb-mb N       make null_blk through configfs instead, N MiB (any size, not whole GiB);
#                      --nullb-args are then configfs attributes (bs= means blocksize=)
#   --no-nullb         don't load null_blk
#   --nvme-mb N        ZNS namespace size, MiB (0 = no NVMe)      [1024]
#   --nvme-zone-mb N   ZNS zone size, MiB                         [64]
#   --nvme-zcap-mb N   ZNS zone capacity, MiB                     [62]
#   --nvme-lbs N       ZNS logical block size (512|4096)          [512]
#   --nvme-args STR    extra nvme-ns properties, e.g. "zoned.max_open=14,zoned.max_active=14"
#   --mem MB           guest RAM                                  [2048]
#   --smp N            guest vCPUs                                [2]
#   --timeout S        wall-clock limit for the whole VM run      [900]
#   --share DIR        9p-mount host DIR read-write at /mnt/share in the guest (binary runs there)
#   --file SRC[:DST]   add a host file to the guest rootfs (DST default /zvm/files/<name>); repeatable
#   --overlay DIR      copy DIR's tree onto the guest rootfs (e.g. DIR/sbin/x -> /sbin/x); repeatable
#   --kernel SUITE     boot the kernel of another Debian suite, e.g. sid (>= 6.15, for XFS zoned) or
#                      trixie-backports, fetched with a private apt configuration   [the host's]
#   --env K=V          environment variable for the binary; repeatable
#   --modules "M..."   extra kernel modules to load (deps resolved), e.g. "virtio_blk"
#   --qemu-arg ARG     extra QEMU argument (repeatable), e.g. --qemu-arg -drive --qemu-arg file=x.img,if=virtio,format=raw
#   --keep             keep the run dir (console.log, initrd) and print its path
#   -v                 stream the guest console (kernel log, init messages) to stderr
# Env: ZVM_CACHE (cache dir), ZVM_KERNEL_PKG (e.g. linux-image-6.1.0-57-amd64; default:
#      what linux-image-amd64 depends on), ZVM_KERNEL_SUITE (as --kernel),
#      ZVM_KERNEL_IMAGE (boot this kernel image instead), ZVM_CMDLINE_EXTRA (appended to
#      the guest kernel cmdline, e.g. loglevel=7).
# Guest: busybox initramfs; binary at /zvm/bin, cwd /tmp (tmpfs) or /mnt/share; stdout and
#      stderr both go to the 2nd serial port (ttyS1 -> host stdout, ~370 KB/s); kernel
#      console is ttyS0 -> run dir console.log; exit status comes back as a ZVM_EXIT=<n>
#      line that the guest init writes to /dev/kmsg.
# Exit status: the binary's own status; 124 = timeout; 125 = harness/guest failure
#             (console log tail is printed to stderr).
# Needs: Debian (apt) host, root for the first-time apt-get install/download.
# Example (another package's tests against the real devices):
#   CGO_ENABLED=0 go test -c -ldflags=-checklinkname=0 -o build/engine.test ./engine
#   testdata/vm/run.sh --nullb-args "zone_max_open=4 zone_max_active=6" \
#     --env ZONEFOLD_TEST_DEVICES=/dev/nullb0,/dev/ng0n1 build/engine.test -test.v
# shellcheck disable=SC2054  # commas in QEMU args are intended
set -euo pipefail

die() { echo "vm: $*" >&2; exit 125; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

CACHE=${ZVM_CACHE:-$(cd "$here/../.." && pwd)/build/vm}
ZONE_MB=64 ZONE_CAP_MB=0 NULLB_GB=1 NULLB_ARGS="" NULLB=1
NVME_MB=1024 NVME_ZONE_MB=64 NVME_ZCAP_MB=62 NVME_LBS=512 NVME_ARGS=""
MEM=2048 SMP=2 TIMEOUT=900 SHARE="" KEEP=0 VERBOSE=0 NULLB_MB=0
FILES=() ENVS=() QEXTRA=() XMODS="" OVERLAYS=() SUITE=${ZVM_KERNEL_SUITE:-}
while [ $# -gt 0 ]; do
  case "$1" in
    --cache) CACHE=$2; shift 2;;
    --zone-mb) ZONE_MB=$2; shift 2;;
    --zone-cap-mb) ZONE_CAP_MB=$2; shift 2;;
    --nullb-gb) NULLB_GB=$2; shift 2;;
    --nullb-args) NULLB_ARGS=$2; shift 2;;
    --nullb-mb) NULLB_MB=$2; shift 2;;
    --no-nullb) NULLB=0; shift;;
    --nvme-mb) NVME_MB=$2; shift 2;;
    --nvme-zone-mb) NVME_ZONE_MB=$2; shift 2;;
    --nvme-zcap-mb) NVME_ZCAP_MB=$2; shift 2;;
    --nvme-lbs) NVME_LBS=$2; shift 2;;
    --nvme-args) NVME_ARGS=$2; shift 2;;
    --mem) MEM=$2; shift 2;;
    --smp) SMP=$2; shift 2;;
    --timeout) TIMEOUT=$2; shift 2;;
    --share) SHARE=$(cd "$2" && pwd); shift 2;;
    --file) FILES+=("$2"); shift 2;;
    --overlay) OVERLAYS+=("$(cd "$2" && pwd)"); shift 2;;
    --kernel) SUITE=$2; shift 2;;
    --env) ENVS+=("$2"); shift 2;;
    --modules) XMODS="$XMODS $2"; shift 2;;
    --qemu-arg) QEXTRA+=("$2"); shift 2;;
    --keep) KEEP=1; shift;;
    -v) VERBOSE=1; shift;;
    --) shift; break;;
    -h|--help) sed -n '2,/^# shellcheck/p' "$0" | sed '$d;s/^# \{0,1\}//'; exit 0;;
    -*) die "unknown option $1";;
    *) break;;
  esac
done
[ $# -ge 1 ] || die "usage: run.sh [options] [--] BINARY [ARGS...]  (see --help)"
BIN=$1; shift
[ -f "$BIN" ] || die "no such binary: $BIN"
if command -v file >/dev/null && file -L "$BIN" | grep -q 'ELF.*dynamically linked'; then
  echo "vm: warning: $BIN does not look statically linked (build with CGO_ENABLED=0)" >&2
fi

# ---------------------------------------------------------------- cache ----
# Everything below is idempotent; a complete cache is marked by $CACHE/ready.<kver>.
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"; flock 9       # serialize cache setup between parallel runs

need_pkgs=()
command -v qemu-system-x86_64 >/dev/null || need_pkgs+=(qemu-system-x86)
command -v cpio >/dev/null || need_pkgs+=(cpio)
command -v depmod >/dev/null || need_pkgs+=(kmod)
command -v flock >/dev/null || need_pkgs+=(util-linux)
command -v xz >/dev/null || need_pkgs+=(xz-utils)   # to unpack vmlinux (faster boot)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "vm: installing ${need_pkgs[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  { apt-get -q update >&2 && apt-get install -y -q --no-install-recommends "${need_pkgs[@]}" >&2; } ||
    die "apt-get install ${need_pkgs[*]} failed"
fi

extract_vmlinux() {   # like linux/scripts/extract-vmlinux
  local img=$1 out=$2 magic cmd off
  for spec in '\xfd7zXZ\x00:xz -dc --single-stream' '\x28\xb5\x2f\xfd:zstd -dcq' '\x1f\x8b\x08:gzip -dc'; do
    magic=${spec%%:*}; cmd=${spec#*:}
    command -v "${cmd%% *}" >/dev/null || continue
    for off in $(LC_ALL=C grep -aboP "$magic" "$img" 2>/dev/null | cut -d: -f1 | head -5); do
      tail -c +$((off + 1)) "$img" | $cmd > "$out.tmp" 2>/dev/null || true
      if [ "$(head -c 4 "$out.tmp" | od -An -tx1 | tr -d ' ')" = 7f454c46 ]; then mv "$out.tmp" "$out"; return 0; fi
    done
  done
  rm -f "$out.tmp"; return 1
}
# The kernel comes from the host's apt (Debian stable), or with --kernel
# SUITE from that suite through a private apt configuration (suite-apt.sh:
# apt-cache and apt-get download only, nothing installed on the host).
KPKGFILE=$CACHE/kpkg DEBS=$CACHE/debs
if [ -n "$SUITE" ]; then
  KPKGFILE=$CACHE/kpkg-$SUITE DEBS=$CACHE/debs-$SUITE
  # shellcheck source=suite-apt.sh
  . "$here/suite-apt.sh"
fi
kcache() { if [ -n "$SUITE" ]; then apt-cache "${SUITE_APT[@]}" "$@"; else apt-cache "$@"; fi; }
resolve_kpkg() {
  kcache depends linux-image-amd64 2>/dev/null |
    awk '/Depends: linux-image-[0-9]/{print $2; exit}'
}
# kernel_debs PKG: PKG and, where the suite splits the kernel (sid:
# linux-image-X is empty and depends on linux-binary-X, linux-modules-X,
# linux-base-X), those parts.
kernel_debs() {
  echo "$1"
  [ -z "$SUITE" ] || kcache depends "$1" 2>/dev/null |
    awk -v v="-${1#linux-image-}" '$1=="Depends:" && $2 ~ /^linux-/ && substr($2, length($2)-length(v)+1) == v {print $2}'
}
dl() {   # apt-get download into $CACHE/debs unless a matching .deb is already there
  ( cd "$CACHE/debs" && { ls "$1"_*.deb >/dev/null 2>&1 ||
      apt-get -q -o APT::Sandbox::User=root download "$1" >&2; } )
}
kdl() {  # the kernel's packages, from the host's apt or the suite's
  if [ -z "$SUITE" ]; then dl "$1"; else
    # shellcheck disable=SC2046
    suite_download "$DEBS" $(kernel_debs "$1"); fi
}
KPKG=${ZVM_KERNEL_PKG:-}
[ -z "$KPKG" ] && [ -f "$KPKGFILE" ] && KPKG=$(cat "$KPKGFILE")
if [ -z "$KPKG" ] || [ ! -f "$CACHE/ready.${KPKG#linux-image-}" ]; then
  mkdir -p "$CACHE/debs" "$DEBS"
  [ -z "$SUITE" ] || suite_apt "$CACHE" "$SUITE" || die "cannot fetch the package lists of suite $SUITE"
  [ -n "$KPKG" ] || KPKG=$(resolve_kpkg)
  # stale or missing package lists: the security archive drops old kernel ABIs
  if [ -z "$KPKG" ] || ! kdl "$KPKG" || ! dl busybox-static; then
    apt-get -q update >&2 || true
    [ -z "$SUITE" ] || suite_apt_update || true
    [ -n "${ZVM_KERNEL_PKG:-}" ] || KPKG=$(resolve_kpkg)
    [ -n "$KPKG" ] || die "cannot resolve the kernel package from linux-image-amd64${SUITE:+ in $SUITE}"
    kdl "$KPKG" && dl busybox-static || die "apt-get download $KPKG busybox-static failed"
  fi
  KVER=${KPKG#linux-image-}
  ROOT=$CACHE/root-$KVER
  echo "vm: preparing kernel $KVER${SUITE:+ ($SUITE)} and busybox in $CACHE" >&2
  rm -rf "$ROOT"
  for p in $(kernel_debs "$KPKG"); do dpkg -x "$(ls "$DEBS/$p"_*.deb | head -1)" "$ROOT"; done
  dpkg -x "$(ls "$CACHE/debs"/busybox-static_*.deb | head -1)" "$ROOT"
  # newer kernels ship their modules (and image) in /usr/lib/modules only
  [ -e "$ROOT/lib" ] || [ ! -d "$ROOT/usr/lib/modules" ] || ln -s usr/lib "$ROOT/lib"
  mkdir -p "$ROOT/boot"
  [ -f "$ROOT/boot/vmlinuz-$KVER" ] || [ ! -f "$ROOT/lib/modules/$KVER/vmlinuz" ] ||
    ln "$ROOT/lib/modules/$KVER/vmlinuz" "$ROOT/boot/vmlinuz-$KVER"
  depmod -b "$ROOT" "$KVER"
  # An uncompressed ELF vmlinux boots via PVH (CONFIG_PVH=y) and skips the
  # in-guest decompression, which costs ~2.5 s under TCG. Optional.
  extract_vmlinux "$ROOT/boot/vmlinuz-$KVER" "$ROOT/boot/vmlinux-$KVER" ||
    echo "vm: could not extract vmlinux, booting the compressed image" >&2
  rm -rf "$ROOT/usr/share/doc" "$ROOT/usr/lib/linux" "$CACHE/debs" "$DEBS" 2>/dev/null || true
  echo "$KPKG" > "$KPKGFILE"
  touch "$CACHE/ready.$KVER"
fi
KVER=${KPKG#linux-image-}
ROOT=$CACHE/root-$KVER
VMLINUZ=$ROOT/boot/vmlinux-$KVER
[ -f "$VMLINUZ" ] || VMLINUZ=$ROOT/boot/vmlinuz-$KVER
VMLINUZ=${ZVM_KERNEL_IMAGE:-$VMLINUZ}

# ordered, de-duplicated insmod list (module paths relative to the rootfs,
# without the .xz/.zst of a compressed module: modfile unpacks those)
modlist() {
  modprobe -d "$ROOT" -S "$KVER" --show-depends -a "$@" 2>/dev/null |
    awk '$1=="insmod"{print $2}' | sed "s|^$ROOT/||; s/\.ko\.\(xz\|zst\)$/.ko/" | awk '!seen[$0]++'
}
# modfile M: the path of module M in the cache, decompressed on first use
# (busybox insmod may not read compressed modules; newer kernels ship .ko.xz)
modfile() {
  local f=$ROOT/$1
  if [ ! -f "$f" ]; then
    if [ -f "$f.xz" ]; then xz -dc "$f.xz" > "$f.$$" && mv "$f.$$" "$f"
    elif [ -f "$f.zst" ]; then zstd -dcq "$f.zst" > "$f.$$" && mv "$f.$$" "$f"
    fi
  fi
  echo "$f"
}
ALLMODS="null_blk nvme virtio_pci 9pnet_virtio 9p"

# base initramfs: busybox + all modules we may load + /init (cached per kernel+init version)
INIT_SCRIPT='#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/sbin HOME=/tmp TMPDIR=/tmp
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mkdir -p /tmp /mnt/share; mount -t tmpfs tmp /tmp
. /zvm/config.sh
while read -r m; do
  [ -n "$m" ] || continue
  case "$m" in */null_blk.ko) p="$ZVM_NULLB_PARAMS";; *) p="";; esac
  insmod "/$m" $p 2>/dev/null || case "$m" in *crct10dif-pclmul*) ;; *) echo "zvm: insmod $m $p failed";; esac
done < /zvm/modules.list
if [ -n "$ZVM_NULLB_CFS" ]; then   # null_blk through configfs: sizes in MiB
  grep -q " /sys/kernel/config " /proc/mounts || mount -t configfs configfs /sys/kernel/config
  d=/sys/kernel/config/nullb/nullb0
  mkdir "$d" || echo "zvm: cannot make $d"
  for kv in $ZVM_NULLB_CFS; do
    echo "${kv#*=}" > "$d/${kv%%=*}" || echo "zvm: null_blk configfs ${kv%%=*}=${kv#*=} failed"
  done
  echo 1 > "$d/power" || echo "zvm: null_blk configfs power=1 failed"
fi
wait_dev() { i=0; while [ ! -e "$1" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; [ -e "$1" ] || echo "zvm: $1 did not appear"; }
[ "$ZVM_NULLB" = 1 ] && wait_dev /dev/nullb0
[ "$ZVM_NVME" = 1 ] && { wait_dev /dev/nvme0n1; wait_dev /dev/ng0n1; }
cd /tmp
if [ "$ZVM_SHARE" = 1 ]; then
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 zvmshare /mnt/share && cd /mnt/share || echo "zvm: 9p mount failed"
fi
[ -f /zvm/env.sh ] && . /zvm/env.sh
. /zvm/args.sh
echo "zvm: devices ready, running /zvm/bin $*"
exec 3<>/dev/ttyS1
stty raw -echo <&3
/zvm/bin "$@" >&3 2>&3 </dev/null 3>&-
rc=$?
exec 3>&-          # last close of ttyS1 waits until its output has drained
[ "$ZVM_SHARE" = 1 ] && { sync; umount /mnt/share; }
echo "<2>ZVM_EXIT=$rc" > /dev/kmsg
poweroff -f'
INIT_VER=$(printf '%s\n%s' "$INIT_SCRIPT" "$ALLMODS" | md5sum | cut -c1-12)
BASE=$CACHE/base-$KVER-$INIT_VER.cpio.gz
if [ ! -f "$BASE" ] || [ ! -f "$BASE.mods" ]; then
  st=$(mktemp -d "$CACHE/stage.XXXXXX")
  mkdir -p "$st"/{bin,sbin,dev,proc,sys,tmp,mnt,zvm}
  cp "$ROOT/bin/busybox" "$st/bin/busybox"
  printf '%s\n' "$INIT_SCRIPT" > "$st/init"; chmod 755 "$st/init"
  modlist $ALLMODS > "$BASE.mods"
  for m in $(cat "$BASE.mods"); do
    mkdir -p "$st/$(dirname "$m")"; cp "$(modfile "$m")" "$st/$m"
  done
  ( cd "$st" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0 ) | gzip -1 > "$BASE.tmp"
  # pad to a 4-byte boundary so an uncompressed cpio can be appended
  sz=$(stat -c %s "$BASE.tmp"); pad=$(( (4 - sz % 4) % 4 ))
  head -c $pad /dev/zero >> "$BASE.tmp"
  mv "$BASE.tmp" "$BASE"; rm -rf "$st"
fi
flock -u 9

# ------------------------------------------------------------------ run ----
mkdir -p "$CACHE/runs"
RUN=$(mktemp -d "$CACHE/runs/run.XXXXXX")
TAILPID=""
cleanup() {
  [ -n "$TAILPID" ] && kill "$TAILPID" 2>/dev/null || true
  if [ "$KEEP" = 1 ]; then echo "vm: run dir kept: $RUN" >&2; else rm -rf "$RUN"; fi
}
trap cleanup EXIT

q() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
st=$RUN/stage; mkdir -p "$st/zvm/files"
cp "$BIN" "$st/zvm/bin"; chmod 755 "$st/zvm/bin"
{ printf 'set --'; for a in "$@"; do printf ' %s' "$(q "$a")"; done; echo; } > "$st/zvm/args.sh"
: > "$st/zvm/env.sh"
for e in "${ENVS[@]+"${ENVS[@]}"}"; do printf 'export %s=%s\n' "${e%%=*}" "$(q "${e#*=}")" >> "$st/zvm/env.sh"; done
for f in "${FILES[@]+"${FILES[@]}"}"; do
  src=${f%%:*}; dst=${f#*:}; [ "$dst" = "$f" ] && dst=/zvm/files/$(basename "$src")
  mkdir -p "$st/$(dirname "$dst")"; cp -a "$src" "$st/$dst"
done
for o in "${OVERLAYS[@]+"${OVERLAYS[@]}"}"; do cp -a "$o/." "$st/"; done
mods="" ; [ "$NULLB" = 1 ] && mods="$mods null_blk"
NVME=0; [ "$NVME_MB" -gt 0 ] && { NVME=1; mods="$mods nvme"; }
[ -n "$SHARE" ] && mods="$mods virtio_pci 9pnet_virtio 9p"
mods="$mods $XMODS"
: > "$st/zvm/modules.list"
if [ -n "${mods// /}" ]; then
  modlist $mods > "$st/zvm/modules.list"
  [ -s "$st/zvm/modules.list" ] || die "cannot resolve modules: $mods"
  for m in $(cat "$st/zvm/modules.list"); do   # modules not in the cached base go in the run cpio
    grep -qxF "$m" "$BASE.mods" || { mkdir -p "$st/$(dirname "$m")"; cp "$(modfile "$m")" "$st/$m"; }
  done
fi
nullb_params="nr_devices=1 zoned=1 memory_backed=1 gb=$NULLB_GB zone_size=$ZONE_MB"
[ "$ZONE_CAP_MB" -gt 0 ] && nullb_params="$nullb_params zone_capacity=$ZONE_CAP_MB"
nullb_cfs=""
if [ "$NULLB" = 1 ] && [ "$NULLB_MB" -gt 0 ]; then   # configfs: the module makes no device, init makes nullb0
  nullb_cfs="size=$NULLB_MB zoned=1 memory_backed=1 zone_size=$ZONE_MB"
  [ "$ZONE_CAP_MB" -gt 0 ] && nullb_cfs="$nullb_cfs zone_capacity=$ZONE_CAP_MB"
  for kv in $NULLB_ARGS; do case "$kv" in bs=*) kv=blocksize=${kv#bs=};; esac; nullb_cfs="$nullb_cfs $kv"; done
  nullb_params="nr_devices=0" NULLB_ARGS=""
fi
cat > "$st/zvm/config.sh" <<EOF
ZVM_NULLB=$NULLB
ZVM_NVME=$NVME
ZVM_SHARE=$([ -n "$SHARE" ] && echo 1 || echo 0)
ZVM_NULLB_PARAMS='$nullb_params $NULLB_ARGS'
ZVM_NULLB_CFS='$nullb_cfs'
EOF
( cd "$st" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0 ) > "$RUN/run.cpio"
cat "$BASE" "$RUN/run.cpio" > "$RUN/initrd"

qargs=(-accel tcg,thread=multi -cpu max -m "$MEM" -smp "$SMP"
  -nodefaults -no-user-config -display none -vga none -no-reboot
  -kernel "$VMLINUZ" -initrd "$RUN/initrd"
  -append "console=ttyS0 quiet loglevel=4 printk.devkmsg=on panic=-1 mitigations=off ${ZVM_CMDLINE_EXTRA:-}"
  -chardev file,id=con,path="$RUN/console.log" -serial chardev:con
  -chardev stdio,id=out,signal=on -serial chardev:out)
if [ "$NVME" = 1 ]; then
  truncate -s "${NVME_MB}M" "$RUN/zns.img"
  qargs+=(-drive file="$RUN/zns.img",id=zns,format=raw,if=none,cache=unsafe
    -device nvme,id=nvme0,serial=zvm0001,zoned.zasl=5
    -device "nvme-ns,drive=zns,bus=nvme0,nsid=1,logical_block_size=$NVME_LBS,physical_block_size=$NVME_LBS,zoned=true,zoned.zone_size=${NVME_ZONE_MB}M,zoned.zone_capacity=${NVME_ZCAP_MB}M${NVME_ARGS:+,$NVME_ARGS}")
fi
qargs+=("${QEXTRA[@]+"${QEXTRA[@]}"}")
[ -n "$SHARE" ] && qargs+=(-virtfs "local,path=$SHARE,mount_tag=zvmshare,security_model=none,id=zvmshare")

: > "$RUN/console.log"
if [ "$VERBOSE" = 1 ]; then tail -n +1 -F "$RUN/console.log" >&2 2>/dev/null & TAILPID=$!; fi
set +e
timeout -k 10 "$TIMEOUT" qemu-system-x86_64 "${qargs[@]}" </dev/null
qrc=$?
set -e
[ -n "$TAILPID" ] && { sleep 0.3; kill "$TAILPID" 2>/dev/null; TAILPID=""; }
rc=$(sed -n 's/.*ZVM_EXIT=\([0-9]*\).*/\1/p' "$RUN/console.log" | tail -1)
if [ -n "$rc" ]; then exit "$rc"; fi
if [ $qrc = 124 ] || [ $qrc = 137 ]; then
  echo "vm: timed out after ${TIMEOUT}s; console tail:" >&2; tail -n 30 "$RUN/console.log" >&2; exit 124
fi
echo "vm: guest did not report an exit status (qemu rc=$qrc); console tail:" >&2
tail -n 30 "$RUN/console.log" >&2
exit 125
