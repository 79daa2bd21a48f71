"""A description of the machine and the source tree, stored with every results file."""

import datetime
import os
import platform
import subprocess


def _run(argv, cwd=None):
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def describe(repo_dir):
    commit = _run(["git", "rev-parse", "HEAD"], cwd=repo_dir)
    dirty = _run(["git", "status", "--porcelain"], cwd=repo_dir)
    return {
        "uname": _run(["uname", "-a"]) or " ".join(platform.uname()),
        "cpu": cpu_model(),
        "nproc": os.cpu_count(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "git_commit": commit or "none (no commit yet)",
        "git_dirty": bool(dirty),
        "python": platform.python_version(),
        "valgrind": _run(["valgrind", "--version"]) or "not installed",
    }
