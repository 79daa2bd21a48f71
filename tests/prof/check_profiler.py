#!/usr/bin/env python3
"""Checks the heap profiler end to end: runs prof_sites (or python3) with HAKMEM_PROF set,
reads the profiles it wrote with the real pprof (-raw: exact values and function names)
and compares them with what the program is known to allocate.

Exact mode (HAKMEM_PROF_RATE=1) must match to the byte. Sampled mode: a site allocating
B bytes at rate R gets about B/R samples, so its estimate has a relative standard error
of about sqrt(R/B); the test allows 5 of those. Exit 77 (skip) when pprof is missing.
"""
import argparse
import glob
import math
import os
import re
import shutil
import subprocess
import sys

SKIP = 77
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)


def find_pprof():
    for p in (shutil.which("pprof"), os.path.expanduser("~/go/bin/pprof"),
              os.path.join(os.environ.get("GOPATH", ""), "bin/pprof")):
        if p and os.path.exists(p):
            return p
    return None


def raw(pprof, path):
    """{leaf function: [alloc_objects, alloc_space, inuse_objects, inuse_space]}, the
    stacks [(values, [functions, leaf first])] and the period."""
    out = subprocess.run([pprof, "-raw", path], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit("pprof -raw %s failed: %s" % (path, out.stderr))
    samples, names, period, section, last = [], {}, None, None, None
    for line in out.stdout.splitlines():
        if line.startswith("Period:"):
            period = int(line.split()[1])
        if line in ("Samples:", "Locations", "Mappings"):
            section = line
            continue
        if section == "Samples:":
            m = re.match(r"^\s+([\d\s]+):([\d\s]+)$", line)
            if m:
                samples.append(([int(v) for v in m.group(1).split()], [int(v) for v in m.group(2).split()]))
        elif section == "Locations":
            m = re.match(r"^\s+(\d+): 0x[0-9a-f]+ M=\d+ (\S+)", line)
            if m:
                last = int(m.group(1))
                names[last] = m.group(2)
    stacks = [(v, [names.get(i, "?") for i in locs]) for v, locs in samples]
    by_leaf = {}
    for v, fns in stacks:
        acc = by_leaf.setdefault(fns[0] if fns else "?", [0, 0, 0, 0])
        for k in range(4):
            acc[k] += v[k]
    return by_leaf, stacks, period


def run(args, argv, env_extra, prefix):
    env = dict(os.environ, HAKMEM_PROF="1", HAKMEM_PROF_PREFIX=prefix)
    env.update(env_extra)
    for f in glob.glob(prefix + ".*"):
        os.unlink(f)
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240)
    return out


def files(prefix, what=""):
    pat = prefix + ".[0-9]*" + ("." + what if what else "") + ".heap"
    found = sorted(glob.glob(pat))
    if not what:
        found = [f for f in found if re.match(r".*\.\d+\.heap$", f)]
    return found


def exact_sites(args, pprof, prefix, n):
    out = run(args, [args.sites, "sites", str(n)], {"HAKMEM_PROF_RATE": "1"}, prefix)
    check(out.returncode == 0, "prof_sites sites failed: %s" % out.stderr)
    fs = files(prefix)
    check(len(fs) == 1, "one exit profile expected, found %s" % fs)
    return raw(pprof, fs[0]) if fs else ({}, [], None)


def cmd_exact(args, pprof, prefix):
    n = 1000
    leaf, _, period = exact_sites(args, pprof, prefix, n)
    check(period == 1, "period %s, expected 1" % period)
    expect = {"site_small": [n, 1000 * n, 0, 0], "site_big": [n, 4000 * n, 0, 0],
              "site_leak": [64, 64 * 3000, 64, 64 * 3000], "site_large": [8, 8 << 18, 0, 0],
              "site_calloc": [n, 2000 * n, 0, 0]}
    for fn, v in expect.items():
        check(leaf.get(fn) == v, "%s: %s, expected %s" % (fn, leaf.get(fn), v))
    check(leaf["site_big"][1] == 4 * leaf["site_small"][1], "site_big must be 4x site_small")


def cmd_sampled(args, pprof, prefix):
    n, rate = 20000, 32768
    out = run(args, [args.sites, "sites", str(n)], {"HAKMEM_PROF_RATE": str(rate)}, prefix)
    check(out.returncode == 0, "prof_sites failed: %s" % out.stderr)
    fs = files(prefix)
    check(len(fs) == 1, "one exit profile expected, found %s" % fs)
    leaf, _, period = raw(pprof, fs[0])
    check(period == rate, "period %s, expected %d" % (period, rate))
    for fn, size in (("site_small", 1000), ("site_big", 4000), ("site_calloc", 2000)):
        true = size * n
        err = 5 * math.sqrt(rate / true)  # 5 standard errors
        got = leaf.get(fn, [0, 0, 0, 0])
        print("%s: estimated %d bytes, true %d (allowed +-%.0f%%)" % (fn, got[1], true, 100 * err))
        check(abs(got[1] - true) <= err * true, "%s estimate %d too far from %d" % (fn, got[1], true))
        check(got[3] == 0, "%s: freed blocks still live: %s" % (fn, got))
    ratio = leaf["site_big"][1] / max(1, leaf["site_small"][1])
    check(3.0 <= ratio <= 5.3, "site_big/site_small %.2f, expected about 4" % ratio)


def cmd_threads(args, pprof, prefix):
    out = run(args, [args.sites, "threads"], {"HAKMEM_PROF_RATE": "1"}, prefix)
    check(out.returncode == 0, "threads failed: %s" % out.stderr)
    fs = files(prefix)
    check(len(fs) == 1, "one exit profile expected, found %s" % fs)
    leaf, _, _ = raw(pprof, fs[0])
    check(leaf.get("site_small") == [8000, 8000000, 0, 0], "site_small %s" % leaf.get("site_small"))
    check(leaf.get("site_big") == [8000, 32000000, 0, 0], "site_big %s" % leaf.get("site_big"))
    check(leaf.get("site_leak") == [64, 192000, 64, 192000], "site_leak %s" % leaf.get("site_leak"))


def cmd_fork(args, pprof, prefix):
    out = run(args, [args.sites, "fork", "100"], {"HAKMEM_PROF_RATE": "1"}, prefix)
    check(out.returncode == 0, "fork failed: %s" % out.stderr)
    m = re.search(r"child (\d+)", out.stdout)
    check(m is not None, "no child pid printed")
    if not m:
        return
    child = "%s.%s.heap" % (prefix, m.group(1))
    fs = files(prefix)
    check(child in fs and len(fs) == 2, "parent and child profiles expected, found %s" % fs)
    cleaf, _, _ = raw(pprof, child)
    check(cleaf.get("site_child") == [32, 160000, 32, 160000], "child site_child %s" % cleaf.get("site_child"))
    check(cleaf.get("site_leak") == [64, 192000, 64, 192000], "child inherits site_leak: %s" % cleaf.get("site_leak"))
    parent = [f for f in fs if f != child]
    if parent:
        pleaf, _, _ = raw(pprof, parent[0])
        check("site_child" not in pleaf, "the parent's profile holds the child's site")


def cmd_dump(args, pprof, prefix):
    path = prefix + ".ondemand.pb.gz"
    out = run(args, [args.sites, "dump", path], {"HAKMEM_PROF_RATE": "1"}, prefix)
    check("dump 0" in out.stdout, "hak_prof_dump failed: %s %s" % (out.stdout, out.stderr))
    m = re.search(r"table_bytes (\d+)", out.stdout)
    check(m and int(m.group(1)) > 0, "table bytes not reported: %s" % out.stdout)
    leaf, _, _ = raw(pprof, path)
    check(leaf.get("site_leak") == [64, 192000, 64, 192000], "dump: site_leak %s" % leaf.get("site_leak"))
    out = run(args, [args.sites, "dump", "/dev/full"], {"HAKMEM_PROF_RATE": "1"}, prefix)
    check("dump 28" in out.stdout, "a full disk must give ENOSPC (28): %s" % out.stdout)
    out = run(args, [args.sites, "dump", "/nonexistent/dir/x"], {"HAKMEM_PROF_RATE": "1"}, prefix)
    check("dump 2" in out.stdout and out.returncode == 0, "a missing directory: %s" % out.stdout)


def cmd_peak(args, pprof, prefix):
    out = run(args, [args.sites, "peak"], {"HAKMEM_PROF_RATE": "1", "HAKMEM_PROF_PEAK_STEP": str(16 << 20)}, prefix)
    check(out.returncode == 0, "peak failed: %s" % out.stderr)
    peaks = files(prefix, "peak")
    check(len(peaks) == 1, "one peak profile expected, found %s" % peaks)
    if peaks:
        leaf, _, _ = raw(pprof, peaks[0])
        live = leaf.get("site_peak", [0] * 4)[3]
        check(live >= 32 << 20, "peak profile: site_peak live %d, expected >= 32 MiB" % live)
    fs = files(prefix)
    if fs:
        leaf, _, _ = raw(pprof, fs[0])
        check(leaf.get("site_peak", [0] * 4)[3] == 0, "exit profile: site_peak still live")


def cmd_leaks(args, pprof, prefix):
    out = run(args, [args.sites, "sites", "10"], {"HAKMEM_PROF_RATE": "1", "HAKMEM_PROF_LEAKS": "1"}, prefix)
    sys.stdout.write(out.stderr)
    check(re.search(r"leak report: 192000 bytes in 64 blocks", out.stderr), "leak report total")
    check(re.search(r"leak 1: 192000 bytes in 64 blocks allocated at\n    #0 site_leak\+0x[0-9a-f]+ \(", out.stderr),
          "leak 1 must name site_leak")
    check("run_sites+0x" in out.stderr, "leak report must name the caller run_sites (.symtab)")


def cmd_bad_prefix(args, pprof, prefix):
    out = run(args, [args.sites, "peak"], {"HAKMEM_PROF_PREFIX": "/nonexistent/dir/p",
                                            "HAKMEM_PROF_PEAK_STEP": str(4 << 20)}, prefix)
    sys.stdout.write(out.stderr)
    check(out.returncode == 0, "the program must go on")
    lines = [l for l in out.stderr.splitlines() if "hakmem" in l]
    check(len(lines) == 1 and "cannot write heap profile /nonexistent/dir/p." in lines[0],
          "exactly one clear line expected: %s" % lines)


def cmd_bad_rate(args, pprof, prefix):
    out = run(args, [args.sites, "sites", "10"], {"HAKMEM_PROF_RATE": "lots"}, prefix)
    check("ignoring HAKMEM_PROF_RATE=lots" in out.stderr, "invalid rate not reported: %s" % out.stderr)
    fs = files(prefix)
    check(len(fs) == 1, "profile expected")
    if fs:
        _, _, period = raw(pprof, fs[0])
        check(period == 512 * 1024, "default rate expected, period %s" % period)


PY_SCRIPT = """
d = {}
for i in range(400000):
    d[i] = i
print(len(d))
"""


def debug_file(binary):
    """The detached debug file of binary (Debian's -dbg/-dbgsym packages), or None."""
    out = subprocess.run(["readelf", "-n", binary], capture_output=True, text=True)
    m = re.search(r"Build ID: ([0-9a-f]+)", out.stdout)
    if not m:
        return None
    path = "/usr/lib/debug/.build-id/%s/%s.debug" % (m.group(1)[:2], m.group(1)[2:])
    return path if os.path.exists(path) else None


ALLOC_FN = r"^_?Py\w*(Alloc|Malloc|New|FromStringAndSize|Wcsdup|Realloc)"


def cmd_python(args, pprof, prefix):
    py = "/usr/bin/python3"
    if not os.path.exists(py):
        print("no", py)
        sys.exit(SKIP)
    real = os.path.realpath(py)
    dbg = debug_file(real)
    env = {"HAKMEM_PROF_RATE": "1", "HAKMEM_PROF_LEAKS": "1", "LD_PRELOAD": os.path.abspath(args.lib)}
    out = run(args, [py, "-c", PY_SCRIPT], env, prefix)
    check(out.returncode == 0 and out.stdout.strip() == "400000", "python3 failed: %s" % out.stderr)
    fs = files(prefix)
    check(len(fs) == 1, "one profile expected, found %s" % fs)
    if not fs:
        return
    _, stacks, _ = raw(pprof, fs[0])
    stacks.sort(key=lambda s: -s[0][1])
    top = stacks[0][1]
    print("top stack by alloc_space:", stacks[0][0], " <- ".join(top[:8]))
    check("_PyEval_EvalFrameDefault" in top or "_PyEval_EvalFrame" in top,
          "the top stack does not reach the interpreter loop")
    if dbg is None:
        # Stripped and without its debug file (python3.X-dbg), the interpreter's static
        # functions (dictresize, _PyMem_RawMalloc) have no name: the heaviest stack whose
        # allocating function has one must name one of the interpreter's allocators.
        print("no debug file for %s: install python3-dbg for the full check" % real)
        named = [s for s in stacks if s[1] and s[1][0] != "?"]
        check(named, "no stack has a named allocating function")
        if named:
            print("top named stack:", named[0][0], " <- ".join(named[0][1][:6]))
            check(re.match(ALLOC_FN, named[0][1][0]),
                  "the top named stack's allocating function is not the interpreter's: %s" % named[0][1])
        return
    # With the debug file, pprof names every frame: the dict's growth allocates the most.
    print("debug file:", dbg)
    check(re.match(ALLOC_FN, top[0]), "the top stack's allocating function is not the interpreter's: %s" % top[:4])
    check(any(f in top for f in ("dictresize", "insertion_resize", "new_keys_object")),
          "the top stack does not name the dict's resize: %s" % top[:8])
    # The leak report reads the same debug file: the interpreter's frames all have names.
    frames = [l for l in out.stderr.splitlines()
              if l.startswith("    #") and ("(%s)" % py in l or "(%s)" % real in l)]
    check(frames, "the leak report has no frame in the interpreter: %s" % out.stderr[-400:])
    check(all("??" not in l for l in frames), "the leak report has unnamed interpreter frames: %s" %
          [l for l in frames if "??" in l][:3])


def cmd_double_free(args, pprof, prefix):
    out = run(args, [args.sites, "double_free"], {"HAKMEM_PROF_RATE": "1"}, prefix)
    check(out.returncode != 0 and "double free" in out.stderr,
          "a sampled block freed twice: %d %s" % (out.returncode, out.stderr))


def run_tool(args, pprof, argv, out_dir, env=None):
    tool = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "hakmem-prof")
    shutil.rmtree(out_dir, ignore_errors=True)
    if env is None:
        env = dict(os.environ, PATH=os.environ.get("PATH", "") + ":" + os.path.dirname(pprof))
    out = subprocess.run([sys.executable, tool, "-o", out_dir, "--lib", args.lib, "--rate", "1",
                          "--peak-step", "1000000", "--"] + argv,
                         env=env, capture_output=True, text=True, timeout=240)
    sys.stdout.write("$ hakmem-prof %s -> %d\n%s%s" % (" ".join(argv), out.returncode, out.stdout, out.stderr))
    check("Traceback" not in out.stderr, "hakmem-prof %s: a traceback" % argv)
    return out


def tool_lines(out):
    return [l for l in (out.stdout + out.stderr).splitlines() if l.startswith("hakmem-prof:")]


def cmd_tool(args, pprof, prefix):
    """tools/hakmem-prof: the pictures of a non-empty profile, none (and a line saying so)
    for an empty one, the top-20 table, one line for each failure, the program's status."""
    drawing = shutil.which("dot") or any(
        os.path.exists(p) for p in (shutil.which("inferno-flamegraph") or "",
                                    os.path.expanduser("~/.cargo/bin/inferno-flamegraph")))
    flame = "flame graph"
    # 1. peak: a peak profile holding site_peak, an exit profile with nothing live.
    out_dir = prefix + "-peak"
    out = run_tool(args, pprof, [args.sites, "peak"], out_dir)
    check(out.returncode == 0, "hakmem-prof peak: status %d" % out.returncode)
    with open(os.path.join(out_dir, "top.txt")) as f:
        top = f.read()
    check("== peak" in top and "== exit" in top, "top.txt lacks the peak or the exit table")
    check("site_peak" in top, "top.txt does not name site_peak")
    check(any("exit: nothing live" in l for l in tool_lines(out)), "no line says the exit profile is empty")
    check(not os.path.exists(os.path.join(out_dir, "exit.svg")), "a picture of an empty exit profile")
    if drawing:
        check(os.path.exists(os.path.join(out_dir, "peak.svg")), "no peak picture")
        if flame in out.stdout and os.path.exists(os.path.join(out_dir, "peak.svg")):
            with open(os.path.join(out_dir, "peak.svg")) as f:
                check("site_peak" in f.read(), "the peak flame graph does not show site_peak")
    else:
        print("no drawing tool here: the pictures are not checked")
    # 2. sites: the exit profile holds the leaked blocks, so it must be drawn.
    out_dir = prefix + "-leak"
    out = run_tool(args, pprof, [args.sites, "sites", "10"], out_dir)
    check(out.returncode == 0, "hakmem-prof sites: status %d" % out.returncode)
    if drawing:
        svg = os.path.join(out_dir, "exit.svg")
        check(os.path.exists(svg), "no picture of a non-empty exit profile")
        if flame in out.stdout and os.path.exists(svg):
            with open(svg) as f:
                check("site_leak" in f.read(), "the exit flame graph does not show site_leak")
    # 3. no drawing tool at all: one line that says so (not "nothing live"), status 1.
    bare = prefix + "-bin"
    shutil.rmtree(bare, ignore_errors=True)
    os.makedirs(bare)
    os.symlink(pprof, os.path.join(bare, "pprof"))
    env = dict(os.environ, PATH=bare, HOME=bare)
    out = run_tool(args, pprof, [args.sites, "sites", "10"], prefix + "-bare", env)
    lines = [l for l in tool_lines(out) if "no drawing tool" in l]
    check(out.returncode == 1 and len(lines) == 1, "without a drawing tool: status %d, lines %s" %
          (out.returncode, lines))
    # 4. the program's exit status is passed on, also when it exits early.
    out = run_tool(args, pprof, ["/bin/sh", "-c", "exit 3"], prefix + "-status")
    check(out.returncode == 3, "sh -c 'exit 3': status %d, expected 3" % out.returncode)
    # 5. a program that does not exist: one line, status 2.
    out = run_tool(args, pprof, [prefix + "-no-such-program"], prefix + "-missing")
    lines = tool_lines(out)
    check(out.returncode == 2 and len(lines) == 1 and "program not found" in lines[0],
          "a missing program: status %d, lines %s" % (out.returncode, lines))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sites", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("check")
    args = ap.parse_args()
    pprof = find_pprof()
    if pprof is None:
        print("pprof not installed: go install github.com/google/pprof@latest")
        sys.exit(SKIP)
    os.makedirs(args.dir, exist_ok=True)
    prefix = os.path.join(args.dir, args.check)
    globals()["cmd_" + args.check](args, pprof, prefix)
    if failures:
        sys.exit(1)
    print("ok:", args.check)


if __name__ == "__main__":
    main()
