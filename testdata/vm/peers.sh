#!/usr/bin/env bash
# peers.sh - run a static binary in the VM harness (run.sh) next to the
# kernel's zoned file systems: the guest gets a zoned null_blk made through
# configfs (MiB sizes, conventional zones at the start), the f2fs, btrfs and
# xfs modules, and mkfs.f2fs, mkfs.btrfs and mkfs.xfs on its PATH.
#
# Usage: testdata/vm/peers.sh [options] [run.sh options] [--] BINARY [ARGS...]
#        testdata/vm/peers.sh [options] [run.sh options] --check
#   --check            run peers-check.sh as the binary: mkfs, mount, a small
#                      write workload and the device's written sectors, per file system
#   --kernel SUITE     (run.sh) e.g. sid: a kernel >= 6.15, which XFS zoned needs
#   run.sh options come after these defaults and override them:
#     --nullb-mb 256 --zone-mb 4 --nullb-args "zone_nr_conv=8 bs=4096" --nvme-mb 0
#     --mem 2048 --timeout 1800
#
# Guest (besides what run.sh gives):
#   /dev/nullb0        null_blk host-managed zoned, memory backed, through configfs
#   /sbin/mkfs.f2fs, /sbin/mkfs.btrfs
#                      the host's f2fs-tools and btrfs-progs (Debian stable; installed
#                      on the host if missing), their libraries and loader in /lib, /lib64
#   /sbin/mkfs.xfs     Debian sid's xfsprogs (>= 6.15, for XFS zoned), run through sid's
#                      loader and libc in /opt/sid (fetched with a private apt
#                      configuration and `apt-get download`: nothing from sid is
#                      installed on the host)
#   modules            f2fs, btrfs, xfs (and configfs, null_blk) loaded
# Env: ZVM_CACHE as run.sh (downloads stay in $ZVM_CACHE/debs-sid-tools).
# Exit status: the binary's; 124 timeout; 125 harness failure.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
die() { echo "peers: $*" >&2; exit 125; }
CACHE=${ZVM_CACHE:-$(cd "$here/../.." && pwd)/build/vm}
export ZVM_CACHE=$CACHE

CHECK=0 args=()
for a in "$@"; do
  case "$a" in
    --check) CHECK=1;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d;s/^# \{0,1\}//'; exit 0;;
    *) args+=("$a");;
  esac
done
# run.sh options end at the binary: with --check, everything given is an option.
[ "$CHECK" = 1 ] && args+=(-- "$here/peers-check.sh")

mkdir -p "$CACHE"
exec 8>"$CACHE/.peers.lock"; flock 8     # one tool tree build at a time

# ------------------------------------------------------------ host tools ----
need=()
command -v mkfs.f2fs >/dev/null || need+=(f2fs-tools)
command -v mkfs.btrfs >/dev/null || need+=(btrfs-progs)
command -v readelf >/dev/null || need+=(binutils)
command -v ldd >/dev/null || need+=(libc-bin)
if [ ${#need[@]} -gt 0 ]; then
  echo "peers: installing ${need[*]} (Debian stable)" >&2
  export DEBIAN_FRONTEND=noninteractive
  { apt-get -q update >&2 && apt-get install -y -q --no-install-recommends "${need[@]}" >&2; } ||
    die "apt-get install ${need[*]} failed"
fi

tree=$(mktemp -d "$CACHE/peers-root.XXXXXX")
trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree/sbin"

# host_tool NAME: the tool in /sbin, its libraries and loader where ldd
# found them (the guest loader searches /lib/x86_64-linux-gnu by default).
host_tool() {
  local t l
  t=$(command -v "$1") || die "$1 not found"
  install -m 755 "$t" "$tree/sbin/$1"
  for l in $(ldd "$t" | awk '$2=="=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'); do
    [ -f "$tree$l" ] || install -D -m 755 "$l" "$tree$l"
  done
}
host_tool mkfs.f2fs
host_tool mkfs.btrfs

# ------------------------------------------------------- sid's xfsprogs ----
# mkfs.xfs and the libraries it needs, found by their DT_NEEDED names in the
# unpacked packages (xfsprogs, libc6 and xfsprogs' lib* dependencies).
# shellcheck source=suite-apt.sh
. "$here/suite-apt.sh"
SID=$CACHE/sid-tools
if [ ! -f "$SID/ready" ]; then
  suite_apt "$CACHE" sid || die "cannot fetch sid's package lists"
  deps=$(apt-cache "${SUITE_APT[@]}" depends xfsprogs 2>/dev/null |
    awk '$1=="Depends:" && $2 ~ /^lib/ {print $2}' | sort -u)
  # shellcheck disable=SC2086
  suite_download "$CACHE/debs-sid-tools" xfsprogs libc6 $deps || die "apt-get download xfsprogs from sid failed"
  rm -rf "$SID"; mkdir -p "$SID"
  for d in "$CACHE/debs-sid-tools"/*.deb; do dpkg-deb -x "$d" "$SID/root"; done
  dpkg-deb -f "$(ls "$CACHE/debs-sid-tools"/xfsprogs_*.deb | head -1)" Version > "$SID/version"
  touch "$SID/ready"
fi
xver=$(cat "$SID/version")
dpkg --compare-versions "$xver" ge 6.15 ||
  echo "peers: warning: sid's xfsprogs is $xver; XFS zoned needs >= 6.15" >&2
soname_path() {   # a library's file in the unpacked sid tree
  find "$SID/root" -name "$1" \( -type f -o -type l \) 2>/dev/null | head -1
}
mkdir -p "$tree/opt/sid/lib" "$tree/opt/sid/sbin"
install -m 755 "$SID/root/usr/sbin/mkfs.xfs" "$tree/opt/sid/sbin/mkfs.xfs"
todo=("$tree/opt/sid/sbin/mkfs.xfs")
while [ ${#todo[@]} -gt 0 ]; do
  f=${todo[0]}; todo=("${todo[@]:1}")
  for so in $(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    [ -f "$tree/opt/sid/lib/$so" ] && continue
    p=$(soname_path "$so"); [ -n "$p" ] || die "mkfs.xfs needs $so: not in sid's packages"
    cp -L "$p" "$tree/opt/sid/lib/$so"; todo+=("$tree/opt/sid/lib/$so")
  done
done
ld=$(soname_path ld-linux-x86-64.so.2); [ -n "$ld" ] || die "no loader in sid's libc6"
cp -L "$ld" "$tree/opt/sid/lib/ld-linux-x86-64.so.2"
# TEST_DIR, TEST_DEV and QA_CHECK_FS together let mkfs.xfs make a file system
# below its 300 MB floor (it allows that for fstests); a benchmark on a small
# memory-backed device needs it.
cat > "$tree/sbin/mkfs.xfs" <<'EOF'
#!/bin/sh
# sid's mkfs.xfs through sid's loader and libc (see testdata/vm/peers.sh)
export TEST_DIR=${TEST_DIR:-/tmp} TEST_DEV=${TEST_DEV:-/dev/null} QA_CHECK_FS=${QA_CHECK_FS:-1}
exec /opt/sid/lib/ld-linux-x86-64.so.2 --library-path /opt/sid/lib /opt/sid/sbin/mkfs.xfs "$@"
EOF
chmod 755 "$tree/sbin/mkfs.xfs"
flock -u 8

echo "peers: guest tools: mkfs.f2fs $(dpkg-query -W -f='${Version}' f2fs-tools 2>/dev/null || echo '?')," \
  "mkfs.btrfs $(dpkg-query -W -f='${Version}' btrfs-progs 2>/dev/null || echo '?'), mkfs.xfs $xver (sid)" >&2
set +e
"$here/run.sh" --nullb-mb 256 --zone-mb 4 --nullb-args "zone_nr_conv=8 bs=4096" --nvme-mb 0 \
  --mem 2048 --timeout 1800 --modules "f2fs btrfs xfs" --overlay "$tree" "${args[@]}"
rc=$?
exit $rc
