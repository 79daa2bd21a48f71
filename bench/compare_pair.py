#!/usr/bin/env python3
"""Ratios of medians between two allocators of one results file, per workload row and as
a geometric mean: throughput A/B and peak RSS A/B. For runs that compare two builds of
hakmem (hardened vs default, purging vs not), where the report's tables, which are
relative to mimalloc and glibc, do not apply.

usage: bench/compare_pair.py RESULTS.json A B
"""
import json
import math
import statistics
import sys


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__.strip().splitlines()[-1])
    path, a, b = sys.argv[1:]
    runs = json.load(open(path))["runs"]
    rows = {}
    for r in runs:
        if r.get("status") != "ok" or r.get("warmup") or r.get("throughput") is None:
            continue
        key = "%s t=%s" % (r["workload"], r.get("threads"))
        rows.setdefault(key, {}).setdefault(r["allocator"], []).append(r)
    thr, rss = [], []
    print("| workload | throughput %s/%s | peak RSS %s/%s |" % (a, b, a, b))
    print("| --- | --- | --- |")
    for key in sorted(rows):
        v = rows[key]
        if a not in v or b not in v:
            continue
        t = statistics.median(x["throughput"] for x in v[a]) / statistics.median(x["throughput"] for x in v[b])
        m = statistics.median(x["peak_rss_kib"] for x in v[a]) / statistics.median(x["peak_rss_kib"] for x in v[b])
        thr.append(t)
        rss.append(m)
        print("| %s | %.3f | %.3f |" % (key, t, m))
    geo = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
    print("| **geometric mean** | **%.3f** | **%.3f** |" % (geo(thr), geo(rss)))


if __name__ == "__main__":
    main()
