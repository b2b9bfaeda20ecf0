#!/usr/bin/env python3
"""Cold reads of a 1 GiB file through the daemon on an emu device vs the
kernel (fio's io_uring engine, buffered, page cache dropped), several job
shapes, alternating sides in rounds (the first side alternating too).

Each daemon run restarts the daemon (its cache is empty) and drops the page
cache; each kernel run drops the page cache. Prints per case and side the
median MiB/s (min-max, spread) and CPU seconds per run (fio's plus the
daemon's), and the ratios of the medians against the first side.

  sudo testdata/fio/coldread-cases.py [--rounds 5] [--cases seq128k-qd4,...]
      [--side NAME=BINARY ...] [--kernel] [--dir /var/tmp/zf-coldcases]

--side may be given several times (A=/tmp/main/zonefold B=./zonefold);
default Z=./zonefold. --kernel adds the kernel side K. --engine NAME=SO
gives side NAME its own fio engine .so (default $ZONEFOLD_FIO_ENGINE, else
build/fio/zonefold-engine.so), to compare engines under one daemon binary.
--cases also takes warm4k-qd32 (not in the default set): random 4k reads of
a 32 MiB part of the file, 64 times over, so all but the first pass hit the
daemon's cache (the kernel's on K): replies at CPU speed, not the device's.
"""
import argparse, json, os, statistics as st, subprocess, sys

sys.dont_write_bytecode = True
from fiocases import Daemon as Serve, fio_job, order, summary

CASES = {
    "seq128k-qd4": "rw=read\nbs=128k\niodepth=4\nsize=1g\n",
    "seq128k-qd16": "rw=read\nbs=128k\niodepth=16\nsize=1g\n",
    "seq1m-qd4": "rw=read\nbs=1m\niodepth=4\nsize=1g\n",
    "seq1m-qd16": "rw=read\nbs=1m\niodepth=16\nsize=1g\n",
    # Every block read once (fio's random map), so every read is cold on
    # both sides: a time-based run re-reads what it already brought in.
    "rand4k-qd32": "rw=randread\nbs=4k\niodepth=32\nsize=1g\nio_size=256m\n",
    "rand64k-qd8": "rw=randread\nbs=64k\niodepth=8\nsize=1g\n",
}
WARM = {
    "warm4k-qd32": "rw=randread\nbs=4k\niodepth=32\nsize=32m\nio_size=2g\n",
}

ap = argparse.ArgumentParser()
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--cases", default=",".join(CASES))
ap.add_argument("--side", action="append", default=[])
ap.add_argument("--engine", action="append", default=[], help="NAME=SO: side NAME's fio engine")
ap.add_argument("--kernel", action="store_true")
ap.add_argument("--dir", default="/var/tmp/zf-coldcases")
ap.add_argument("--cache", default="2G")
ap.add_argument("--serve-args", default="", help="extra args for serve (e.g. --cpuprofile)")
ap.add_argument("--json")
args = ap.parse_args()

if os.getuid() != 0:
    sys.exit("run as root: it drops the page cache")
D = args.dir
os.makedirs(D, exist_ok=True)
ENG = os.environ.get("ZONEFOLD_FIO_ENGINE", os.path.join(os.getcwd(), "build/fio/zonefold-engine.so"))
SOCK = os.path.join(D, "sock")
IMG = "emu:%s/zf.img?zone_size=64M&zones=32" % D
KFILE = os.path.join(D, "kfile")
os.environ["ZONEFOLD_FIO_ENGINE"] = ENG
os.environ["ZONEFOLD_SOCK"] = SOCK
sides = [tuple(s.split("=", 1)) for s in args.side] or [("Z", os.path.abspath("zonefold"))]
if args.kernel:
    sides.append(("K", None))
engines = dict(e.split("=", 1) for e in args.engine)
for n in engines:
    if n not in [s for s, _ in sides]:
        sys.exit("--engine %s: no such side" % n)
cases = args.cases.split(",")
for c in cases:
    if c not in CASES and c not in WARM:
        sys.exit("unknown case %s" % c)
CASES.update(WARM)


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=True, check=True, **kw)


def drop():
    sh("sync; echo 3 > /proc/sys/vm/drop_caches")


def Daemon(binary, extra=""):
    return Serve(binary, IMG, SOCK, args.cache, os.path.join(D, "serve.log"), extra.split())


def fio(job):
    j = fio_job(job)
    r = j["read"]
    secs = j["job_runtime"] / 1000.0
    fcpu = (j["usr_cpu"] + j["sys_cpu"]) / 100.0 * secs
    return r["bw_bytes"] / 2**20, fcpu, r["clat_ns"]["percentile"].get("99.000000", 0) / 1e6


def jobfile(side, case):
    body = CASES[case]
    p = os.path.join(D, "%s-%s.fio" % (side, case))
    with open(p, "w") as f:
        if side == "K":
            f.write("[k]\nioengine=io_uring\nfilename=%s\n%s" % (KFILE, body))
        else:
            f.write("[global]\nioengine=external:%s\nsock=%s\n[r]\nfilename=big\n%s" % (engines.get(side, ENG), SOCK, body))
    return p


# Lay out both files once.
if not os.path.exists(KFILE):
    sh("fio --name=kw --ioengine=io_uring --filename=%s --rw=write --bs=1m --size=1g --end_fsync=1 > /dev/null" % KFILE)
first_bin = [b for _, b in sides if b][0]
if os.path.exists(os.path.join(D, "zf.img")):
    os.unlink(os.path.join(D, "zf.img"))
d = Daemon(first_bin, "--format --force")
w = os.path.join(D, "w.fio")
with open(w, "w") as f:
    f.write("[global]\nioengine=external:%s\nsock=%s\n[w]\nfilename=big\nrw=write\nbs=1m\niodepth=4\nsize=1g\nend_fsync=1\n" % (ENG, SOCK))
sh("fio %s --output-format=terse > /dev/null" % w)
d.stop()

res = {c: {s: [] for s, _ in sides} for c in cases}
for r in range(args.rounds):
    for c in cases:
        for name, binary in order(sides, r):
            job = jobfile(name, c)
            dcpu = 0.0
            if binary:
                d = Daemon(binary, args.serve_args.replace("%R", "%s-%s-%d" % (name, c, r)))
                drop()
                c0 = d.cpu()
                bw, fcpu, p99 = fio(job)
                dcpu = d.cpu() - c0
                d.stop()
            else:
                drop()
                bw, fcpu, p99 = fio(job)
            res[c][name].append((bw, fcpu + dcpu, p99, fcpu))
            print("round %d %-13s %s %8.0f MiB/s cpu %.2fs (fio %.2f daemon %.2f) p99 %.2fms" % (r, c, name, bw, fcpu + dcpu, fcpu, dcpu, p99), flush=True)

print()
base = sides[0][0]
print("%-13s %-4s %8s %15s %6s %7s %6s %-12s %7s %6s %s" % ("case", "side", "MiB/s", "(min-max)", "spread", "cpu_s", "cspr", "ratio vs " + base, "fio_s", "fspr", "fio ratio"))
out = {}
for c in cases:
    for s, _ in sides:
        v = res[c][s]
        bws, cps, fps = [x[0] for x in v], [x[1] for x in v], [x[3] for x in v]
        m, rng, spread, ratio = summary(bws, [x[0] for x in res[c][base]])
        _, _, cspread, _ = summary(cps, cps)
        fm, _, fspread, fratio = summary(fps, [x[3] for x in res[c][base]])
        print("%-13s %-4s %8.0f %15s %6.2f %7.2f %6.2f %-12.2f %7.2f %6.2f %.2f" % (c, s, m, rng, spread, st.median(cps), cspread, ratio, fm, fspread, fratio))
        out.setdefault(c, {})[s] = {"mib_s": bws, "cpu_s": cps, "fio_cpu_s": fps, "p99_ms": [x[2] for x in v]}
if args.json:
    json.dump(out, open(args.json, "w"), indent=1)
