#!/usr/bin/env python3
"""Checks that hakmem's object files call only down the layers, and that no file in
src/ is over MAX_LINES lines (one concept per file).

The layers are the order of HAKMEM_SOURCES in CMakeLists.txt, bottom first: a file may
use a symbol defined by a file listed before it, never after it, except for the
references named in ALLOWED (each with its reason in docs/design.md). Reads the symbol
tables of a static library's members with nm.

usage: check_layers.py LIBHAKMEM.a [CMakeLists.txt]
Exit status 0 when every reference goes down (or is allowed), 1 otherwise.
"""
import os
import re
import subprocess
import sys

MAX_LINES = 500

# (file that refers, symbol, file that defines it): the upward references the layer
# picture names.
ALLOWED = {
    # The first allocation of a process runs its set-up.
    ("heap_lifecycle.c", "hak_process_init"),
    ("heap_lifecycle.c", "hak_thread_key"),
    ("heap_lifecycle.c", "hak_key_ready"),
    # A large block comes from and goes back to the calling thread's span cache: the
    # thread's heap pointer (and the empty heap it starts with) live with the queues.
    ("span_cache.c", "hak_heap_empty"),
    ("large.c", "hak_heap_empty"),
    ("large.c", "hak_tls_heap"),
    # Under memcheck or a sanitizer, the checked hak_ functions call the process's own
    # malloc and friends: the checker's, whichever object defines them.
    ("checkers.c", "malloc"),
    ("checkers.c", "free"),
    ("checkers.c", "calloc"),
    ("checkers.c", "realloc"),
    ("checkers.c", "memalign"),
    ("checkers.c", "valloc"),
    ("checkers.c", "posix_memalign"),
    ("checkers.c", "malloc_usable_size"),
    ("large.c", "hak_tls_alloc"),
    ("ctl.c", "hak_checker"),
}


def layer_order(cmakelists):
    text = "\n".join(line.split("#")[0] for line in open(cmakelists))
    layers = re.search(r"set\(HAKMEM_LAYERS([^)]*)\)", text).group(1).split()
    files = []
    for layer in layers:
        body = re.search(r"set\(HAKMEM_SOURCES_%s\b([^)]*)\)" % layer, text).group(1)
        files += re.findall(r"(\w+\.c)", body)
    return files


def symbols(lib):
    out = subprocess.run(["nm", lib], capture_output=True, text=True, check=True).stdout
    defined, undefined, member = {}, {}, None
    for line in out.splitlines():
        m = re.match(r"^(\S+)\.o:$", line)
        if m:
            member = m.group(1)
            defined.setdefault(member, set())
            undefined.setdefault(member, set())
            continue
        parts = line.split()
        if member is None or len(parts) < 2:
            continue
        kind, name = parts[-2], parts[-1]
        if kind == "U":
            undefined[member].add(name)
        elif kind.upper() in "TDBRVWGS" or kind in "tdbri":
            if kind.isupper() or kind in "VWi":  # i: an ifunc (HAK_CHECKED_ENTRY)
                defined[member].add(name)
    return defined, undefined


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    lib = argv[1]
    cmakelists = argv[2] if len(argv) > 2 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "CMakeLists.txt")
    order = layer_order(cmakelists)
    rank = {f: i for i, f in enumerate(order)}
    defined, undefined = symbols(lib)
    owner = {}
    for member, names in defined.items():
        for n in names:
            owner[n] = member
    bad = []
    for member, names in sorted(undefined.items()):
        if member not in rank:
            continue
        for n in sorted(names):
            d = owner.get(n)
            if d is None or d == member or d not in rank:
                continue
            if rank[d] > rank[member] and (member, n) not in ALLOWED:
                bad.append("%s -> %s (defined in %s, a higher layer)" % (member, n, d))
    src = os.path.join(os.path.dirname(os.path.abspath(cmakelists)), "src")
    for folder, _, names in sorted(os.walk(src)):
        for name in sorted(names):
            path = os.path.join(folder, name)
            with open(path) as f:
                n = sum(1 for _ in f)
            if n > MAX_LINES:
                bad.append("%s has %d lines (at most %d)" % (os.path.relpath(path, src), n, MAX_LINES))
    for line in bad:
        print("layers:", line)
    print("layers: %d files checked, %d problems" % (len(order), len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
