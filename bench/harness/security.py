#!/usr/bin/env python3
"""The public security suite: mimalloc-bench's bench/security programs, each of which
commits one memory error (on 8-byte, 4 KiB and 256 KiB blocks: 116 programs), built
with the suite's own CMake file outside the committed tree and run under each allocator.

    bench/harness/security.py --src DIR [--build DIR] [--lib NAME=PATH ...]
                              [--hardened-malloc SRC] [--json FILE]

DIR is a checkout of mimalloc-bench (github:daanx/mimalloc-bench) or its bench/security
folder; the build goes to build/security unless --build says otherwise. glibc (nothing
preloaded) and scudo run always (scudo skipped with a note when its library is missing);
each --lib NAME=PATH adds one, and --hardened-malloc SRC adds GrapheneOS
hardened_malloc's default and light variants, built from the checkout SRC
(hardened_malloc.py; skipped with a note when they cannot be built). A program catches its error, as the suite's own bench.sh
judges it, when it does not print NOT_CAUGHT and ends within the time limit (a crash,
an abort or a fault all count). The caught counts print per allocator, with the
programs each one missed; --json writes every outcome."""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from allocators import find_library  # noqa: E402
import hardened_malloc  # noqa: E402

TIMEOUT_S = 10  # bench.sh gives 1 s; a loaded machine needs more, and none takes long


def suite_dir(src):
    for d in (os.path.join(src, "bench", "security"), src):
        if os.path.exists(os.path.join(d, "CMakeLists.txt")) and os.path.exists(os.path.join(d, "common.h")):
            return d
    raise SystemExit("security: no bench/security suite under %s" % src)


def build(src, out, jobs):
    subprocess.run(["cmake", "-Wno-dev", "-S", src, "-B", out, "-DCMAKE_BUILD_TYPE=Release"], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", out, "-j", str(jobs)], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)  # the suite's own warnings
    programs = sorted(f for f in os.listdir(out)
                      if os.path.isfile(os.path.join(out, f)) and os.access(os.path.join(out, f), os.X_OK))
    if not programs:
        raise SystemExit("security: the build made no programs")
    return programs


def run_one(path, lib):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if lib:
        env["LD_PRELOAD"] = lib
    try:
        out = subprocess.run([path], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             timeout=TIMEOUT_S).stdout
    except subprocess.TimeoutExpired:
        return "timeout"
    return "missed" if b"NOT_CAUGHT" in out else "caught"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", required=True, help="mimalloc-bench checkout, or its bench/security")
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "security"))
    ap.add_argument("--lib", action="append", default=[], metavar="NAME=PATH")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--hardened-malloc", metavar="SRC", help="hardened_malloc checkout, built and added")
    ap.add_argument("--json", help="write every outcome here")
    args = ap.parse_args()
    programs = build(suite_dir(args.src), args.build, args.jobs)
    allocators = [("glibc", None)]
    scudo, _ = find_library("scudo")
    if scudo:
        allocators.append(("scudo", scudo))
    else:
        print("security: scudo skipped (its library is not installed)")
    if args.hardened_malloc:
        built, notes = hardened_malloc.build(args.hardened_malloc, jobs=args.jobs)
        for note in notes:
            print("security: " + note)
        args.lib += ["%s=%s" % item for item in built.items()]
    for spec in args.lib:
        name, _, path = spec.partition("=")
        if not os.path.exists(path):
            print("security: %s skipped (no %s)" % (name, path))
            continue
        allocators.append((name, os.path.abspath(path)))
    results = {}
    for name, lib in allocators:
        start = time.monotonic()
        outcomes = {p: run_one(os.path.join(args.build, p), lib) for p in programs}
        results[name] = outcomes
        caught = sum(o == "caught" for o in outcomes.values())
        print("%-16s caught %3d of %d  (%.1f s)" % (name, caught, len(programs), time.monotonic() - start))
    for name, outcomes in results.items():
        missed = [p for p, o in outcomes.items() if o != "caught"]
        print("\n%s missed %d:\n  %s" % (name, len(missed), " ".join(missed)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"programs": programs, "outcomes": results}, f, indent=1)


if __name__ == "__main__":
    main()
