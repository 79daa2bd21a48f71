#!/usr/bin/env python3
"""Runs every workload once at tiny size and checks that it exits 0 with a RESULT line.

usage: python3 bench/harness/smoke.py [--bin-dir DIR] [--preload LIB]

Multi-threaded workloads run with 2 threads; the fast-path loops run natively (no
valgrind). With --preload the allocator LIB is preloaded, else the default (glibc) runs.
Prints one line per run and closes with "N passed, N failed"; exits 1 if any failed.
"""

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import allocators  # noqa: E402
import binaries  # noqa: E402
import runner  # noqa: E402
import workloads  # noqa: E402

TIMEOUT = 60


def smoke_commands(bin_dir):
    """(name, argv) for every benchmark and fast-path loop at smoke size."""
    benches, loops = workloads.selected(None, "smoke")
    for b in benches:
        threads = min(2, max(b.threads))
        yield "%s t=%d" % (b.name, threads), [os.path.join(bin_dir, workloads.binary_name(b.program))] + b.args("smoke", threads)
    for c in loops:
        yield c.name, [os.path.join(bin_dir, workloads.binary_name(c.program))] + c.args(c.iterations["smoke"])


def main(argv=None):
    p = argparse.ArgumentParser(description="Run every workload once at tiny size.")
    p.add_argument("--bin-dir", help="directory with the bench_* binaries (compiled if missing)")
    p.add_argument("--preload", help="allocator library to preload")
    args = p.parse_args(argv)
    alloc = allocators.Allocator("preloaded" if args.preload else "glibc", args.preload)
    with tempfile.TemporaryDirectory() as tmp:
        bin_dir, note = binaries.ensure(args.bin_dir, tmp)
        print(note)
        passed = failed = 0
        for name, argv_ in smoke_commands(bin_dir):
            out = runner.run(argv_, alloc.env(), TIMEOUT)
            ok = out.status() == "ok" and "cannot be preloaded" not in out.stderr
            passed, failed = passed + ok, failed + (not ok)
            print("%s %-30s %s" % ("ok  " if ok else "FAIL", name,
                                   "%.2f s" % out.wall_seconds if ok else out.message() or out.stderr.strip()))
            if not ok:
                print("     " + runner.command_line(argv_, args.preload))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
