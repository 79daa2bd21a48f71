#!/usr/bin/env python3
"""Shows that tools/check_layers.py fails where it must: on a copy of the tree with an
upward #include planted in a lower folder, with another folder's private header
included, with a file missing from the build's list, with the design picture out of
date, and (given libhakmem.a) on a symbol table with an upward call. The unchanged copy
must pass.

usage: test_check_layers.py [LIBHAKMEM.a [OBJCOPY]]"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
CHECK = os.path.join(HERE, "check_layers.py")


def run(top, *extra):
    out = subprocess.run([sys.executable, CHECK, "--src", os.path.join(top, "src")] + list(extra),
                         capture_output=True, text=True)
    return out.returncode, out.stdout


def copy_tree(dst):
    shutil.copytree(os.path.join(ROOT, "src"), os.path.join(dst, "src"))
    os.makedirs(os.path.join(dst, "docs"))
    shutil.copy(os.path.join(ROOT, "docs", "design.md"), os.path.join(dst, "docs"))
    shutil.copy(os.path.join(ROOT, "CMakeLists.txt"), dst)


def append(path, text):
    with open(path, "a") as f:
        f.write(text)


def replace(path, old, new):
    s = open(path).read()
    assert old in s, (path, old)
    open(path, "w").write(s.replace(old, new, 1))


PLANTS = [
    ("an upward include in a .c file", "upward",
     lambda t: append(os.path.join(t, "src/block/slab.c"), '\n#include "heap/heap.h"\n'),
     'src/block/slab.c:'),
    ("an upward include in a folder header", "upward_header",
     lambda t: replace(os.path.join(t, "src/space/space.h"), '#include "profile/profile.h"',
                       '#include "profile/profile.h"\n#include "stats/stats.h"'),
     'src/space/space.h:'),
    ("another folder's private header", "private",
     lambda t: append(os.path.join(t, "src/heap/prof.c"), '\n#include "profile/prof_maps.h"\n'),
     "private header"),
    ("a plain include of another folder's header", "plain",
     lambda t: append(os.path.join(t, "src/heap/heap.c"), '\n#include "prof_maps.h"\n'),
     'not a header of heap/'),
    ("a .c file not in the build's list", "unlisted",
     lambda t: shutil.copy(os.path.join(t, "src/block/slab.c"), os.path.join(t, "src/block/slab2.c")),
     "not listed in HAKMEM_SOURCES_block"),
    ("the design picture out of date", "picture",
     lambda t: replace(os.path.join(t, "docs/design.md"), "            span_cache.c ", "            spancache.c  "),
     "picture lists block/"),
]


def main(argv):
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        clean = os.path.join(tmp, "clean")
        copy_tree(clean)
        rc, out = run(clean)
        if rc != 0:
            print("FAIL: the unchanged tree does not pass:\n" + out)
            return 1
        print("ok: the unchanged tree passes")
        for what, name, plant, expect in PLANTS:
            top = os.path.join(tmp, name)
            copy_tree(top)
            plant(top)
            rc, out = run(top)
            if rc == 1 and expect in out:
                print("ok: %s fails: %s" % (what, [l for l in out.splitlines() if expect in l][0]))
            else:
                print("FAIL: %s was not caught (rc %d):\n%s" % (what, rc, out))
                failures += 1
        if len(argv) > 1:
            # An upward call: slab.o made to refer to a heap.c symbol, by renaming one of
            # its undefined symbols in a copy of the archive's member.
            lib = argv[1]
            objcopy = argv[2] if len(argv) > 2 and argv[2] else "objcopy"  # the toolchain's
            work = os.path.join(tmp, "objs")
            os.makedirs(work)
            subprocess.run(["ar", "x", os.path.abspath(lib)], cwd=work, check=True)
            slab = os.path.join(work, "slab.c.o")
            subprocess.run([objcopy, "--redefine-sym", "slab_gap=heap_malloc_slow", slab], check=True)
            objs = [os.path.join(work, n) for n in sorted(os.listdir(work))]
            rc, out = run(clean, *objs)
            expect = "slab.c -> heap_malloc_slow"
            if rc == 1 and expect in out:
                print("ok: an upward call fails: %s" % [l for l in out.splitlines() if expect in l][0])
            else:
                print("FAIL: an upward call was not caught (rc %d):\n%s" % (rc, out))
                failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
