"""Where the workload binaries come from.

Normally from the CMake build (build/release/bench/ by default, or --bin-dir). When that
directory lacks any of them, the harness compiles the workloads itself with the same
flags as bench/CMakeLists.txt (cc -std=gnu11 -O2 -g -pthread), so it runs without a
configured build tree.
"""

import os
import shutil
import subprocess

from workloads import SOURCES, binary_name

BENCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOADS_DIR = os.path.join(BENCH_DIR, "workloads")
REPO_DIR = os.path.dirname(BENCH_DIR)
DEFAULT_BIN_DIR = os.path.join(REPO_DIR, "build", "release", "bench")
CFLAGS = ["-std=gnu11", "-O2", "-g", "-Wall", "-Wextra", "-pthread"]


def missing(bin_dir, programs=None):
    programs = SOURCES if programs is None else programs
    return [p for p in programs
            if not os.access(os.path.join(bin_dir, binary_name(p)), os.X_OK)]


def compile_all(out_dir, programs=None, cc=None):
    """Compiles the workloads into out_dir; returns out_dir. Raises on a compile error."""
    programs = SOURCES if programs is None else programs
    cc = cc or os.environ.get("CC") or shutil.which("cc") or "gcc"
    os.makedirs(out_dir, exist_ok=True)
    header = os.path.join(WORKLOADS_DIR, "bench_common.h")
    for program in programs:
        source = os.path.join(WORKLOADS_DIR, SOURCES[program])
        target = os.path.join(out_dir, binary_name(program))
        if (os.path.exists(target) and os.path.getmtime(target) >= os.path.getmtime(source)
                and os.path.getmtime(target) >= os.path.getmtime(header)):
            continue
        subprocess.run([cc] + CFLAGS + ["-o", target, source], check=True)
    return out_dir


def ensure(bin_dir, fallback_dir, programs=None):
    """(directory holding every needed binary, note on where they came from)."""
    bin_dir = bin_dir or DEFAULT_BIN_DIR
    if os.path.isdir(bin_dir) and not missing(bin_dir, programs):
        return bin_dir, "workload binaries from %s" % bin_dir
    compile_all(fallback_dir, programs)
    return fallback_dir, "workload binaries compiled by the harness into %s (%s not built)" % (
        fallback_dir, bin_dir)
