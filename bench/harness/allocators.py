"""The allocators compared, and where their shared libraries are.

hakmem is the project's Release libhakmem.so (a path given to the harness); glibc is the
system allocator with nothing preloaded; mimalloc, jemalloc and tcmalloc come from their
Debian packages, found with `dpkg -L` or at the usual library paths. scudo (LLVM's
hardened allocator, from Debian's libclang-rt-19-dev) is the hardened build's anchor: run
only with hakmem-secure or when named in --allocators. An allocator whose library cannot
be found or loaded is skipped with a note, never an error.
"""

import glob
import os
import platform
import re
import subprocess
from dataclasses import dataclass, field

ORDER = ("hakmem", "hakmem-secure", "glibc", "mimalloc", "jemalloc", "tcmalloc", "scudo")
# Compared only when asked for with --lib NAME=PATH (the hardened build, for its cost).
OPTIONAL = ("hakmem-secure",)
# The hardened build's anchors: run when hakmem-secure is, or when named in --allocators.
HARDENED_ONLY = ("scudo",)
# Any other NAME given with --lib NAME=PATH is an extra allocator (another build of
# hakmem, say), run after the ones above; --set NAME:VAR=VALUE gives one its own
# environment (hakmem with HAKMEM_PURGE_DELAY_MS=-1, say).
EXTRA_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")

# name -> (Debian package, library file name)
PACKAGES = {
    "mimalloc": ("libmimalloc2.0", "libmimalloc.so.2"),
    "jemalloc": ("libjemalloc2", "libjemalloc.so.2"),
    "tcmalloc": ("libtcmalloc-minimal4", "libtcmalloc_minimal.so.4"),
    "scudo": ("libclang-rt-19-dev", "libclang_rt.scudo_standalone-%s.so" % (platform.machine() or "x86_64")),
}

LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/*-linux-gnu", "/usr/lib64", "/usr/lib",
                "/usr/local/lib", "/usr/lib/llvm-*/lib/clang/*/lib/linux")


@dataclass
class Allocator:
    name: str
    preload: str  # the .so to put in LD_PRELOAD; None for glibc
    version: str = ""
    settings: dict = field(default_factory=dict)  # environment variables of its own

    def env(self, base=None):
        """The environment for a run under this allocator."""
        env = dict(os.environ if base is None else base)
        env.pop("LD_PRELOAD", None)
        if self.preload:
            env["LD_PRELOAD"] = self.preload
        env.update(self.settings)
        return env


@dataclass
class Skipped:
    name: str
    note: str


def _dpkg_lines(args):
    try:
        out = subprocess.run(["dpkg"] + args, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return out.stdout.splitlines() if out.returncode == 0 else []


def _package_version(package):
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def find_library(name):
    """(path, version) of a comparison allocator's library, or (None, "")."""
    package, filename = PACKAGES[name]
    for line in _dpkg_lines(["-L", package]):
        if os.path.basename(line) == filename and os.path.exists(line):
            return line, _package_version(package)
    for pattern in LIBRARY_DIRS:
        for path in sorted(glob.glob(os.path.join(pattern, filename))):
            if os.path.exists(path):
                return path, _package_version(package)
    return None, ""


def discover(hakmem_path, overrides=None, wanted=None, settings=None):
    """(allocators found, allocators skipped) in the canonical order, extras last.

    overrides maps an allocator name to a library path to use instead of searching (a name
    outside ORDER adds an extra allocator); wanted, if given, limits the result to those
    names (the others are not mentioned); settings maps a name to its environment.
    """
    overrides = dict(overrides or {})
    settings = dict(settings or {})
    found, skipped = [], []
    extras = [n for n in overrides if n not in ORDER]
    for name in list(ORDER) + extras:
        if wanted is not None and name not in wanted:
            continue
        if name == "glibc":
            found.append(Allocator("glibc", None))
            continue
        if name in OPTIONAL and name not in overrides:
            continue
        if (name in HARDENED_ONLY and name not in overrides and "hakmem-secure" not in overrides
                and (wanted is None or name not in wanted)):
            continue
        if name == "hakmem" or name in overrides:
            path = overrides.get(name, hakmem_path)
            if path and os.path.isfile(path):
                found.append(Allocator(name, os.path.abspath(path), settings=settings.get(name, {})))
            else:
                skipped.append(Skipped(name, "library not found at %s" % path))
            continue
        path, version = find_library(name)
        if path is None:
            skipped.append(Skipped(name, "package %s not installed (%s not found)" % PACKAGES[name]))
        else:
            found.append(Allocator(name, path, version, settings.get(name, {})))
    return found, skipped


def probe(allocator, command, timeout=60):
    """None if the dynamic loader accepts the allocator's library, else why not.

    The loader only warns when a preload cannot be loaded and then runs the program with
    glibc, which would silently measure the wrong allocator: such an allocator is skipped.
    A library that loads but then fails is not skipped: its runs are recorded as failures.
    """
    if not allocator.preload:
        return None
    try:
        out = subprocess.run(command, env=allocator.env(), capture_output=True, text=True,
                             timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None  # the runs themselves will show it
    for line in out.stderr.splitlines():
        if "cannot be preloaded" in line:
            return line.strip()
    return None
