#!/usr/bin/env python3
"""Instruction-count regression check for hakmem's fast paths (`make perfcheck`).

Runs the fast-path loops under callgrind with hakmem preloaded, N iterations and zero
iterations, and reports (total(N) - total(0)) / N instructions per malloc+free pair.
Fails when any figure rises more than 3% above bench/perf_baseline.json. Callgrind counts
instructions, not time, so the figures repeat exactly on any machine with the same
binaries; update the baseline (--update) only with a measured improvement.
"""
import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BASELINE = os.path.join(HERE, "perf_baseline.json")
TOLERANCE = 0.03
ITERATIONS = 200_000
CASES = {
    "fixed_16": ["fixed", "16"],
    "fixed_64": ["fixed", "64"],
    "fixed_256": ["fixed", "256"],
    "fixed_1024": ["fixed", "1024"],
    "ring_1000": ["ring"],
}


def callgrind_total(binary, args, lib):
    env = dict(os.environ, LD_PRELOAD=lib)
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", binary] + args
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    m = re.search(r"Collected\s*:\s*(\d+)", out.stderr)
    if not m:
        raise RuntimeError("no callgrind total in:\n" + out.stderr[-2000:])
    return int(m.group(1))


def measure(binary, lib):
    figures = {}
    for name, head in CASES.items():
        if head[0] == "fixed":
            run = lambda n: head + [str(n)]
        else:
            run = lambda n: ["ring", str(n)]
        full = callgrind_total(binary, run(ITERATIONS), lib)
        zero = callgrind_total(binary, run(0), lib)
        figures[name] = round((full - zero) / ITERATIONS, 2)
    return figures


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hakmem", required=True, help="path to libhakmem.so")
    ap.add_argument("--bin", required=True, help="directory holding bench_fastpath_loop")
    ap.add_argument("--update", action="store_true", help="write the measured figures as the baseline")
    args = ap.parse_args()
    binary = os.path.join(args.bin, "bench_fastpath_loop")
    for need in (binary, args.hakmem):
        if not os.path.exists(need):
            sys.exit(f"perfcheck: {need} not found (build first: make release)")
    figures = measure(binary, os.path.abspath(args.hakmem))
    if args.update:
        with open(BASELINE, "w") as f:
            json.dump({"unit": "instructions per malloc+free pair (callgrind)",
                       "iterations": ITERATIONS, "figures": figures}, f, indent=2)
            f.write("\n")
        for k, v in figures.items():
            print(f"{k:12s} {v:8.2f}  (baseline written)")
        return 0
    with open(BASELINE) as f:
        base = json.load(f)["figures"]
    failed = False
    print(f"{'case':12s} {'now':>8s} {'baseline':>9s} {'change':>8s}")
    for k, v in figures.items():
        b = base.get(k)
        if b is None:
            print(f"{k:12s} {v:8.2f} {'-':>9s}")
            continue
        change = (v - b) / b
        bad = change > TOLERANCE
        failed |= bad
        print(f"{k:12s} {v:8.2f} {b:9.2f} {change:+8.1%}{'  REGRESSION' if bad else ''}")
    if failed:
        print(f"perfcheck: FAILED: instructions rose more than {TOLERANCE:.0%} over the baseline")
        return 1
    print("perfcheck: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
