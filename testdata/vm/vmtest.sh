#!/usr/bin/env bash
# vmtest.sh - the zns conformance suite against real zoned devices: boots a
# kernel under QEMU (run.sh) with null_blk zoned (/dev/nullb0) and a QEMU
# ZNS NVMe namespace (/dev/nvme0n1 as a block device, /dev/ng0n1 through
# passthrough), twice: without zone limits, and with open/active limits,
# zone capacity < zone size, 4 KiB NVMe blocks (512 B on null_blk; the other
# way round without limits) and a conventional zone.
# Exit status: 0 when every run passed.
#
# Usage: testdata/vm/vmtest.sh [extra flags for the test binary]
#   e.g. testdata/vm/vmtest.sh -test.run 'TestConformanceDevices/nullb0'
# Another package's tests run the same way, against the same two device
# setups, with ZONEFOLD_TEST_DEVICES set in the guest:
#   VMTEST_PKG=./engine VMTEST_RUN='^TestRealDevices$' testdata/vm/vmtest.sh
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
export PATH=$PATH:/usr/local/go/bin
out=${ZVM_CACHE:-$repo/build/vm}
mkdir -p "$out"
pkg=${VMTEST_PKG:-./zns}
testrun=${VMTEST_RUN:-^TestConformanceDevices\$}
bin=$out/$(basename "$pkg").test
( cd "$repo" && CGO_ENABLED=0 go test -c -ldflags=-checklinkname=0 -o "$bin" "$pkg" )

devs=/dev/nullb0,/dev/nvme0n1,/dev/ng0n1
# Small zones keep the fill-to-capacity tests quick under TCG.
common=(--timeout 600 --zone-mb 8 --nvme-mb 256 --nvme-zone-mb 8 --env "ZONEFOLD_TEST_DEVICES=$devs")
runs=(
  "no-limits|--nvme-zcap-mb 8 --nullb-args bs=4096"
  "limits|--zone-cap-mb 6 --nvme-zcap-mb 6 --nvme-lbs 4096 --nullb-args zone_nr_conv=1@zone_max_open=4@zone_max_active=6 --nvme-args zoned.max_open=4,zoned.max_active=6"
)
failed=0 summary=() tpass=0 tfail=0 tskip=0
for r in "${runs[@]}"; do
  name=${r%%|*}
  read -r -a args <<<"${r#*|}"
  args=("${args[@]//@/ }")   # @ stands for a space inside one argument
  echo "=== vmtest $name: ${args[*]}"
  set +e
  "$here/run.sh" "${common[@]}" "${args[@]}" -- "$bin" -test.run "$testrun" -test.v -test.count=1 -test.timeout 540s "$@" |
    tee "$out/vmtest-$name.log"
  rc=${PIPESTATUS[0]}
  set -e
  pass=$(grep -c -- '--- PASS' "$out/vmtest-$name.log" || true)
  fail=$(grep -c -- '--- FAIL' "$out/vmtest-$name.log" || true)
  skip=$(grep -c -- '--- SKIP' "$out/vmtest-$name.log" || true)
  summary+=("vmtest $name: exit $rc, $pass passed, $fail failed, $skip skipped (tests and subtests)")
  tpass=$((tpass + pass)) tfail=$((tfail + fail)) tskip=$((tskip + skip))
  if [ "$rc" != 0 ]; then
    failed=1
    [ "$fail" -gt 0 ] || tfail=$((tfail + 1)) # a crash or timeout is a failure too
  fi
done
printf '%s\n' "${summary[@]}"
# One closing line in the plain form CI reads.
echo "vmtest: $tpass passed, $tfail failed, $tskip skipped"
exit $failed
