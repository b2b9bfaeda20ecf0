#!/usr/bin/env bash
# badblocks.sh - the engine against media errors on a real zoned device:
# TestH39dBadBlocks in the VM, on a null_blk zoned device made through
# configfs (its badblocks attribute fails the I/O that touches listed
# sectors, reads and writes alike), with zone limits and a conventional
# zone, 8 MiB zones of 6 MiB capacity. Kernel 6.1 applies badblocks to
# zoned writes whole (a write that touches one fails, its write pointer
# stays) and to reads; the block layer fails every read it merged with one
# that touches a bad block. Exit status: the test binary's.
# Usage: testdata/vm/badblocks.sh [extra test flags, e.g. -test.run 'TestH39dBadBlocks/meta']
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
export PATH=$PATH:/usr/local/go/bin
out=${ZVM_CACHE:-$repo/build/vm}
mkdir -p "$out"
bin=$out/engine.test
( cd "$repo" && CGO_ENABLED=0 go test -c -ldflags=-checklinkname=0 -o "$bin" ./engine )
"$here/run.sh" --cache "$out" --timeout 600 --nvme-mb 0 --nullb-mb 128 --zone-mb 8 --zone-cap-mb 6 \
  --nullb-args "blocksize=4096 zone_nr_conv=1 zone_max_open=4 zone_max_active=6" \
  --env ZONEFOLD_BADBLOCKS=/sys/kernel/config/nullb/nullb0 \
  -- "$bin" -test.run '^TestH39dBadBlocks$' -test.v -test.count=1 -test.timeout 540s "$@"
