#!/usr/bin/env python3
"""Cold start: a whole process that does OPS random-mixed operations and exits.

Start-up, first touch and TLS set-up are part of what a short-lived program pays for an
allocator. Each allocator's process is launched in turn (A B C D E, A B C D E, ...), one
warm-up round then ROUNDS counted; the figure is the median wall time of the whole
process and its ratio to glibc's.

usage: bench/coldstart.py [--ops 100000] [--rounds 40] [--hakmem PATH] [--bin DIR]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "harness"))
import allocators as alloc_mod  # noqa: E402


def main():
    root = os.path.dirname(HERE)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--hakmem", default=os.path.join(root, "build/release/libhakmem.so"))
    ap.add_argument("--bin", default=os.path.join(root, "build/release/bench"))
    args = ap.parse_args()
    found, skipped = alloc_mod.discover(args.hakmem)
    for s in skipped:
        print("skipped %s: %s" % (s.name, s.note))
    argv = [os.path.join(args.bin, "bench_random_mixed"), str(args.ops), "8192", "1"]
    times = {a.name: [] for a in found}
    for r in range(args.rounds + 1):
        for a in found:
            t = time.perf_counter()
            subprocess.run(argv, env=a.env(), stdout=subprocess.DEVNULL, check=True)
            if r:  # round 0 warms the page cache
                times[a.name].append(time.perf_counter() - t)
    base = statistics.median(times["glibc"])
    print("cold start, %d random-mixed ops per process, %d rounds interleaved" % (args.ops, args.rounds))
    print("%-10s %10s %10s %14s" % ("allocator", "median ms", "min ms", "ratio to glibc"))
    for name, v in times.items():
        m = statistics.median(v)
        print("%-10s %10.2f %10.2f %14.2f" % (name, 1000 * m, 1000 * min(v), m / base))
    return 0


if __name__ == "__main__":
    sys.exit(main())
