#!/bin/sh
# peers-check.sh - the guest side of `testdata/vm/peers.sh --check` (busybox
# sh): on /dev/nullb0, for each of f2fs, btrfs and xfs: make the file system,
# mount it, write 8 files of 4 MiB and 256 random 8 KiB overwrites with fsync,
# unmount, and print what the device counted as written (/sys/block/X/stat
# field 7, 512-byte sectors) against what was written. Exit status: the
# number of file systems that failed.
dev=${1:-/dev/nullb0}
name=${dev#/dev/}
q=/sys/block/$name/queue
echo "kernel $(uname -r); $dev: $(cat "$q/zoned"), $(cat "$q/nr_zones") zones of" \
  "$(( $(cat "$q/chunk_sectors") / 2048 )) MiB, $(( $(cat /sys/block/"$name"/size) / 2048 )) MiB," \
  "max open $(cat "$q/max_open_zones"), max active $(cat "$q/max_active_zones")"
sectors() { awk '{print $7}' "/sys/block/$name/stat"; }
mnt=/mnt/peer
mkdir -p $mnt
failed=0
for fs in f2fs btrfs xfs; do
  echo "== $fs"
  case $fs in
    f2fs) mkfs="mkfs.f2fs -f -m $dev";;
    btrfs) mkfs="mkfs.btrfs -f -O zoned -m single -d single $dev";;
    xfs) mkfs="mkfs.xfs -f $dev";;
  esac
  if ! out=$($mkfs 2>&1); then
    echo "$out" | tail -5; echo "$fs: mkfs failed"; failed=$((failed + 1)); continue
  fi
  echo "$out" | tail -3
  if ! mount -t $fs $dev $mnt; then
    dmesg | tail -5; echo "$fs: mount failed"; failed=$((failed + 1)); continue
  fi
  df -k $mnt | tail -1
  sync; echo 3 > /proc/sys/vm/drop_caches
  w0=$(sectors) t0=$(date +%s)
  ok=1
  i=0
  while [ $i -lt 8 ]; do
    dd if=/dev/zero of=$mnt/f$i bs=1M count=4 conv=fsync 2>/dev/null || ok=0
    i=$((i + 1))
  done
  j=0
  while [ $j -lt 256 ]; do
    dd if=/dev/zero of=$mnt/f$((RANDOM % 8)) bs=8k count=1 seek=$((RANDOM % 512)) conv=notrunc,fsync 2>/dev/null || ok=0
    j=$((j + 1))
  done
  sync; echo 3 > /proc/sys/vm/drop_caches
  w1=$(sectors) t1=$(date +%s)
  host=$(( (8 * 4096 + 256 * 8) * 1024 ))
  echo "$fs: wrote $((host / 1024)) KiB; device counted $(( (w1 - w0) / 2 )) KiB written (WAF x1000 = $(( (w1 - w0) * 512 * 1000 / host ))) in $((t1 - t0)) s"
  for f in /sys/fs/$fs/$name/*gc* /sys/fs/$fs/$name/moved_blocks* /sys/fs/$fs/$name/*reclaim*; do
    [ -f "$f" ] && echo "  $f: $(cat "$f" 2>/dev/null | head -1)"
  done
  grep -a "$name" /proc/self/mountstats | head -1
  umount $mnt || { echo "$fs: umount failed"; ok=0; }
  [ $ok = 1 ] || { echo "$fs: the workload failed"; failed=$((failed + 1)); }
done
dmesg | grep -iE 'f2fs|btrfs|xfs' | tail -20
exit $failed
