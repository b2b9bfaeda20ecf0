#!/bin/bash
# A/B: fio 4k random reads, iodepth 32, of a 1 GiB file not in the cache,
# through the daemon on an emu device: zonefold binary $A (a baseline,
# required) vs $B (default ./zonefold),
# and the kernel (fio's io_uring engine, buffered, on a file beside the
# emu image) (K), alternating, ROUNDS rounds. Prints IOPS per run and the ratio of medians.
set -e
ROUNDS=${ROUNDS:-5}
D=${DIR:-/var/tmp/zf-coldread}; mkdir -p $D
IMG="emu:$D/zf.img?zone_size=64M&zones=32"
SOCK=$D/sock
ENG=${ZONEFOLD_FIO_ENGINE:-$PWD/build/fio/zonefold-engine.so} # make fio-engine
: "${A:?set A to the baseline zonefold binary}"
B=${B:-$PWD/zonefold}
[ "$(id -u)" = 0 ] || { echo "run as root: it drops the page cache" >&2; exit 1; }
export ZONEFOLD_FIO_ENGINE=$ENG ZONEFOLD_SOCK=$SOCK
cat > $D/w.fio <<J
[global]
ioengine=external:$ENG
sock=$SOCK
[w]
filename=big
rw=write
bs=1m
iodepth=4
size=1g
end_fsync=1
J
# The same reads through the daemon (r) and the kernel (k).
READ="rw=randread
bs=4k
iodepth=32
size=1g
time_based=1
runtime=${RUNTIME:-10}
norandommap=1"
printf '[global]\nioengine=external:%s\nsock=%s\n[r]\nfilename=big\n%s\n' "$ENG" "$SOCK" "$READ" > $D/r.fio
printf '[k]\nioengine=io_uring\nfilename=%s\n%s\n' "$D/kfile" "$READ" > $D/k.fio
# The socket is there at once; requests are answered once the cache's
# arena is faulted in (seconds for 2G): wait for an answer.
start() { "$1" serve "$IMG" --socket $SOCK --cache 2G $2 > $D/serve.log 2>&1 & PID=$!; for i in $(seq 100); do [ -S $SOCK ] && break; sleep 0.1; done; "$1" ls --socket $SOCK > /dev/null; }
stop() { kill -TERM $PID; wait $PID || true; }
[ -f $D/kfile ] || fio --name=kw --ioengine=io_uring --filename=$D/kfile --rw=write --bs=1m --size=1g --end_fsync=1 > /dev/null
rm -f $D/zf.img $SOCK
start $A "--format --force"
fio $D/w.fio --output-format=terse > /dev/null
stop
for r in $(seq $ROUNDS); do
  for v in A B K; do
    bin=$A; [ $v = B ] && bin=$B
    sync; echo 3 > /proc/sys/vm/drop_caches
    job=$D/r.fio; [ $v = K ] && job=$D/k.fio
    [ $v = K ] || start $bin ""
    iops=$(fio $job --output-format=json | python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]["read"]; print(int(j["iops"]), round(j["clat_ns"]["percentile"]["99.000000"]/1e6,2))')
    [ $v = K ] || stop
    echo "round $r $v iops/p99ms $iops" | tee -a $D/res
    echo "$v $iops" >> $D/vals
  done
done
python3 - $D/vals <<P
import sys,statistics as s
v={k:[int(l.split()[1]) for l in open(sys.argv[1]) if l[0]==k] for k in "ABK"}
for k,n in zip("ABK",["A","B","kernel buffered io_uring"]): print("%s (%s): median %d IOPS [%d..%d] spread %.2f"%(k,n,s.median(v[k]),min(v[k]),max(v[k]),max(v[k])/min(v[k])))
print("B/A %.2fx  B/kernel %.2fx  A/kernel %.2fx"%(s.median(v["B"])/s.median(v["A"]),s.median(v["B"])/s.median(v["K"]),s.median(v["A"])/s.median(v["K"])))
P
rm -f $D/vals
