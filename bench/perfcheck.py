#!/usr/bin/env python3
"""Instruction-count regression check for hakmem's fast paths (`make perfcheck`).

Runs the suite's callgrind loops (harness/workloads.py CALLGRIND_LOOPS), and the same
loops through the heap API (HEAP_LOOPS), with hakmem preloaded at N iterations and at
zero, and reports (total(N) - total(0)) / N instructions per malloc+free pair. Fails when any figure rises more than 3% above
bench/perf_baseline.json. Callgrind counts instructions, not time, so the figures repeat
exactly for the same binaries; update the baseline (--update) only with a measured
improvement.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "harness"))
from runner import callgrind_argv, parse_callgrind_total  # noqa: E402
from workloads import CALLGRIND_LOOPS, HEAP_LOOPS  # noqa: E402

BASELINE = os.path.join(HERE, "perf_baseline.json")
TOLERANCE = 0.03
SCALE = "quick"


def callgrind_total(argv, lib):
    env = dict(os.environ, LD_PRELOAD=lib)
    out = subprocess.run(callgrind_argv(argv), env=env, capture_output=True, text=True)
    total = parse_callgrind_total(out.stderr)
    if out.returncode != 0 or total is None:
        raise RuntimeError("callgrind run failed: %s\n%s" % (argv, out.stderr[-2000:]))
    return total


def measure(binary, lib):
    figures = {}
    for loop in CALLGRIND_LOOPS + HEAP_LOOPS:
        n = loop.iterations[SCALE]
        full = callgrind_total([binary] + loop.args(n), lib)
        zero = callgrind_total([binary] + loop.args(0), lib)
        figures[loop.name] = round((full - zero) / n, 2)
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
            sys.exit("perfcheck: %s not found (build first: make release)" % need)
    figures = measure(binary, os.path.abspath(args.hakmem))
    if args.update:
        with open(BASELINE, "w") as f:
            json.dump({"unit": "instructions per malloc+free pair (callgrind, start-up subtracted)",
                       "scale": SCALE, "figures": figures}, f, indent=2)
            f.write("\n")
        for k, v in figures.items():
            print("%-20s %8.2f  (baseline written)" % (k, v))
        return 0
    with open(BASELINE) as f:
        base = json.load(f)["figures"]
    failed = False
    print("%-20s %8s %9s %8s" % ("loop", "now", "baseline", "change"))
    for k, v in figures.items():
        b = base.get(k)
        if b is None:
            print("%-20s %8.2f %9s" % (k, v, "-"))
            continue
        change = (v - b) / b
        bad = change > TOLERANCE
        failed |= bad
        print("%-20s %8.2f %9.2f %+7.1f%%%s" % (k, v, b, 100 * change, "  REGRESSION" if bad else ""))
    if failed:
        print("perfcheck: FAILED: instructions rose more than %d%% over the baseline" % (100 * TOLERANCE))
        return 1
    print("perfcheck: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
