#!/usr/bin/env python3
"""Compare two builds of zonefold on `zonefold bench fio`, alternating.

Usage: testdata/fio/bench-ab.py [--rounds N] [--device DEV] A_DIR B_DIR

Each DIR holds a `zonefold` binary and the `zonefold-engine.so` built from
the same source. For every seed job (the presets and scales of `make
bench-fio`), each round runs `zonefold bench fio --rounds 1 --json` once
with A and once with B, in alternating order, so that both see the same
machine noise. Each run itself alternates in-process and fio+daemon. It
prints, per job and build, the medians of the in-process and fio+daemon
MB/s over the rounds (10^6 bytes; builds that report MiB/s are
converted), the ratio of the medians (daemon / in-process) and each
side's spread (max/min), then the machine's load average.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

# The seed jobs of `make bench-fio` (BENCH_FIO_RUNS), preset and scale.
JOBS = [("seq128k", "1"), ("4x1m", "0.5"), ("16x8k", "0.1"), ("4k-qd128", "1")]


def run(d, device, preset, scale):
    out = subprocess.run(
        [os.path.join(d, "zonefold"), "bench", "fio", device, "--preset", preset, "--scale", scale,
         "--rounds", "1", "--json", "--fio-engine", os.path.join(d, "zonefold-engine.so")],
        check=True, capture_output=True, text=True).stdout
    j = json.loads(out)
    if "in_process_mib_per_s" in j:  # newer builds report MiB/s
        return j["in_process_mib_per_s"] * 1.048576, j["daemon_mib_per_s"] * 1.048576
    return j["in_process_mbps"], j["daemon_mbps"]


def spread(xs):
    return max(xs) / min(xs) if min(xs) > 0 else float("inf")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", default="emu:build/bench-fio.dev?zone_size=64M&zones=128")
    ap.add_argument("--jobs", default=",".join(p for p, _ in JOBS))
    ap.add_argument("a")
    ap.add_argument("b")
    o = ap.parse_args()
    want = o.jobs.split(",")
    print(f"load average before: {os.getloadavg()}", flush=True)
    for preset, scale in JOBS:
        if preset not in want:
            continue
        res = {o.a: ([], []), o.b: ([], [])}
        for r in range(o.rounds):
            order = [o.a, o.b] if r % 2 == 0 else [o.b, o.a]
            for d in order:
                ip, dm = run(d, o.device, preset, scale)
                res[d][0].append(ip)
                res[d][1].append(dm)
                print(f"  {preset} round {r + 1} {d}: in-process {ip:.1f} daemon {dm:.1f} MB/s", file=sys.stderr, flush=True)
        print(f"== {preset} (scale {scale}), {o.rounds} alternating rounds")
        for d in (o.a, o.b):
            ip, dm = res[d]
            mi, md = statistics.median(ip), statistics.median(dm)
            print(f"  {d:>24}: in-process {mi:8.1f} MB/s (spread {spread(ip):.2f})  "
                  f"fio+daemon {md:8.1f} MB/s (spread {spread(dm):.2f})  ratio of medians {md / mi:.2f}", flush=True)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
