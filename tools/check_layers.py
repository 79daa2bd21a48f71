#!/usr/bin/env python3
"""Checks hakmem's layers: a folder of src/ per layer, each file using only what is below it.

The layers are the folders of src/, bottom first, as CMakeLists.txt lists them in
HAKMEM_LAYERS; inside a folder, the order of HAKMEM_SOURCES_<folder>. A file's rank is
(its folder, its place in that list). Checked:

  symbols   a file may use a symbol defined by a file of lower rank, never higher, except
            the references named in ALLOWED (each with its reason in docs/design.md); read
            from the symbol tables of a static library's members (or object files) with nm
  includes  every #include "..." of src/: a folder's header is included only by files of
            that folder and the folders above; another folder's private header never; a
            .c file includes its own folder's header; each folder header includes the one
            of the folder below (base.h none), so the chain of headers is the order
  sources   each folder's .c files are exactly those CMakeLists.txt lists for it
  picture   docs/design.md's layer picture names every folder, top first, and each
            folder's files in the order above (headers first), nothing else
  size      no file in src/ is over MAX_LINES lines (one concept per file)

usage: check_layers.py [--src DIR] [--design FILE] [--cmake FILE] [LIB.a | OBJ.o ...]
With no library, the symbols are not checked. Exit status 0 when all is well, 1 if not.
"""
import argparse
import os
import re
import subprocess
import sys

MAX_LINES = 500
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

# (file that refers, symbol): the upward references the layer picture names.
ALLOWED = {
    # The first allocation of a process runs its set-up.
    ("heap_lifecycle.c", "init_process"),
    ("heap_lifecycle.c", "thread_key"),
    ("heap_lifecycle.c", "thread_key_ready"),
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
}


def cmake_layers(cmakelists):
    """[(folder, [file.c ...])], bottom first."""
    text = "\n".join(line.split("#")[0] for line in open(cmakelists))
    layers = re.search(r"set\(HAKMEM_LAYERS([^)]*)\)", text).group(1).split()
    out = []
    for layer in layers:
        m = re.search(r"set\(HAKMEM_SOURCES_%s\b([^)]*)\)" % layer, text)
        out.append((layer, re.findall(r"(\w+\.c)", m.group(1)) if m else []))
    return out


def symbols(paths):
    out = subprocess.run(["nm", "-A"] + paths, capture_output=True, text=True, check=True).stdout
    defined, undefined = {}, {}
    for line in out.splitlines():
        # "lib.a:member.o:0000000000000010 T name", "member.o:                 U name"
        m = re.match(r"^(?:.*[:/])?([^:/]+)\.o:(?:[0-9a-fA-F]+)?\s+(\S)\s+(\S+)$", line)
        if not m:
            continue
        member, kind, name = m.groups()
        defined.setdefault(member, set())
        undefined.setdefault(member, set())
        if kind == "U":
            undefined[member].add(name)
        elif kind.isupper() and kind in "TDBRVWGSI" or kind in "VWi":
            defined[member].add(name)  # i: an ifunc (HAK_CHECKED_ENTRY)
    return defined, undefined


def check_symbols(paths, rank):
    defined, undefined = symbols(paths)
    owner = {n: m for m, names in defined.items() for n in names}
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
    return bad


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def check_includes(src, layers):
    folders = [f for f, _ in layers]
    level = {f: i for i, f in enumerate(folders)}
    bad = []
    for folder in sorted(os.listdir(src)):
        path = os.path.join(src, folder)
        if not os.path.isdir(path):
            bad.append("src/%s: a file outside the layer folders" % folder)
            continue
        if folder not in level:
            bad.append("src/%s/: a folder that is not a layer (HAKMEM_LAYERS)" % folder)
            continue
        for name in sorted(os.listdir(path)):
            rel = "%s/%s" % (folder, name)
            lines = open(os.path.join(path, name)).read().splitlines()
            incs = [(i + 1, m.group(1)) for i, l in enumerate(lines) for m in [INCLUDE.match(l)] if m]
            for lineno, inc in incs:
                where = "src/%s:%d: #include \"%s\"" % (rel, lineno, inc)
                if "/" not in inc:
                    if inc != "hakmem.h" and not os.path.exists(os.path.join(path, inc)):
                        bad.append("%s: not a header of %s/ (another folder's is \"layer/layer.h\")" % (where, folder))
                    continue
                g, _, h = inc.partition("/")
                if g not in level:
                    bad.append("%s: not a layer's header" % where)
                elif h != g + ".h":
                    bad.append("%s: another folder's private header (include %s/%s.h)" % (where, g, g))
                elif level[g] > level[folder]:
                    bad.append("%s: a header of a higher layer (%s/ is above %s/)" % (where, g, folder))
            names = [inc for _, inc in incs]
            own = "%s/%s.h" % (folder, folder)
            if name.endswith(".c") and own not in names:
                bad.append("src/%s: does not include its folder's header \"%s\"" % (rel, own))
            if name == folder + ".h":
                below = level[folder] - 1
                want = "%s/%s.h" % (folders[below], folders[below]) if below >= 0 else None
                layer_incs = [n for n in names if "/" in n]
                if layer_incs != ([want] if want else []):
                    bad.append("src/%s: must include %s and no other folder's header (includes %s)"
                               % (rel, want or "none", ", ".join(layer_incs) or "none"))
    return bad


def check_sources(src, layers):
    bad = []
    for folder, files in layers:
        path = os.path.join(src, folder)
        there = sorted(n for n in os.listdir(path) if n.endswith(".c")) if os.path.isdir(path) else []
        for n in sorted(set(there) - set(files)):
            bad.append("src/%s/%s: not listed in HAKMEM_SOURCES_%s" % (folder, n, folder))
        for n in sorted(set(files) - set(there)):
            bad.append("HAKMEM_SOURCES_%s lists %s, which src/%s/ does not hold" % (folder, n, folder))
    return bad


def picture_order(src, layers):
    """The picture's expected order: folders top first, headers first, then the .c files
    from the top of the folder down."""
    out = []
    for folder, files in reversed(layers):
        path = os.path.join(src, folder)
        headers = sorted(n for n in os.listdir(path) if n.endswith(".h")) if os.path.isdir(path) else []
        headers.sort(key=lambda n: n != folder + ".h")
        out.append((folder, headers + list(reversed(files))))
    return out


def read_picture(design):
    """[(folder, [files])] from the first ``` block after '## Layers'."""
    text = open(design).read()
    at = text.find("## Layers")
    if at < 0:
        return None
    start = text.find("```", at)
    end = text.find("```", start + 3)
    if start < 0 or end < 0:
        return None
    out = []
    for line in text[start + 3:end].splitlines()[1:]:
        m = re.match(r"^\s?(\w+)/\s", line)
        if m:
            out.append((m.group(1), []))
        names = re.findall(r"(?<![\w/.])(\w+\.[ch])\b", line)
        if names and out:
            out[-1][1].append(names[0])
    return out


def check_picture(design, src, layers):
    want = picture_order(src, layers)
    got = read_picture(design)
    if got is None:
        return ["%s: no layer picture (a ``` block after '## Layers')" % design]
    if [f for f, _ in got] != [f for f, _ in want]:
        return ["docs/design.md's picture shows the folders %s; they are %s, top first"
                % (" ".join(f for f, _ in got), " ".join(f for f, _ in want))]
    bad = []
    for (folder, files), (_, expect) in zip(got, want):
        if files != expect:
            bad.append("docs/design.md's picture lists %s/ as %s; it holds, top first, %s"
                       % (folder, " ".join(files), " ".join(expect)))
    return bad


def check_sizes(src):
    bad = []
    for folder, _, names in sorted(os.walk(src)):
        for name in sorted(names):
            path = os.path.join(folder, name)
            with open(path) as f:
                n = sum(1 for _ in f)
            if n > MAX_LINES:
                bad.append("src/%s has %d lines (at most %d)" % (os.path.relpath(path, src), n, MAX_LINES))
    return bad


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", default=os.path.join(ROOT, "src"))
    ap.add_argument("--cmake", default=None, help="CMakeLists.txt (default: next to --src)")
    ap.add_argument("--design", default=None, help="docs/design.md (default: next to --src)")
    ap.add_argument("objects", nargs="*", help="libhakmem.a, or the library's object files")
    args = ap.parse_args(argv[1:])
    top = os.path.dirname(os.path.abspath(args.src))
    cmake = args.cmake or os.path.join(top, "CMakeLists.txt")
    design = args.design or os.path.join(top, "docs", "design.md")
    layers = cmake_layers(cmake)
    rank = {}
    for i, (folder, files) in enumerate(layers):
        for j, f in enumerate(files):
            rank[f] = (i, j)
    bad = check_sources(args.src, layers) + check_includes(args.src, layers)
    bad += check_picture(design, args.src, layers) + check_sizes(args.src)
    objects = [o for arg in args.objects for o in arg.split(";") if o]  # a CMake list too
    if objects:
        bad += check_symbols(objects, rank)
    for line in bad:
        print("layers:", line)
    print("layers: %d folders, %d files checked, %d problems" % (len(layers), len(rank), len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
