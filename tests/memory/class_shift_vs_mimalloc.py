#!/usr/bin/env python3
"""A size-class change in the working set must not double hakmem's peak RSS against
mimalloc's: bench_class_shift (fill with 64 B blocks, free 90% at random, allocate the
freed bytes again in 4 KiB blocks) under each, peak RSS compared. Skipped (exit 77) when
mimalloc's library is not installed.

usage: class_shift_vs_mimalloc.py BENCH_CLASS_SHIFT LIBHAKMEM [WORKING_SET_MIB=64]
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "harness"))
import allocators  # noqa: E402

SKIP = 77
LIMIT = 2.0


def peak_kib(binary, preload, mib):
    env = dict(os.environ, LD_PRELOAD=preload)
    out = subprocess.run([binary, str(mib)], env=env, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        sys.exit("bench_class_shift failed under %s:\n%s%s" % (preload, out.stdout, out.stderr))
    line = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")][-1]
    fields = dict(kv.split("=", 1) for kv in line.split()[1:])
    return int(fields["peak_rss_kib"]), line


def main():
    binary, hakmem = sys.argv[1], sys.argv[2]
    mib = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    mimalloc, _ = allocators.find_library("mimalloc")
    if mimalloc is None:
        print("class_shift_vs_mimalloc: mimalloc is not installed; skipped")
        return SKIP
    mine, mine_line = peak_kib(binary, hakmem, mib)
    theirs, theirs_line = peak_kib(binary, mimalloc, mib)
    ratio = mine / theirs
    print("hakmem:   " + mine_line)
    print("mimalloc: " + theirs_line)
    print("peak RSS hakmem / mimalloc = %.3f (must stay below %.1f)" % (ratio, LIMIT))
    return 0 if ratio < LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())
