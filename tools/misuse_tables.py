#!/usr/bin/env python3
"""The misuse catch table, from the matrix: runs `misuse_case_plain --matrix` under each
allocator (glibc, scudo, hakmem's default and hardened builds), counts the cases caught
per class of error, and writes the table into docs/misuse.md between its markers.

    tools/misuse_tables.py [--build build/release] [--write]

Without --write the table is printed. An allocator whose library is not there is left
out of the table (its column says so)."""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCUDO = "/usr/lib/llvm-19/lib/clang/19/lib/linux/libclang_rt.scudo_standalone-x86_64.so"
BEGIN, END = "<!-- misuse matrix: tools/misuse_tables.py -->", "<!-- end of misuse matrix -->"

# Classes of error, in the table's order: a case belongs to the first whose pattern its
# name matches.
CLASSES = [
    ("double free, invalid free", r"^(double_free|invalid|free_sized)_"),
    ("C++ delete mismatch", r"^cxx_"),
    ("1 MiB run", r"^(over|under)flow_(at_)?1m_"),
    ("1- and 32-byte overflow and underflow", r"^(over|under)flow_|^memcpy_"),
    ("write after free", r"^(uaf|write_after_free)_"),
    ("`malloc(0)`", r"^zero_"),
    ("reuse by the next malloc", r"^reuse_"),
    ("data left after free", r"^(zeroed_after_free|fresh_blocks|freed)_"),
    ("a write at every offset near a block (each in its own process)", r"^every_(offset|slack)_"),
]
TABLE_ORDER = [0, 1, 3, 8, 2, 4, 5, 6, 7]


def matrix(program, preload):
    env = dict(os.environ)
    if preload:
        env["LD_PRELOAD"] = preload
    out = subprocess.run([program, "--matrix"], env=env, capture_output=True, text=True,
                         timeout=1800).stdout
    rows = {}
    for line in out.splitlines():
        parts = line.split(None, 2)
        if len(parts) >= 2 and parts[1] in ("yes", "no", "-") and parts[0] != "case":
            rows[parts[0]] = parts[1]
    return rows


def class_of(name):
    for i, (_, pattern) in enumerate(CLASSES):
        if re.search(pattern, name):
            return i
    raise SystemExit("misuse_tables: case %s is in no class" % name)


def table(build):
    program = os.path.join(build, "tests/misuse/misuse_case_plain")
    allocators = [("glibc", None), ("scudo", SCUDO),
                  ("default", os.path.join(build, "libhakmem.so")),
                  ("hardened", os.path.join(build, "libhakmem-secure.so"))]
    columns = []
    for name, lib in allocators:
        if lib is not None and not os.path.exists(lib):
            continue
        columns.append((name, matrix(program, lib)))
    lines = ["| class of error | " + " | ".join(n for n, _ in columns) + " |",
             "| --- |" + " --- |" * len(columns)]
    totals = [[0, 0] for _ in columns]
    for ci in TABLE_ORDER:
        cells = []
        for k, (_, rows) in enumerate(columns):
            caught = counted = 0
            for case, got in rows.items():
                if class_of(case) != ci or got == "-":
                    continue
                counted += 1
                caught += got == "yes"
            totals[k][0] += caught
            totals[k][1] += counted
            cells.append("%d/%d" % (caught, counted))
        lines.append("| %s | %s |" % (CLASSES[ci][0], " | ".join(cells)))
    lines.append("| **all** | %s |" % " | ".join("**%d/%d**" % tuple(t) for t in totals))
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build/release"))
    ap.add_argument("--write", action="store_true", help="replace the table in docs/misuse.md")
    args = ap.parse_args()
    text = table(args.build)
    if not args.write:
        sys.stdout.write(text)
        return
    path = os.path.join(ROOT, "docs/misuse.md")
    doc = open(path).read()
    if BEGIN not in doc or END not in doc:
        raise SystemExit("misuse_tables: docs/misuse.md has no matrix markers")
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    open(path, "w").write(head + BEGIN + "\n" + text + END + tail)


if __name__ == "__main__":
    main()
