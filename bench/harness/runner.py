"""Running one workload process and reading what it did.

A run is started directly (no shell), its stdout and stderr go to temporary files, and
the harness waits for it. A run longer than its timeout is killed with its process group.

Peak RSS comes from the workload itself (peak_rss_kib in its RESULT line, the kernel's
VmHWM for the process), not from wait4's ru_maxrss: the kernel folds the high-water mark
of the memory a child had before exec into ru_maxrss, and a child forked or vforked from
this Python process had the harness's own ~15-25 MiB (checked: /bin/true reports 14 MiB
this way, 1 MiB under /usr/bin/time), which would hide the small workloads' differences.
"""

import os
import re
import shlex
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass

from results import parse_result_line


@dataclass
class Outcome:
    wall_seconds: float
    exit_status: int  # exit code, or minus the signal number
    stdout: str
    stderr: str
    timed_out: bool
    watched: dict = None  # the figures of run()'s watch, if one was given

    @property
    def result(self):
        return parse_result_line(self.stdout)

    def status(self):
        """ok, failed, crashed or timeout."""
        if self.timed_out:
            return "timeout"
        if self.exit_status < 0:
            return "crashed"
        if self.exit_status != 0 or self.result is None:
            return "failed"
        return "ok"

    def message(self):
        """Why a run is not ok (None when it is)."""
        status = self.status()
        if status == "ok":
            return None
        if status == "timeout":
            return "killed after the time limit"
        lines = [l.strip() for l in self.stderr.splitlines() if l.strip()]
        fails = [l for l in lines if l.startswith("FAIL ")]
        if status == "crashed":
            what = "killed by signal %d (%s)" % (-self.exit_status, _signal_name(-self.exit_status))
            return what + (": " + lines[-1] if lines else "")
        if fails:
            return fails[-1]
        if self.exit_status == 0:
            return "exit 0 but no RESULT line"
        return "exit %d%s" % (self.exit_status, ": " + lines[-1] if lines else "")


def _signal_name(number):
    try:
        return signal.Signals(number).name
    except ValueError:
        return "signal %d" % number


def command_line(argv, env_preload, settings=None):
    """The exact command as one shell line, LD_PRELOAD and any settings first."""
    prefix = "LD_PRELOAD=%s " % shlex.quote(env_preload) if env_preload else ""
    for var, value in sorted((settings or {}).items()):
        prefix += "%s=%s " % (var, shlex.quote(value))
    return prefix + shlex.join(argv)


def run(argv, env, timeout, watch=None):
    """Runs argv with env; returns an Outcome. watch, if given, is started as
    watch(pid) once the process is and stopped (.stop(), which returns a dict of
    figures for Outcome.watched) once it has been waited for."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)
        watcher = watch(proc.pid) if watch else None
        timed_out = False
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        watched = watcher.stop() if watcher is not None else None
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        return Outcome(wall_seconds=wall, exit_status=proc.returncode,
                       stdout=out.read().decode(errors="replace"),
                       stderr=err.read().decode(errors="replace"), timed_out=timed_out, watched=watched)


_COLLECTED = re.compile(r"^==\d+== Collected : (\d+)\s*$", re.M)
_IREFS = re.compile(r"^==\d+== I\s+refs:\s+([\d,]+)\s*$", re.M)


def parse_callgrind_total(stderr):
    """Total instructions from callgrind's closing summary on stderr, or None."""
    m = _COLLECTED.search(stderr) or _IREFS.search(stderr)
    return int(m.group(1).replace(",", "")) if m else None


def callgrind_argv(argv):
    return ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"] + list(argv)


# Cachegrind's cache geometry, given rather than read from the machine: a VM's CPUID can
# describe a last-level cache that no core has (this one's says 320 MiB, direct-mapped),
# and counts taken on two machines should be comparable. 32 KiB 8-way L1s and a 32 MiB
# 16-way last level, 64-byte lines (the EPYC the project's figures come from).
CACHEGRIND_GEOMETRY = ["--I1=32768,8,64", "--D1=32768,8,64", "--LL=33554432,16,64"]

_CG_LINE = re.compile(r"^==(\d+)== (I|I1|LLi|D|D1|LLd|LL)\s+(refs|misses):\s+([\d,]+)"
                      r"(?:\s+\(\s*([\d,]+) rd\s+\+\s+([\d,]+) wr\))?\s*$", re.M)
_CG_NAMES = {("I", "refs"): ("Ir",), ("I1", "misses"): ("I1mr",), ("LLi", "misses"): ("ILmr",),
             ("D", "refs"): ("D", "Dr", "Dw"), ("D1", "misses"): ("D1m", "D1mr", "D1mw"),
             ("LLd", "misses"): ("DLm", "DLmr", "DLmw")}


def parse_cachegrind_summary(stderr):
    """Cachegrind's closing counts (valgrind --tool=cachegrind --cache-sim=yes), summed
    over every process that printed them (with --trace-children=yes each process prints
    its own), as {Ir, I1mr, ILmr, Dr, Dw, D1mr, D1mw, DLmr, DLmw, processes}; None when no
    process printed a complete summary. A process whose summary lacks a line is left out
    and not counted in `processes`."""
    per_pid = {}
    for m in _CG_LINE.finditer(stderr):
        names = _CG_NAMES.get((m.group(2), m.group(3)))
        if names is None:
            continue  # the LL refs/misses totals: derived from the lines kept
        values = [int(g.replace(",", "")) for g in m.groups()[3:] if g is not None]
        counts = per_pid.setdefault(m.group(1), {})
        for name, value in zip(names if len(values) > 1 else names[:1], values):
            counts[name] = value
    keys = ("Ir", "I1mr", "ILmr", "Dr", "Dw", "D1mr", "D1mw", "DLmr", "DLmw")
    complete = [c for c in per_pid.values() if all(k in c for k in keys)]
    if not complete:
        return None
    total = {k: sum(c[k] for c in complete) for k in keys}
    total["processes"] = len(complete)
    return total


def cachegrind_argv(trace_children=False):
    """The valgrind command that goes before a program for the cachegrind pass."""
    argv = ["valgrind", "--tool=cachegrind", "--cache-sim=yes", "--cachegrind-out-file=/dev/null"]
    argv += CACHEGRIND_GEOMETRY
    if trace_children:
        argv.append("--trace-children=yes")
    return argv
