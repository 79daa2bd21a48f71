#!/usr/bin/env python3
"""Runs a checker over a test program and asserts on what it reports.

  memcheck CASE         mc_cases CASE under valgrind's memcheck: an error case must be
                        reported on the line marked "MISTAKE: CASE" in mc_cases.c, and
                        "clean" must get no error and no leak;
  coexist COMBINATION   coexist.c built and run as the combination says (see COMBINATIONS):
                        whose allocator serves malloc and the hak_ functions, that each
                        checker still reports the mistakes it should, and a clear message,
                        never a crash, where the combination cannot work.

usage: run_checkers.py --bin DIR --lib LIBHAKMEM --source DIR memcheck|coexist CASE [--exe NAME]
                       [--preload LIB]
Exit status 0 on success, 1 on failure, 77 when the checker is not installed.
"""
import argparse
import os
import platform
import re
import shutil
import subprocess
import sys

CLEAN_ENV = {k: v for k, v in os.environ.items()
             if not k.startswith(("HAKMEM_", "ASAN_", "TSAN_", "UBSAN_", "LD_PRELOAD", "VALGRIND_"))}
failures = []


def fail(msg, out=None):
    failures.append(msg)
    print("FAIL:", msg)
    if out is not None:
        print("---- output ----\n" + out[-6000:] + "\n----------------")


def marker_line(source, case):
    with open(source) as f:
        for n, line in enumerate(f, 1):
            if "MISTAKE: %s */" % case in line:
                return n
    raise SystemExit("no MISTAKE: %s marker in %s" % (case, source))


def run(argv, env=None, preload=None, timeout=300):
    e = dict(CLEAN_ENV, **(env or {}))
    if preload:
        e["LD_PRELOAD"] = preload
    p = subprocess.run(argv, capture_output=True, text=True, env=e, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def valgrind(argv, preload=None):
    # --child-silent-after-fork keeps the report to the program itself.
    return run(["valgrind", "--tool=memcheck", "--leak-check=full", "--show-leak-kinds=definite,indirect,possible",
                "--errors-for-leak-kinds=definite,indirect,possible", "--num-callers=20"] + argv,
               preload=preload)


def no_aslr(argv):
    """ThreadSanitizer's fixed shadow layout does not fit every kernel's randomisation."""
    arch = platform.machine()
    if subprocess.run(["setarch", arch, "-R", "true"], capture_output=True).returncode == 0:
        return ["setarch", arch, "-R"] + argv
    return argv


def error_block(out, headline, start=0):
    """The lines of the first report starting with `headline`, up to the blank line."""
    lines = out.splitlines()
    for i in range(start, len(lines)):
        if headline in lines[i]:
            block = [lines[i]]
            for line in lines[i + 1:]:
                if re.match(r"^==\d+==\s*$", line) or line.strip() == "":
                    break
                block.append(line)
            return "\n".join(block)
    return None


def expect_at(out, headline, source_name, line, what):
    block = error_block(out, headline)
    if block is None:
        fail("%s: no \"%s\" report" % (what, headline), out)
    elif "%s:%d" % (source_name, line) not in block:
        fail("%s: \"%s\" reported, but not at %s:%d" % (what, headline, source_name, line), out)


def error_count(out):
    m = re.search(r"ERROR SUMMARY: (\d+) errors", out)
    return int(m.group(1)) if m else None


# ---- memcheck ------------------------------------------------------------------------
MEMCHECK = {
    "leak": ("definitely lost", "100 bytes in 1 blocks are definitely lost"),
    "overflow": ("Invalid write of size 1", "0 bytes after a block of size 40 alloc'd"),
    "use_after_free": ("Invalid read of size 1", "inside a block of size 64 free'd"),
    "uninitialised": ("Conditional jump or move depends on uninitialised value", None),
    "double_free": ("Invalid free()", "inside a block of size 32 free'd"),
}


def memcheck(args):
    exe = os.path.join(args.bin, args.exe or "mc_cases")
    source = os.path.join(args.source, "mc_cases.c")
    rc, out = valgrind([exe, args.case], preload=args.preload)
    if "mc_cases: done" not in out:
        fail("%s %s did not finish (status %d)" % (exe, args.case, rc), out)
    if "hakmem: under valgrind's memcheck" not in out:
        fail("no start-up line saying that memcheck sees the hak_ blocks", out)
    if args.case == "clean":
        if error_count(out) != 0 or re.search(r"(definitely|indirectly|possibly) lost: [1-9]", out):
            fail("memcheck reported errors or leaks in a clean program", out)
        return
    headline, detail = MEMCHECK[args.case]
    line = marker_line(source, args.case)
    if args.case == "leak":
        block = error_block(out, detail)
        if block is None or "mc_cases.c:%d" % line not in block:
            fail("leak: no \"%s\" report at mc_cases.c:%d" % (detail, line), out)
        return
    expect_at(out, headline, "mc_cases.c", line, args.case)
    if detail and detail not in out:
        fail("%s: memcheck does not say \"%s\"" % (args.case, detail), out)


# ---- coexistence ---------------------------------------------------------------------
def coexist(args):
    source = os.path.join(args.source, "coexist.c")
    exe = lambda name: os.path.join(args.bin, name)  # noqa: E731
    lib = args.lib
    c = args.case

    def expect(out, *texts):
        for t in texts:
            if t not in out:
                fail("%s: no \"%s\"" % (c, t), out)

    def expect_no_signal(rc, out):
        if rc < 0 or rc >= 128:
            fail("%s: the program died of a signal (status %d)" % (c, rc), out)

    if c.startswith("valgrind_"):
        prog, preload = (exe("coexist_plain"), lib) if c == "valgrind_preload" else (exe("coexist_linked"), None)
        rc, out = valgrind([prog, "clean"], preload=preload)
        expect(out, "coexist: done", "malloc: not hakmem", "hak_malloc: hakmem", "checker.memcheck=1",
               "hakmem: under valgrind's memcheck")
        if error_count(out) != 0:
            fail("%s: memcheck reported errors in a clean program" % c, out)
        for case in ("malloc_overflow", "hak_overflow"):
            rc, out = valgrind([prog, case], preload=preload)
            expect_at(out, "Invalid write of size 1", "coexist.c", marker_line(source, case), c + " " + case)
    elif c == "asan_preload":
        rc, out = run([exe("coexist_asan"), "clean"], preload=lib)
        expect_no_signal(rc, out)
        if rc == 0:
            fail("asan_preload: the program ran with hakmem's malloc before ASan's", out)
        expect(out, "ASan runtime does not come first")
        rc, out = run([exe("coexist_asan"), "clean"], preload=lib, env={"ASAN_OPTIONS": "verify_asan_link_order=0"})
        expect_no_signal(rc, out)
        if rc != 1:
            fail("asan_preload, link order not verified: status %d, not 1" % rc, out)
        expect(out, "hakmem: AddressSanitizer is loaded, but hakmem's malloc comes before its own")
    elif c == "asan_linked":
        rc, out = run([exe("coexist_asan_linked"), "clean"])
        if rc != 0:
            fail("asan_linked: clean program exited with %d" % rc, out)
        expect(out, "coexist: done", "malloc: not hakmem", "hak_malloc: not hakmem", "checker.sanitizer=1",
               "hakmem: AddressSanitizer is loaded: its allocator serves malloc and the hak_ functions")
        for case in ("malloc_overflow", "hak_overflow"):
            rc, out = run([exe("coexist_asan_linked"), case])
            expect_at(out, "ERROR: AddressSanitizer: heap-buffer-overflow", "coexist.c",
                      marker_line(source, case), c + " " + case)
    elif c == "tsan_preload":
        rc, out = run(no_aslr([exe("coexist_tsan"), "clean"]), preload=lib)
        expect_no_signal(rc, out)
        if rc != 1:
            fail("tsan_preload: status %d, not 1" % rc, out)
        expect(out, "hakmem: ThreadSanitizer is loaded, but hakmem's malloc comes before its own")
    elif c == "tsan_linked":
        rc, out = run(no_aslr([exe("coexist_tsan_linked"), "clean"]), env={"TSAN_OPTIONS": "halt_on_error=1"})
        if rc != 0 or "WARNING: ThreadSanitizer" in out:
            fail("tsan_linked: a report or status %d for a program without races" % rc, out)
        expect(out, "coexist: done", "malloc: not hakmem", "hak_malloc: not hakmem", "checker.sanitizer=1",
               "hakmem: ThreadSanitizer is loaded: its allocator serves malloc and the hak_ functions")
        rc, out = run(no_aslr([exe("coexist_tsan_linked"), "race"]))
        expect_at(out, "WARNING: ThreadSanitizer: data race", "coexist.c", marker_line(source, "race"), "tsan race")
    elif c in ("ubsan_preload", "ubsan_linked"):
        prog, preload = (exe("coexist_ubsan"), lib) if c == "ubsan_preload" else (exe("coexist_ubsan_linked"), None)
        rc, out = run([prog, "clean"], preload=preload)
        if rc != 0:
            fail("%s: clean program exited with %d" % (c, rc), out)
        expect(out, "coexist: done", "malloc: hakmem", "hak_malloc: hakmem", "checker.sanitizer=0")
        rc, out = run([prog, "undefined"], preload=preload)
        expect(out, "coexist.c:%d" % marker_line(source, "undefined"), "runtime error: signed integer overflow",
               "malloc: hakmem", "coexist: done")
    else:
        raise SystemExit("unknown combination " + c)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--exe")
    ap.add_argument("--preload")
    ap.add_argument("what", choices=["memcheck", "coexist"])
    ap.add_argument("case")
    args = ap.parse_args()
    if (args.what == "memcheck" or args.case.startswith("valgrind")) and shutil.which("valgrind") is None:
        print("valgrind is not installed: skipped")
        return 77
    (memcheck if args.what == "memcheck" else coexist)(args)
    print("%s %s: %s" % (args.what, args.case, "FAILED" if failures else "ok"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
