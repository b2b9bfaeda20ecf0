#!/usr/bin/env python3
"""Random reads of one 128 MiB file through the daemon, with the file
larger than the cache (misses: --cache 16M, the default) or smaller (all
hits: --cache 256M), and, with --kernel, the same reads on the kernel's
page cache (fio's io_uring engine, buffered, invalidate=0: fio otherwise
drops the file's pages before it reads). Sides alternate in rounds (the
first alternating too); each daemon run is a fresh daemon on a freshly
formatted emu device that fio first writes the file into.

Prints per case and side the median IOPS (min-max, spread), the daemon's
CPU microseconds per read (median, spread) and the ratios of the medians
against the first side.

  testdata/fio/randread-cases.py [--rounds 6] [--cases q64,j4q64,q1024]
      [--side NAME=BINARY ...] [--kernel] [--cache 16M] [--dir /var/tmp/zf-rr]

Cases: qQD (bs 64k, one job), jNqQD (N jobs on the one file), and with
a size suffix (q1-4k): another block size.
"""
import argparse, os, re, statistics as st, subprocess, sys

sys.dont_write_bytecode = True
from fiocases import Daemon, fio_job, order, summary

ap = argparse.ArgumentParser()
ap.add_argument("--rounds", type=int, default=6)
ap.add_argument("--cases", default="q64,j4q64,q1024")
ap.add_argument("--side", action="append", default=[])
ap.add_argument("--kernel", action="store_true")
ap.add_argument("--cache", default="16M")
ap.add_argument("--runtime", type=int, default=6)
ap.add_argument("--dir", default="/var/tmp/zf-rr")
args = ap.parse_args()

D = args.dir
os.makedirs(D, exist_ok=True)
ENG = os.environ.get("ZONEFOLD_FIO_ENGINE", os.path.join(os.getcwd(), "build/fio/zonefold-engine.so"))
SOCK = os.path.join(D, "sock")
KFILE = os.path.join(D, "kfile")
sides = [tuple(s.split("=", 1)) for s in args.side] or [("Z", os.path.abspath("zonefold"))]
if args.kernel:
    sides.append(("K", None))


def parse(case):
    m = re.fullmatch(r"(?:j(\d+))?q(\d+)(?:-(\w+))?", case)
    if not m:
        sys.exit("case %s: want [jN]qQD[-BS]" % case)
    return int(m.group(1) or 1), int(m.group(2)), m.group(3) or "64k"


def job(side, case):
    jobs, qd, bs = parse(case)
    p = os.path.join(D, "%s-%s.fio" % (side, case))
    body = ("rw=randread\nbs=%s\niodepth=%d\nsize=128m\nnumjobs=%d\ngroup_reporting=1\n"
            "time_based=1\nruntime=%d\n" % (bs, qd, jobs, args.runtime))
    with open(p, "w") as f:
        if side == "K":
            f.write("[k]\nioengine=io_uring\ninvalidate=0\nfilename=%s\n%s" % (KFILE, body))
        else:
            f.write("[global]\nioengine=external:%s\nsock=%s\n[r]\nfilename=f\n%s" % (ENG, SOCK, body))
    return p


def run(side, binary, case):
    """IOPS and the daemon's CPU microseconds per read (0 for the kernel)."""
    if binary is None:
        subprocess.run(["cat", KFILE], stdout=subprocess.DEVNULL, check=True)  # all in the page cache
        return fio_job(job(side, case))["read"]["iops"], 0.0
    img = os.path.join(D, "zf.img")
    if os.path.exists(img):
        os.unlink(img)
    d = Daemon(binary, "emu:%s?zone_size=16M&zones=32" % img, SOCK, args.cache, os.path.join(D, "serve.log"), ["--format"])
    try:
        subprocess.run(["fio", "--name=w", "--ioengine=external:" + ENG, "--sock=" + SOCK, "--filename=f",
                        "--rw=write", "--bs=1m", "--iodepth=4", "--size=128m"], check=True, capture_output=True)
        c0 = d.cpu()
        r = fio_job(job(side, case))["read"]
        return r["iops"], (d.cpu() - c0) * 1e6 / max(r["total_ios"], 1)
    finally:
        d.stop()


if args.kernel and not os.path.exists(KFILE):
    subprocess.run(["fio", "--name=kw", "--ioengine=io_uring", "--filename=" + KFILE, "--rw=write", "--bs=1m",
                    "--size=128m"], check=True, capture_output=True)
cases = args.cases.split(",")
for c in cases:
    parse(c)
res = {(c, s): [] for c in cases for s, _ in sides}
for r in range(args.rounds):
    for c in cases:
        for name, binary in order(sides, r):
            iops, us = run(name, binary, c)
            res[(c, name)].append((iops, us))
            print("round %d %-8s %s %9.0f IOPS  daemon %.1f us/read" % (r, c, name, iops, us), flush=True)
print()
base = sides[0][0]
for c in cases:
    b = res[(c, base)]
    for name, _ in sides:
        v = res[(c, name)]
        m, rng, spread, ratio = summary([x[0] for x in v], [x[0] for x in b])
        line = "%-8s %s %9.0f %-17s spread %.2f  ratio %.2f" % (c, name, m, rng, spread, ratio)
        if v[0][1]:
            u, _, us_spread, us_ratio = summary([x[1] for x in v], [x[1] for x in b] if b[0][1] else [x[1] for x in v])
            line += "   daemon %.1f us/read, spread %.2f, ratio %.2f" % (u, us_spread, us_ratio)
        print(line)
