#!/usr/bin/env bash
# bench-peers.sh - make bench-peers: zonefold bench peers in the VM harness,
# where there is no zoned device: on one null_blk zoned device
# (testdata/vm/peers.sh), once with Debian's stable kernel (f2fs, btrfs) and
# once with Debian sid's (>= 6.15, for XFS zoned). Each run is its own
# comparison: zonefold runs in both, and only ratios inside one run compare
# (throughput under QEMU's TCG depends on the machine's load).
#
# Usage: testdata/vm/bench-peers.sh [extra flags for zonefold bench peers]
# Env (defaults in brackets):
#   BENCH_PEERS_MB        null_blk size, MiB                         [256]
#   BENCH_PEERS_ZONE_MB   zone size, MiB (btrfs needs >= 4)          [4]
#   BENCH_PEERS_CONV      conventional zones (f2fs needs >= 5)       [8]
#   BENCH_PEERS_FLAGS     bench peers flags that size the runs. The defaults fit one
#                         VM run in ~15 minutes under TCG on a loaded 2-core machine:
#                         64K writes (TCG's cost is per write), the workloads that
#                         have targets (not uniform), short windows, and a limit per
#                         run so that a target on its way to ENOSPC cannot hold up
#                         the others
#                         [--util 0.5 --writers 3 --bs 64K --window 0.1 --warmup-cap 1 --measure 0.2 --workload hotcold,seed,lifetimes --run-limit 150s]
#   BENCH_PEERS_KERNELS   runs, "name:suite:targets" each; suite "-" is the host's
#                         [stable:-:zonefold,f2fs,btrfs sid:sid:zonefold,xfs]
#   BENCH_PEERS_OUT       where the binary, tables, JSON and charts go  [build/bench-peers]
# Exit status: 0 when every VM run finished (a target's failed row is a
# result, not a failure).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
export PATH=$PATH:/usr/local/go/bin
out=${BENCH_PEERS_OUT:-$repo/build/bench-peers}
mb=${BENCH_PEERS_MB:-256} zone=${BENCH_PEERS_ZONE_MB:-4} conv=${BENCH_PEERS_CONV:-8}
read -r -a flags <<<"${BENCH_PEERS_FLAGS:---util 0.5 --writers 3 --bs 64K --window 0.1 --warmup-cap 1 --measure 0.2 --workload hotcold,seed,lifetimes --run-limit 150s}"
read -r -a kernels <<<"${BENCH_PEERS_KERNELS:-stable:-:zonefold,f2fs,btrfs sid:sid:zonefold,xfs}"
mkdir -p "$out"
( cd "$repo" && CGO_ENABLED=0 go build -ldflags=-checklinkname=0 -o "$out/zonefold" . )

# Guest RAM: the memory-backed device, the page cache and the engine's cache.
mem=$((mb + 1536))
echo "bench-peers: null_blk host-managed zoned, ${mb} MiB, $((mb / zone)) zones of ${zone} MiB" \
  "(${conv} conventional), memory backed; guest ${mem} MiB RAM, 2 vCPUs (QEMU TCG)"
echo "bench-peers: zonefold bench peers ${flags[*]} $*"
failed=0
for k in "${kernels[@]}"; do
  IFS=: read -r name suite targets <<<"$k"
  kargs=()
  [ "$suite" = - ] || kargs=(--kernel "$suite")
  echo
  echo "=== bench-peers $name: ${kargs[*]:-Debian stable kernel}, targets $targets"
  rm -rf "${out:?}/$name"
  start=$(date +%s)
  set +e
  "$here/peers.sh" "${kargs[@]}" --nullb-mb "$mb" --zone-mb "$zone" --nullb-args "zone_nr_conv=$conv bs=4096" \
    --mem "$mem" --timeout 900 --share "$out" -- "$out/zonefold" bench peers /dev/nullb0 \
    --targets "$targets" --out "$name" "${flags[@]}" "$@" 2>&1 | tee "$out/$name.log"
  rc=${PIPESTATUS[0]}
  set -e
  echo "=== bench-peers $name: exit $rc after $(($(date +%s) - start)) s; tables in $out/$name.log, charts and summary.json in $out/$name/"
  [ "$rc" = 0 ] || failed=1
done
exit $failed
