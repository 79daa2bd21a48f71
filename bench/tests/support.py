"""Shared by the harness tests: import path, workload binaries, running the harness."""

import atexit
import os
import shutil
import subprocess
import sys
import tempfile

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
BENCH_DIR = os.path.dirname(TESTS_DIR)
HARNESS_DIR = os.path.join(BENCH_DIR, "harness")
sys.path.insert(0, HARNESS_DIR)

import binaries  # noqa: E402

_compiled = None


def bin_dir():
    """The built workloads: $BENCH_BIN_DIR (set by ctest) if complete, else compiled
    once per test process into a temporary directory."""
    global _compiled
    given = os.environ.get("BENCH_BIN_DIR")
    if given and os.path.isdir(given) and not binaries.missing(given):
        return given
    if _compiled is None:
        _compiled = tempfile.mkdtemp(prefix="hakmem-bench-bin-")
        atexit.register(shutil.rmtree, _compiled, True)
        binaries.compile_all(_compiled)
    return _compiled


def run_harness(*args):
    """Runs run.py in smoke mode with the given extra arguments; returns CompletedProcess."""
    argv = [sys.executable, os.path.join(HARNESS_DIR, "run.py"), "--smoke", "--bin-dir", bin_dir(),
            "--no-callgrind", "--svg"] + list(args)
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)
