#!/usr/bin/env python3
"""Small requests the daemon answers from its cache, through fio's
engine, against the kernel's page cache: 4k random reads and writes at
iodepth 1 and 32, one and two jobs. Per side and round a fresh daemon
(--cache 256M) on a freshly formatted emu device, into which fio writes
a 64 MiB file and reads it once, so that every read hits; with
--kernel, the same jobs with fio's psync on a 64 MiB file in --kdir
(read into the page cache first; psync has no queue, so its iodepth is
1 whatever the case says). Sides alternate in rounds (the first side
alternating too), and so does the order of the cases.

Prints per case and side the median IOPS (min-max, spread), the ratio
of the medians against the first side, and the daemon's CPU
microseconds per request (user + system, from /proc).

  ZONEFOLD_FIO_ENGINE=$PWD/build/fio/zonefold-engine.so testdata/fio/smallreq-cases.py \\
      [--rounds 5] [--runtime 3] [--side NAME=BINARY ...] [--kernel] [--cases ...]

Cases: rw-qQD-jJOBS, rw being randread or randwrite.
"""
import argparse, json, os, subprocess, sys

sys.dont_write_bytecode = True
from fiocases import Daemon, order, summary

CASES = ",".join("%s-q%d-j%d" % (rw, q, j) for rw in ("randread", "randwrite") for q in (1, 32) for j in (1, 2))
ap = argparse.ArgumentParser()
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--runtime", type=int, default=3)
ap.add_argument("--side", action="append", default=[])
ap.add_argument("--kernel", action="store_true")
ap.add_argument("--cases", default=CASES)
ap.add_argument("--dir", default="/var/tmp/zf-sr")
ap.add_argument("--kdir", default="/var/tmp/zf-sr-kernel")
args = ap.parse_args()

D = args.dir
os.makedirs(D, exist_ok=True)
os.makedirs(args.kdir, exist_ok=True)
ENG = os.environ.get("ZONEFOLD_FIO_ENGINE", os.path.join(os.getcwd(), "build/fio/zonefold-engine.so"))
SOCK = os.path.join(D, "sock")
KFILE = os.path.join(args.kdir, "kfile")
SIZE = "64m"
sides = [tuple(s.split("=", 1)) for s in args.side] or [("Z", os.path.abspath("zonefold"))]
if args.kernel:
    sides.append(("K", None))


def fio(argv):
    out = subprocess.run(["fio", "--output-format=json", "--group_reporting=1"] + argv, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out[out.index("{"):])["jobs"][0]


def case_args(case):
    rw, q, j = case.split("-")
    if rw not in ("randread", "randwrite") or q[0] != "q" or j[0] != "j":
        sys.exit("case %s: want rand{read,write}-qQD-jJOBS" % case)
    return ["--name=c", "--rw=" + rw, "--bs=4k", "--iodepth=" + q[1:], "--numjobs=" + j[1:], "--size=" + SIZE,
            "--time_based=1", "--runtime=%d" % args.runtime, "--randrepeat=0"]


def result(case, job):
    return job["read"] if case.startswith("randread") else job["write"]


def run(binary, cases):
    """{case: (IOPS, daemon CPU microseconds per request)} for one side."""
    res = {}
    if binary is None:
        if not os.path.exists(KFILE):
            subprocess.run(["fio", "--name=kw", "--ioengine=psync", "--filename=" + KFILE, "--rw=write", "--bs=1m",
                            "--size=" + SIZE], check=True, capture_output=True)
        for c in cases:
            subprocess.run(["cat", KFILE], stdout=subprocess.DEVNULL, check=True)  # all in the page cache
            r = result(c, fio(["--ioengine=psync", "--filename=" + KFILE, "--invalidate=0"] + case_args(c)))
            res[c] = (r["iops"], 0.0)
        return res
    img = os.path.join(D, "zf.img")
    if os.path.exists(img):
        os.unlink(img)
    d = Daemon(binary, "emu:%s?zone_size=16M&zones=32" % img, SOCK, "256M", os.path.join(D, "serve.log"), ["--format"])
    try:
        eng = ["--ioengine=external:" + ENG, "--sock=" + SOCK, "--filename=f"]
        for rw in ("write", "read"):  # the file, then once read: all of it in the cache
            subprocess.run(["fio", "--name=" + rw] + eng + ["--rw=" + rw, "--bs=1m", "--iodepth=4", "--size=" + SIZE],
                           check=True, capture_output=True)
        for c in cases:
            c0 = d.cpu()
            r = result(c, fio(eng + case_args(c)))
            res[c] = (r["iops"], (d.cpu() - c0) * 1e6 / max(r["total_ios"], 1))
    finally:
        d.stop()
    return res


cases = args.cases.split(",")
for c in cases:
    case_args(c)
res = {(c, s): [] for c in cases for s, _ in sides}
loads = []
for rnd in range(args.rounds):
    loads.append(os.getloadavg()[0])
    for name, binary in order(sides, rnd):
        out = run(binary, cases if rnd % 2 == 0 else cases[::-1])
        for c in cases:
            res[(c, name)].append(out[c])
            print("round %d %-16s %s %9.0f IOPS  daemon %.1f us/req  load %.1f" % (rnd, c, name, out[c][0], out[c][1],
                                                                                   loads[-1]), flush=True)
print("\nload average (1 min) at the rounds' starts: %.1f-%.1f" % (min(loads), max(loads)))
base = sides[0][0]
for c in cases:
    b = res[(c, base)]
    for name, _ in sides:
        v = res[(c, name)]
        m, rng, spread, ratio = summary([x[0] for x in v], [x[0] for x in b])
        line = "%-16s %s %9.0f %-17s spread %.2f  ratio %.2f" % (c, name, m, rng, spread, ratio)
        if v[0][1]:
            u, _, us_spread, us_ratio = summary([x[1] for x in v], [x[1] for x in b] if b[0][1] else [x[1] for x in v])
            line += "   daemon %.1f us/req (%.1f-%.1f), spread %.2f, ratio %.2f" % (
                u, min(x[1] for x in v), max(x[1] for x in v), us_spread, us_ratio)
        print(line)
