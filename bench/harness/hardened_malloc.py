"""GrapheneOS hardened_malloc, the second anchor of the hardened build beside scudo.

It has no Debian package: the harness builds it from a checkout given to it
(github:GrapheneOS/hardened_malloc, kept outside the committed tree) with clang-19 and
CONFIG_WERROR=false, in its default and light variants, into build/hardened_malloc
(its Makefile's out/ and out-light/ there):

    bench/harness/hardened_malloc.py --src DIR [--build DIR]

prints the two libraries' paths, as `--lib` arguments for run.py (`make bench-hardened
HARDENED_MALLOC_SRC=DIR` passes them); security.py builds it itself with
--hardened-malloc DIR. A variant that cannot be built is skipped with a note on stderr,
never an error.
"""
import argparse
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_BUILD = os.path.join(ROOT, "build", "hardened_malloc")
# name -> (Makefile VARIANT, library file under the build's out folder)
VARIANTS = {
    "hardened_malloc": ("default", os.path.join("out", "libhardened_malloc.so")),
    "hardened_malloc-light": ("light", os.path.join("out-light", "libhardened_malloc-light.so")),
}
CC, CXX = "clang-19", "clang++-19"


def build(src, out=DEFAULT_BUILD, jobs=2):
    """({name: library path}, [skip notes]) for both variants, built from src into out."""
    found, notes = {}, []
    if not os.path.exists(os.path.join(src, "h_malloc.c")):
        return found, ["hardened_malloc skipped: no checkout at %s" % src]
    if shutil.which(CC) is None or shutil.which(CXX) is None:
        return found, ["hardened_malloc skipped: %s or %s not installed" % (CC, CXX)]
    if os.path.abspath(out) != os.path.abspath(src):
        shutil.copytree(src, out, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".git", "out", "out-*"))
    for name, (variant, lib) in VARIANTS.items():
        cmd = ["make", "-C", out, "-j", str(jobs), "CC=" + CC, "CXX=" + CXX, "CONFIG_WERROR=false",
               "VARIANT=" + variant]
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        path = os.path.join(out, lib)
        if done.returncode != 0 or not os.path.exists(path):
            tail = done.stderr.strip().splitlines()[-1:] or ["no library"]
            notes.append("%s skipped: the build failed (%s)" % (name, tail[0]))
        else:
            found[name] = path
    return found, notes


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", required=True, help="hardened_malloc checkout")
    ap.add_argument("--build", default=DEFAULT_BUILD)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    found, notes = build(args.src, args.build, args.jobs)
    for note in notes:
        print(note, file=sys.stderr)  # stdout holds only the --lib arguments
    for name, path in found.items():
        print("--lib %s=%s" % (name, path))


if __name__ == "__main__":
    main()
