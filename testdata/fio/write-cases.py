#!/usr/bin/env python3
"""Writes through the daemon, two or more binaries alternating in rounds
(the first side alternating too): each run serves a freshly formatted emu
device (its file under --dir), runs one fio job with the zonefold engine,
and stops the daemon. Every job ends with its data fsynced, so the device's
writes are in the timing. Prints per job and side the median MiB/s
(min-max, spread) and the ratio of the medians against the first side.

  testdata/fio/write-cases.py --side A=/tmp/old/zonefold --side B=./zonefold
      [--rounds 3] [--cases 4x1m-fsync,...] [--dir /var/tmp/zf-writecases]

The fio engine is $ZONEFOLD_FIO_ENGINE or build/fio/zonefold-engine.so.
"""
import argparse, os, sys

sys.dont_write_bytecode = True
from fiocases import Daemon, fio_job, order, summary

CASES = {
    "4x1m-fsync": "numjobs=4\nrw=write\nbs=1m\niodepth=1\nend_fsync=1\nsize=128m\ngroup_reporting=1\n",
    "4k-qd128-fsync": "rw=randwrite\nbs=4k\niodepth=128\niodepth_batch_submit=32\niodepth_batch_complete_max=128\nsize=128m\nend_fsync=1\n",
    "16x8k-fsync": "numjobs=16\nrw=randwrite\nbs=8k\niodepth=4\niodepth_batch_submit=4\niodepth_batch_complete_max=4\nsize=8m\nend_fsync=1\ngroup_reporting=1\n",
    "4k-qd1-fsync8": "rw=randwrite\nbs=4k\niodepth=1\nfsync=8\nsize=8m\n",
}

ap = argparse.ArgumentParser()
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--cases", default=",".join(CASES))
ap.add_argument("--side", action="append", default=[])
ap.add_argument("--dir", default="/var/tmp/zf-writecases")
ap.add_argument("--cache", default="1G")
args = ap.parse_args()

D = args.dir
os.makedirs(D, exist_ok=True)
SOCK = os.path.join(D, "sock")
IMG = os.path.join(D, "zf.img")
ENG = os.environ.get("ZONEFOLD_FIO_ENGINE", os.path.join(os.getcwd(), "build/fio/zonefold-engine.so"))
sides = [tuple(s.split("=", 1)) for s in args.side] or [("Z", os.path.abspath("zonefold"))]
cases = args.cases.split(",")


def run(binary, case):
    for p in (IMG, SOCK):
        if os.path.exists(p):
            os.unlink(p)
    d = Daemon(binary, "emu:%s?zone_size=64M&zones=32" % IMG, SOCK, args.cache, os.path.join(D, "serve.log"), ["--format", "--force"])
    try:
        job = os.path.join(D, "job.fio")
        with open(job, "w") as f:
            f.write("[global]\nioengine=external:%s\nsock=%s\nfilename_format=f.$jobnum\n[w]\n%s" % (ENG, SOCK, CASES[case]))
        w = fio_job(job)["write"]
        return w["bw_bytes"] / 2**20, w["clat_ns"]["percentile"].get("99.000000", 0) / 1e6
    finally:
        d.stop()


res = {c: {s: [] for s, _ in sides} for c in cases}
for r in range(args.rounds):
    for c in cases:
        for name, binary in order(sides, r):
            bw, p99 = run(binary, c)
            res[c][name].append(bw)
            print("round %d %-15s %-4s %8.0f MiB/s p99 %.2fms" % (r, c, name, bw, p99), flush=True)
print()
first = sides[0][0]
print("%-15s %-4s %8s %15s %6s %s" % ("case", "side", "MiB/s", "(min-max)", "spread", "ratio vs " + first))
for c in cases:
    for name, _ in sides:
        m, rng, spread, ratio = summary(res[c][name], res[c][first])
        print("%-15s %-4s %8.0f %15s %6.2f %.2f" % (c, name, m, rng, spread, ratio))
