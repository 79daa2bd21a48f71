#!/usr/bin/env python3
"""The fault sweep: fault_workload under HAKMEM_FAULT for every primitive.

For each primitive, N runs over the call numbers 1, 2, ... (densely at first, then
geometrically, up to --max-call), each either one failure at call N or every call from
N on (the kernel out of memory from then), until a run sees no call N any more; then
--seeds runs with every primitive failing at random (1% and 5%). Each run must exit 0
(the workload checks NULL/ENOMEM, intact blocks, zeroed calloc memory, normal service
after the failures stop and memory back at idle), within --timeout seconds (no hang),
writing at most a few lines to stderr (no message loop). Prints the counts at the end.

Usage: run_faults.py WORKLOAD [--points N] [--seeds N] [--threads T] [--steps S]
"""
import argparse
import re
import subprocess
import sys

PRIMITIVES = ["mmap", "munmap", "mremap", "mprotect", "dontneed", "populate", "hugepage"]


def call_numbers(points, max_call):
    """1 .. points/2 one by one, then geometric steps to max_call."""
    dense = max(1, points // 2)
    out = list(range(1, dense + 1))
    rest = points - dense
    x = float(dense)
    ratio = (max_call / dense) ** (1.0 / max(1, rest))
    for _ in range(rest):
        x *= ratio
        if int(x) > out[-1]:
            out.append(int(x))
    return out


def run(args, spec, seed):
    cmd = [args.workload, str(seed), str(args.threads), str(args.steps)]
    env = {"HAKMEM_FAULT": "wait," + spec, "PATH": "/usr/bin:/bin"}
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return None, "timed out after %ds (a hang)" % args.timeout
    m = re.search(r"faults=(\d+) calls=(\d+) nulls=(\d+)", p.stdout)
    err_lines = p.stderr.count("\n")
    if p.returncode != 0 or m is None:
        return None, "exit %d\nstdout:\n%s\nstderr:\n%s" % (p.returncode, p.stdout[-2000:], p.stderr[-4000:])
    if err_lines > 8:  # the seed line and a few one-line warnings at most
        return None, "%d lines on stderr (a message loop?):\n%s" % (err_lines, p.stderr[-2000:])
    return tuple(int(g) for g in m.groups()), None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload")
    ap.add_argument("--points", type=int, default=12, help="call numbers per primitive and kind")
    ap.add_argument("--max-call", type=int, default=3000)
    ap.add_argument("--seeds", type=int, default=4, help="random-failure runs per chance")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--timeout", type=int, default=60)
    args = ap.parse_args()

    runs = failed_calls = nulls = 0
    bad = []
    for prim in PRIMITIVES:
        for kind, count in (("one failure", 1), ("all from then", 1 << 40)):
            reached = 0
            misses = 0
            for n in call_numbers(args.points, args.max_call):
                spec = "%s:%d+%d" % (prim, n, count)
                res, why = run(args, spec, 1 + n)
                runs += 1
                if res is None:
                    bad.append("HAKMEM_FAULT=wait,%s %s %d %d %d: %s" % (spec, args.workload, 1 + n, args.threads, args.steps, why))
                    continue
                failed_calls += res[0]
                nulls += res[2]
                if res[0] == 0:
                    misses += 1
                    if misses == 2:  # past this primitive's last call
                        break
                else:
                    misses = 0
                    reached = n
            print("%-9s %-14s failures injected up to call %d" % (prim, kind, reached), flush=True)
    for ppm in (10000, 50000):
        for seed in range(1, args.seeds + 1):
            spec = "all:0:p=%d,seed=%d" % (ppm, seed)
            res, why = run(args, spec, seed)
            runs += 1
            if res is None:
                bad.append("HAKMEM_FAULT=wait,%s %s %d %d %d: %s" % (spec, args.workload, seed, args.threads, args.steps, why))
                continue
            failed_calls += res[0]
            nulls += res[2]
    print("fault sweep: %d runs, %d OS calls failed on purpose, %d NULLs returned, %d runs failed"
          % (runs, failed_calls, nulls, len(bad)))
    for b in bad:
        print("FAILED: " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
