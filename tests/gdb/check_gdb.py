#!/usr/bin/env python3
"""Runs gdb_target under gdb with tools/gdb/hakmem_gdb.py and checks what its commands say.

1. live: stopped at hakmem_gdb_stop, `hakmem heap` must agree with the stats report the
   program printed just before (per class: live + pending = the report's live, and the
   same slabs) and with the blocks the program holds; `hakmem ptr` must call each of the
   program's pointers live or free, on the right list, with the right class or size;
   `hakmem thread` must show the worker's held-back remote frees.
2. cores: `hakmem gcore` wrote a core, and the kernel wrote one when gdb let SIGABRT
   through; the same commands on each must print the same. Where gdb cannot write a core
   of a trivial process here, or the kernel's cores go to a pipe, that core is skipped
   with the reason, and the rest is still checked.
3. stripped (--lib/--strip): the library without debug info gives the one-line message.
Exit 77 (ctest: skipped) when gdb is missing or may not trace a process here.

usage: check_gdb.py --gdb GDB --script hakmem_gdb.py --target EXE --work DIR
                    [--variant default|secure] [--lib LIBFILE --soname NAME --strip STRIP]
"""
import argparse
import glob
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys

MARK = "@@@ "
SKIP = 77
failures = []


def check(cond, what, section=None):
    if not cond:
        failures.append(what + ("\n--- output:\n" + section if section is not None else ""))


def gdb_env():
    env = dict(os.environ)
    env.pop("DEBUGINFOD_URLS", None)  # no network, no prompt
    return env


def allow_cores():
    """In the child: core dumps as large as the hard limit allows (the kernel's core)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))


def run_gdb(gdb, args, commands, log, cwd=None):
    """Runs gdb in batch mode; returns (whole output, {command: its output})."""
    argv = [gdb, "-batch", "-nx"]
    for c in commands:
        argv += ["-ex", "echo %s%s\\n" % (MARK, c.replace("\\", "\\\\")), "-ex", c]
    argv += args
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=240, env=gdb_env(), cwd=cwd, preexec_fn=allow_cores)
    with open(log, "w") as f:
        f.write(" ".join(shlex.quote(a) for a in argv) + "\n\n" + p.stdout)
    sections, current = {}, None
    for line in p.stdout.splitlines():
        if line.startswith(MARK):
            current = line[len(MARK):]
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    return p.stdout, {k: "\n".join(v) for k, v in sections.items()}


def ptrace_works(gdb, target, work):
    """gdb can start and trace the target (which, without arguments, exits with 2)."""
    out, _ = run_gdb(gdb, [target], ["run"], os.path.join(work, "probe.log"))
    if re.search(r"exited with code 02", out):
        return True, out
    return False, out


def gcore_works(gdb, target, work):
    """gdb writes a core of the target stopped at main: (True, "") or (False, why). gdb 13
    cannot on every CPU (it fails to write some extended register states back)."""
    probe = os.path.join(work, "probe.core")
    out, sec = run_gdb(gdb, [target], ["break main", "run", "gcore " + probe, "kill"],
                       os.path.join(work, "gcore_probe.log"))
    if os.path.exists(probe):
        os.remove(probe)
        return True, ""
    why = [l for l in sec.get("gcore " + probe, "").splitlines() if l.strip()]
    return False, (why[-1] if why else "no core file")


def kernel_core_pattern(work):
    """The name the kernel's core of a process running in WORK starts with, or (None, why)."""
    try:
        with open("/proc/sys/kernel/core_pattern") as f:
            pattern = f.read().strip()
    except OSError as e:
        return None, "cannot read core_pattern (%s)" % e
    if pattern.startswith("|"):
        return None, "the kernel pipes cores to %s" % pattern[1:].split()[0]
    if "/" in pattern or not pattern:
        return None, "core_pattern %r names another directory" % pattern
    if resource.getrlimit(resource.RLIMIT_CORE)[1] == 0:
        return None, "the hard core-size limit is 0"
    return os.path.join(work, pattern.split("%")[0]), ""


# gdb 13 reading a kernel core of a CPU with AMX tiles (or another xstate size than it
# knows): its own note, in either of its two wordings, not hakmem's output.
GDB_XSTATE_WARNING = re.compile(r"^warning: (Unexpected size of section `\.reg-xstate/\d+' in core file|"
                                r"Section `\.reg-xstate/\d+' in core file too small)\.$")


def compare_core(gdb, args, core, name, source, inspect, live, live_out):
    """The commands on CORE print what they printed live, but for the slab map's lines."""
    core_out, in_core = run_gdb(gdb, [args.target, core], [source] + inspect,
                                os.path.join(args.work, name + ".log"))
    no_python_errors(name, core_out)
    for cmd in inspect:
        if not cmd.startswith("hakmem") or cmd == "hakmem thread":
            continue
        a = [l for l in live.get(cmd, "").splitlines() if "slab map:" not in l]
        b = [l for l in in_core.get(cmd, "").splitlines()
             if "slab map:" not in l and not GDB_XSTATE_WARNING.match(l)]
        check(a == b, "%s: `%s` differs from the live process" % (name, cmd),
              "live:\n%s\ncore:\n%s" % ("\n".join(a), "\n".join(b)))
    check(thread_sections(live_out) == thread_sections(core_out),
          "%s: `hakmem thread` differs from the live process" % name, core_out)


def parse_stats(path):
    """{block size: (live blocks, slabs)} from the report's class table."""
    rows = {}
    with open(path) as f:
        for line in f:
            m = re.match(r"\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$", line)
            if m:
                rows[int(m.group(2))] = (int(m.group(3)), int(m.group(4)))
    return rows


def parse_heap_table(text):
    """{block size: (live, slabs, full, pending)} from `hakmem heap`."""
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*(\d*)\s*$", line)
        if m:
            rows[int(m.group(2))] = (int(m.group(3)), int(m.group(4)), int(m.group(5)),
                                     int(m.group(7) or 0))
    return rows


def block_size(text):
    m = re.search(r"block size (\d+)", text)
    return int(m.group(1)) if m else None


def thread_sections(out):
    """The outputs of the two `hakmem thread` commands (thread 1's, then thread 2's)."""
    parts = out.split(MARK + "hakmem thread\n")[1:3]
    return [p.split(MARK)[0] for p in parts] + [""] * (2 - len(parts))


def no_python_errors(name, out):
    for bad in ("Traceback", "Python Exception", "Error occurred in Python"):
        check(bad not in out, "%s: gdb printed a Python error (%s)" % (name, bad), out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gdb", default="gdb")
    ap.add_argument("--script", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--variant", default="default", choices=("default", "secure"))
    ap.add_argument("--lib")
    ap.add_argument("--soname")
    ap.add_argument("--strip")
    args = ap.parse_args()
    secure = args.variant == "secure"

    gdb = shutil.which(args.gdb)
    if gdb is None:
        print("SKIP: gdb not found (%s); install it to test tools/gdb/hakmem_gdb.py" % args.gdb)
        return SKIP
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    ok, out = ptrace_works(gdb, args.target, args.work)
    if not ok:
        print(out)
        if re.search(r"ptrace|not permitted|Couldn't get registers|Could not trace", out, re.I):
            print("SKIP: gdb may not trace a process here (ptrace denied: container without "
                  "CAP_SYS_PTRACE, seccomp or kernel.yama.ptrace_scope=3)")
            return SKIP
        print("FAIL: gdb could not run %s" % args.target)
        return 1

    can_gcore, no_gcore = gcore_works(gdb, args.target, args.work)
    kernel_prefix, no_kernel_core = kernel_core_pattern(args.work)
    skipped = []
    if not can_gcore:
        skipped.append("hakmem gcore: this gdb writes no core of a trivial process here (%s)"
                       % no_gcore)
    if kernel_prefix is None:
        skipped.append("the kernel's core: %s" % no_kernel_core)

    expect_file = os.path.join(args.work, "expect.txt")
    stats_file = os.path.join(args.work, "stats.txt")
    core = os.path.join(args.work, "gdb.core")
    source = "source " + args.script
    inspect = [
        "hakmem heap",
        "hakmem ptr live_small",
        "hakmem ptr (char *)live_small + 5",
        "hakmem ptr freed_first",
        "hakmem ptr freed_last",
        "hakmem ptr mid[0]",
        "hakmem ptr large_block",
        "hakmem ptr freed_large",
        "hakmem ptr huge_block",
        "hakmem ptr remote_first",
        "hakmem ptr remote_last",
        "hakmem ptr &static_int",
        "hakmem thread",
        "thread 2",
        "hakmem thread",
        "thread 1",
    ]
    run_cmd = "run %s%s 2>%s" % (shlex.quote(expect_file), " secure" if secure else "",
                                  shlex.quote(stats_file))
    live_out, live = run_gdb(gdb, [args.target],
                             [source, "break hakmem_gdb_stop", run_cmd] + inspect +
                             ["hakmem gcore " + core, "signal SIGABRT", "kill"],
                             os.path.join(args.work, "live.log"), cwd=args.work)
    no_python_errors("live", live_out)
    if "hit Breakpoint" not in live_out:
        print(live_out)
        print("FAIL: the program did not stop at hakmem_gdb_stop")
        return 1
    expect = {}
    with open(expect_file) as f:
        for line in f:
            k, v = line.split()
            expect[k] = v
    stats = parse_stats(stats_file)
    check(stats, "no class table in the stats report %s" % stats_file)

    # hakmem heap: the report's figures, and the program's own blocks.
    heap = live["hakmem heap"]
    table = parse_heap_table(heap)
    for size, (live_n, slabs) in stats.items():
        got = table.get(size)
        check(got is not None and got[0] + got[3] == live_n and got[1] == slabs,
              "class of %d bytes: stats report %d live in %d slabs, hakmem heap %s" %
              (size, live_n, slabs, got), heap)
    check(set(table) == set(stats), "hakmem heap lists classes %s, the report %s"
          % (sorted(table), sorted(stats)), heap)
    small = block_size(live["hakmem ptr live_small"])
    remote = block_size(live["hakmem ptr remote_first"])
    mid = block_size(live["hakmem ptr mid[0]"])
    for name, size, want in (("small", small, "small_live"), ("remote", remote, "remote_live"),
                             ("mid", mid, "mid_live")):
        got = table.get(size, (None,))[0]
        check(got == int(expect[want]), "%s blocks (%s bytes): the program holds %s, hakmem heap "
              "says %s" % (name, size, expect[want], got), heap)
    check(table.get(mid, (0, 0, 0))[2] >= 1, "no full slab of the %s-byte class" % mid, heap)
    pending = sum(row[3] for row in table.values())
    check(pending > 0, "hakmem heap shows no pending remote frees (the worker holds some)", heap)
    check(re.search(r"\(thread 1, LWP \d+\)", heap) and re.search(r"\(thread 2, LWP \d+\)", heap),
          "hakmem heap does not name both threads' heaps", heap)
    check("abandoned slabs: 0" in heap, "abandoned lists not read", heap)
    check(re.search(r"regions: 1 \(64\.00 MiB mapped\)", heap), "region list not read", heap)
    check("large: 1 live block" in heap, "the large block is not counted", heap)
    check(re.search(r"huge: [\d.]+ MiB mapped \(gstats.huge_mapped\), 1 live block", heap),
          "the huge block is not found", heap)
    if secure:
        check("quarantine (hardened build)" in heap, "no quarantine line", heap)

    # hakmem ptr
    def ptr(expr, *wants):
        text = live["hakmem ptr " + expr]
        for w in wants:
            check(re.search(w, text), "hakmem ptr %s: expected /%s/" % (expr, w), text)

    ptr("live_small", r"region map: region", r"class \d+, block size %d" % small, r"\): live$",
        r"owner 0x[0-9a-f]+: heap 0x[0-9a-f]+ \(thread 1")
    ptr("(char *)live_small + 5", r"byte 5 of it: live")
    # The hardened quarantine releases blocks in random order: the first freed may still wait.
    ptr("freed_first", r"free, (on the slab's local_free list|in the quarantine)" if secure else
        r"free, on the slab's free list")
    ptr("freed_last", r"free, in the quarantine" if secure else r"free, on the slab's free list")
    ptr("mid[0]", r"SLAB_FULL", r": live$")
    large, huge = int(expect["large_size"]), int(expect["huge_size"])
    ptr("large_block", r"OWNER_LARGE", r"large block 0x[0-9a-f]+: live; requested %d bytes" % large)
    ptr("freed_large", r"not live|free unit")
    ptr("huge_block", r"region map: huge", r"huge block 0x[0-9a-f]+: live",
        r"size %d\)" % huge)
    # Where it waits depends on timing: the owner's deferred work may already have
    # collected the remote frees onto its free list; free it must be, whichever.
    ptr("remote_first", r"free, (on the slab's remote list|in the pending remote chain|in the quarantine"
        r"|on the slab's free list)")
    ptr("remote_last", r"free, in the quarantine of heap 0x[0-9a-f]+ \(thread 2" if secure else
        r"free, (in the pending remote chain \d+ of heap 0x[0-9a-f]+ \(thread 2|on the slab's remote list)")
    ptr("&static_int", r"not hakmem's")

    # hakmem thread: main's heap, then the worker's held-back frees.
    main_thread, worker = thread_sections(live_out)
    check(re.search(r"thread 1, LWP \d+: tls_heap = 0x", main_thread), "thread 1's heap", main_thread)
    check(re.search(r"^\s+\d+\s+%d\s+0x[0-9a-f]+\s+\d+" % small, main_thread, re.M),
          "no row for the %d-byte class in thread 1's heap" % small, main_thread)
    chains = [int(n) for n in re.findall(r"chain \d+: (\d+) blocks? ", worker)]
    check(re.search(r"thread 2, LWP \d+: tls_heap = 0x", worker), "thread 2's heap", worker)
    check(chains and sum(chains) == pending, "the worker's pending chains hold %s blocks, "
          "hakmem heap's pending column %d" % (chains, pending), worker)

    # The cores: the same answers, but for the slab map left out of them.
    said = live.get("hakmem gcore " + core, "")
    if os.path.exists(core):
        compare_core(gdb, args, core, "gdb core", source, inspect, live, live_out)
        os.remove(core)  # about 200 MB: a region and a huge mapping
    elif can_gcore:
        check(False, "hakmem gcore wrote no core file", said)
    else:
        lines = [l for l in said.splitlines() if l.strip()]
        check(len(lines) == 1 and lines[0].startswith("hakmem: gcore"),
              "hakmem gcore failed without its one-line reason", said)
    if kernel_prefix is not None:
        cores = [c for c in glob.glob(kernel_prefix + "*") if c != core and
                 not c.endswith(".log") and os.path.isfile(c)]
        check(len(cores) == 1, "the kernel wrote no core at SIGABRT (%s*: %s)"
              % (kernel_prefix, cores), live.get("signal SIGABRT"))
        for c in cores:
            compare_core(gdb, args, c, "kernel core", source, inspect, live, live_out)
            os.remove(c)

    # No process, then a stripped library: one line each.
    out, sec = run_gdb(gdb, [], [source, "hakmem heap"], os.path.join(args.work, "noprocess.log"))
    check(sec["hakmem heap"].strip() == "hakmem: no process or core file: run the program or "
          "load a core first", "without a process", sec["hakmem heap"])
    if args.lib and args.strip and args.soname:
        libdir = os.path.join(args.work, "stripped")
        os.makedirs(libdir)
        lib = os.path.join(libdir, args.soname)
        subprocess.run([args.strip, "-o", lib, args.lib], check=True)
        out, sec = run_gdb(gdb, [args.target],
                           [source, "set environment LD_LIBRARY_PATH=" + libdir,
                            "break hakmem_gdb_stop", run_cmd, "info sharedlibrary", "hakmem heap",
                            "hakmem ptr live_small", "kill"],
                           os.path.join(args.work, "stripped.log"))
        no_python_errors("stripped", out)
        check(libdir in sec.get("info sharedlibrary", ""), "the stripped copy was not loaded", out)
        for cmd in ("hakmem heap", "hakmem ptr live_small"):
            lines = sec.get(cmd, "").strip().splitlines()
            check(len(lines) == 1 and lines[0].startswith("hakmem: libhakmem has no debug info"),
                  "stripped library: `%s`" % cmd, sec.get(cmd))

    if failures:
        for f in failures:
            print("FAIL: " + f + "\n")
        print("(gdb's output: %s/*.log)" % args.work)
        return 1
    print(live["hakmem heap"])
    for why in skipped:
        print("SKIPPED: " + why)
    cores = [n for n, ok in (("gdb core", can_gcore), ("kernel core", kernel_prefix)) if ok]
    print("ok: hakmem heap, ptr, thread and gcore (%s library; live%s%s)"
          % (args.variant, "".join(", " + c for c in cores),
             ", stripped" if args.lib and args.strip else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
