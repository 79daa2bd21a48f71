#!/usr/bin/env python3
"""The allocator's share of a program's instructions, from a callgrind output file.

usage: python3 bench/harness/callgrind_share.py CALLGRIND.OUT... [--object LIB] [--json]
       python3 bench/harness/callgrind_share.py --run PROGRAM [--size K=V,...]
                                                [--preload LIB] [--out DIR] [--json]

BENCH.md asks what share of a real program's time is the allocator. Callgrind records,
for every call site, the inclusive cost of the call; this tool adds up the calls that
enter the allocator from outside it: calls from any function that is not the
allocator's into malloc, free, realloc, calloc and the other entry points. Calls the
allocator makes to itself are inside those costs and are not counted twice; what it
calls outside itself (memset for calloc, memcpy for realloc, the mmap family) is, and is
also shown apart.

The allocator's functions are the ones in the object given with --object (the
preloaded library: libhakmem.so, libmimalloc.so.2, ...), whatever their names, plus
functions of any object with the names of the C allocator API. Without --object (glibc,
nothing preloaded) only those names count, with glibc's internal helpers (_int_malloc,
sysmalloc, ...) as the allocator's own callers.

With --run, the tool first runs one of the harness's real programs (programs.py: lua,
python, perl, redis, sqlite, git) under `valgrind --tool=callgrind`, with the same
environment and generated input as the harness (--size, default its cachegrind size),
the allocator LIB preloaded (none: glibc), one output file per process in --out; it
prints the exact command. By hand, for example:
  LD_PRELOAD=build/release/libhakmem.so valgrind --tool=callgrind \\
      --callgrind-out-file=lua.hakmem.out lua5.4 bench/programs/churn.lua 3000 4096 1
Several files (one per process) are added together. Instruction counts only: the
kernel's work (page faults, the system calls themselves) is not in them.
"""

import argparse
import json
import os
import re
import sys
from collections import defaultdict

# The entry points by group, by the names they have in glibc, mimalloc, jemalloc, tcmalloc,
# hakmem and the C++ runtime (operator new and delete). mimalloc's malloc_usable_size is
# seen as its alias malloc_size, tcmalloc's as the GetAllocatedSize it jumps to.
GROUPS = ("malloc", "free", "realloc", "calloc", "aligned", "usable_size", "other")
_NAME_GROUP = [
    (re.compile(r"(^|_)calloc$|^mi_calloc|^hak_calloc"), "calloc"),
    (re.compile(r"realloc"), "realloc"),
    (re.compile(r"memalign|aligned_alloc|valloc$"), "aligned"),
    (re.compile(r"usable_size|^malloc_size$|GetAllocatedSize"), "usable_size"),
    (re.compile(r"(^|_)free(_sized|_aligned_sized)?$|^cfree$|^_Zd[la]"), "free"),
    (re.compile(r"(^|_)malloc$|^_Zn[wa]"), "malloc"),
]
# Names that are the allocator wherever they are (glibc's, or any allocator's exports).
API_NAMES = {"malloc", "free", "calloc", "realloc", "reallocarray", "posix_memalign", "aligned_alloc",
             "memalign", "valloc", "pvalloc", "malloc_usable_size", "cfree", "free_sized",
             "free_aligned_sized", "__libc_malloc", "__libc_free", "__libc_calloc", "__libc_realloc",
             "__libc_memalign", "__libc_valloc", "__libc_pvalloc", "__posix_memalign"}
# glibc's internal helpers: never entry points, but never callers from outside either.
GLIBC_INTERNAL = re.compile(r"^(_int_|malloc_|sysmalloc|tcache_|arena_|__malloc_|_mid_memalign|ptmalloc_|"
                            r"unlink_chunk|alloc_perturb|checked_request2size|mremap_chunk|munmap_chunk|"
                            r"systrim|heap_trim|new_heap|shrink_heap|alloc_new_heap|__libc_malloc_|"
                            r"_dl_malloc|__malloc_arena)")
MEMORY = re.compile(r"mem(set|cpy|move)|^__bzero|^bzero")
SYSTEM = re.compile(r"^(__)?(mmap|mmap64|munmap|madvise|mremap|mprotect|brk|sbrk|__brk|__sbrk|syscall)$")


def group_of(name):
    for pattern, group in _NAME_GROUP:
        if pattern.search(name):
            return group
    return "other"


class Profile:
    """Calls and costs read from callgrind output: `edges` maps (caller, callee) to
    [calls, inclusive Ir], a function being (object, name); `total` is the run's Ir."""

    def __init__(self):
        self.edges = defaultdict(lambda: [0, 0])
        self.total = 0


def read(lines, profile=None):
    """Adds one callgrind output file (an iterable of its lines) to profile."""
    profile = profile or Profile()
    names = {"ob": {}, "fn": {}}
    positions, ir_index = 1, 0
    ob = fn = None
    call_ob = call_fn = None
    pending_calls = None
    file_total = None

    def name(kind, text):
        # "(id) name" defines id; "(id)" refers to it; a bare name has no id
        m = re.match(r"^\((\d+)\)(?:\s(.*))?$", text.strip())
        if not m:
            return text.strip()
        if m.group(2) is not None:
            names[kind][m.group(1)] = m.group(2)
            return m.group(2)
        return names[kind].get(m.group(1), "(%s)" % m.group(1))

    for raw in lines:
        line = raw.rstrip("\n")
        if not line or line.startswith("#"):
            continue
        head = line[:1]
        if head.isdigit() or head in "+-*" or line.startswith("0x"):
            if pending_calls is not None:
                tokens = line.split()
                costs = tokens[positions:]
                ir = int(costs[ir_index]) if len(costs) > ir_index else 0
                edge = profile.edges[(ob, fn), (call_ob or ob, call_fn)]
                edge[0] += pending_calls
                edge[1] += ir
                pending_calls, call_ob = None, None
            continue
        key, sep, value = line.partition("=")
        if sep and key in ("ob", "fn", "cob", "cfn", "fl", "fi", "fe", "cfi", "cfl", "jfi", "jfn"):
            if key == "ob":
                ob = name("ob", value)
            elif key == "fn":
                fn = name("fn", value)
            elif key == "cob":
                call_ob = name("ob", value)
            elif key in ("cfn", "jfn"):
                value = name("fn", value)
                if key == "cfn":
                    call_fn = value
            continue
        if sep and key == "calls":
            pending_calls = int(value.split()[0])
            continue
        if sep and key in ("jump", "jcnd"):
            continue
        key, sep, value = line.partition(":")
        if key == "positions":
            positions = len(value.split())
        elif key == "events":
            events = value.split()
            ir_index = events.index("Ir") if "Ir" in events else 0
        elif key in ("summary", "totals"):
            counts = value.split()
            if counts:
                file_total = int(counts[ir_index])
    profile.total += file_total or 0
    return profile


def _same_object(path, wanted):
    if not path or not wanted:
        return False
    if os.path.exists(path) and os.path.exists(wanted):
        return os.path.realpath(path) == os.path.realpath(wanted)
    return os.path.basename(path).startswith(os.path.basename(wanted))


def share(profile, allocator_object=None):
    """{total, allocator, groups: {group: {calls, ir}}, memory, system}: the cost of the
    calls entering the allocator from outside, by entry point, and what the allocator
    spent in memset/memcpy/memmove and in the mmap family (inside those costs)."""
    def mine(func):
        obj, name = func
        if allocator_object is not None and _same_object(obj, allocator_object):
            return True
        return name in API_NAMES or (allocator_object is None and bool(GLIBC_INTERNAL.match(name or "")))

    groups = {g: {"calls": 0, "ir": 0} for g in GROUPS}
    memory = system = 0
    for (caller, callee), (calls, ir) in profile.edges.items():
        if mine(callee) and not mine(caller):
            g = groups[group_of(callee[1] or "")]
            g["calls"] += calls
            g["ir"] += ir
        elif mine(caller) and not mine(callee):
            if MEMORY.search(callee[1] or ""):
                memory += ir
            elif SYSTEM.match(callee[1] or ""):
                system += ir
    allocator = sum(g["ir"] for g in groups.values())
    return {"total": profile.total, "allocator": allocator, "groups": groups, "memory": memory, "system": system}


def format_share(result):
    total = result["total"] or 1
    out = ["total instructions (Ir): %d" % result["total"],
           "in the allocator (calls from outside it, inclusive): %d = %.2f%%"
           % (result["allocator"], 100.0 * result["allocator"] / total),
           "%-12s %12s %14s %10s %8s" % ("entry", "calls", "Ir inclusive", "Ir/call", "of total")]
    for name in GROUPS:
        g = result["groups"][name]
        if g["calls"]:
            out.append("%-12s %12d %14d %10.1f %7.2f%%" % (name, g["calls"], g["ir"], g["ir"] / g["calls"],
                                                           100.0 * g["ir"] / total))
    out.append("of which the allocator's calls to memset/memcpy/memmove: %d Ir; to the mmap family: %d Ir"
               % (result["memory"], result["system"]))
    return "\n".join(out)


def run_program(name, size_text, preload, out_dir):
    """Runs a real program of programs.py under callgrind into out_dir; returns (output
    files, the command line, the run's status)."""
    import glob
    import shutil
    import tempfile

    import binaries
    import programs
    import workloads

    prog = next((p for p in programs.PROGRAMS if p.name == name), None)
    if prog is None:
        raise SystemExit("no program %r; programs: %s" % (name, ", ".join(programs.names())))
    size = dict(prog.sizes["cachegrind"])
    for item in filter(None, (size_text or "").split(",")):
        key, _, value = item.partition("=")
        size[key] = int(value)
    os.makedirs(out_dir, exist_ok=True)
    for old in glob.glob(os.path.join(out_dir, "callgrind.*.out")):
        os.remove(old)
    bin_dir, _ = binaries.ensure(None, tempfile.mkdtemp(prefix="hakmem-bench-bin-"), [programs.HELPER])
    prefix = ["valgrind", "--tool=callgrind", "--callgrind-out-file=%s/callgrind.%%p.out" % out_dir]
    if prog.trace_children:
        prefix.append("--trace-children=yes")
        if prog.untraced:
            prefix.append("--trace-children-skip=" + ",".join("*/" + n for n in prog.untraced))
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    if preload:
        env["LD_PRELOAD"] = os.path.abspath(preload)  # the programs may change directory
    elif prog.glibc_preloads_libc and programs.find_libc():
        env["LD_PRELOAD"] = programs.find_libc()  # glibc's malloc, not the one it is linked with
    run_dir = os.path.join(out_dir, "run")
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(run_dir)
    ctx = prog.prepare(size, os.path.join(out_dir, "inputs"))
    run = prog.run(ctx, env, 3600, os.path.join(bin_dir, workloads.binary_name(programs.HELPER)), run_dir,
                   prefix=prefix)
    return sorted(glob.glob(os.path.join(out_dir, "callgrind.*.out"))), run.command, run.status()


def main(argv=None):
    p = argparse.ArgumentParser(description="The allocator's share of a program's instructions (callgrind).")
    p.add_argument("files", nargs="*", help="callgrind output files (added together)")
    p.add_argument("--object", help="the preloaded allocator library (its functions are the allocator's)")
    p.add_argument("--run", metavar="PROGRAM", help="first run this real program of the harness under callgrind")
    p.add_argument("--size", help="with --run: its size as K=V,... (default: its cachegrind size)")
    p.add_argument("--preload", help="with --run: the allocator library to preload (default: none, glibc)")
    p.add_argument("--out", default="callgrind-share", help="with --run: where the output files go")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = p.parse_args(argv)
    files, obj = list(args.files), args.object
    if args.run:
        files, command, status = run_program(args.run, args.size, args.preload, args.out)
        print("command (%s):\n%s" % (status, command))
        obj = obj or args.preload
    if not files:
        p.error("no callgrind output files")
    profile = Profile()
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            read(f, profile)
    result = share(profile, obj)
    print(json.dumps(result, indent=1) if args.json else format_share(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
