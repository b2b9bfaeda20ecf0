#!/usr/bin/env bash
# h29b.sh - the server's real-device probes (TestH29bRealDevices: kill -9
# under GC, rm against cold reads, deep fio, full device) in the VM, with
# the host's fio and the engine copied into the guest, against the two
# device setups of vmtest.sh (without and with zone limits).
# Usage: testdata/vm/h29b.sh [no-limits|limits|both] [extra test flags]
# Env: ZONEFOLD_H29B_PROBES, ZONEFOLD_H29B_ROUNDS (see the test),
#      H29B_DEVICES (default /dev/nullb0,/dev/nvme0n1,/dev/ng0n1).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
export PATH=$PATH:/usr/local/go/bin
out=${ZVM_CACHE:-$repo/build/vm}
which=${1:-both}; shift || true
mkdir -p "$out"
bin=$out/server.test
( cd "$repo" && CGO_ENABLED=0 go test -c -ldflags=-checklinkname=0 -o "$bin" ./server )
[ -f "$repo/build/fio/zonefold-engine.so" ] || make -C "$repo" fio-engine
# fio is dynamic: it goes in with every library it loads.
ov=$out/h29b-overlay
rm -rf "$ov"; mkdir -p "$ov/usr/bin" "$ov/etc" "$ov/testdata" "$ov/zvm/files"
fio=$(command -v fio)
cp "$fio" "$ov/usr/bin/fio"
for f in $(ldd "$fio" | awk '/=>/{print $3} /ld-linux/{print $1}'); do
  mkdir -p "$ov/$(dirname "$f")"; cp -L "$f" "$ov/$f"
done
cp /etc/ld.so.cache "$ov/etc/"
cp -r "$repo/testdata/fio" "$ov/testdata/"
cp "$repo/build/fio/zonefold-engine.so" "$ov/zvm/files/"
devs=${H29B_DEVICES:-/dev/nullb0,/dev/nvme0n1,/dev/ng0n1}
common=(--timeout 1500 --mem 3072 --zone-mb 8 --nvme-mb 256 --nvme-zone-mb 8 --overlay "$ov"
  --env "ZONEFOLD_TEST_DEVICES=$devs" --env PATH=/bin:/sbin:/usr/bin
  --env ZONEFOLD_FIO_ENGINE=/zvm/files/zonefold-engine.so --env ZONEFOLD_REQUIRE_FIO=1
  --env "ZONEFOLD_H29B_PROBES=${ZONEFOLD_H29B_PROBES:-}" --env "ZONEFOLD_H29B_ROUNDS=${ZONEFOLD_H29B_ROUNDS:-}")
runs=()
[ "$which" = limits ] || runs+=("no-limits|--nvme-zcap-mb 8 --nullb-args bs=4096")
[ "$which" = no-limits ] || runs+=("limits|--zone-cap-mb 6 --nvme-zcap-mb 6 --nvme-lbs 4096 --nullb-args zone_nr_conv=1@zone_max_open=4@zone_max_active=6 --nvme-args zoned.max_open=4,zoned.max_active=6")
failed=0
for r in "${runs[@]}"; do
  name=${r%%|*}
  read -r -a args <<<"${r#*|}"
  args=("${args[@]//@/ }")
  echo "=== h29b $name: ${args[*]}"
  set +e
  "$here/run.sh" "${common[@]}" "${args[@]}" -- "$bin" -test.run '^TestH29bRealDevices$' -test.v -test.count=1 -test.timeout 1400s "$@" |
    tee "$out/h29b-$name.log"
  rc=${PIPESTATUS[0]}
  set -e
  echo "=== h29b $name: exit $rc"
  [ "$rc" = 0 ] || failed=1
done
exit $failed
