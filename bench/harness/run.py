#!/usr/bin/env python3
"""Runs the hakmem benchmark suite against every allocator found and writes the results.

usage: python3 bench/harness/run.py [--quick|--full] [--hakmem PATH] [--out DIR]
                                    [--only W1,W2] [--allocators A,B] [options]

For each workload and thread count, the allocators run interleaved (A B C D E, A B C D E,
...) for one warm-up round and --rounds counted rounds; then the real programs
(programs.py) the same way, each run's output checked against the program's run with
nothing preloaded; then each fast-path loop runs under callgrind once per allocator, with
and without its iterations, and each real program once per allocator on a shortened
input under cachegrind. Every run goes to results.json and results.csv in --out,
followed by report.md and charts/.

Exit status: 0 when every run of every allocator found was correct; 1 when any run
failed (wrong result or output, crash, timeout), each named on stderr; allocators and
programs that are not installed are skipped with a note and never make the run fail,
nor does a program that fails under valgrind (recorded and reported). Failures that are
known bugs of a comparison allocator (known_issues.py) are reported but do not fail the
run unless --strict.
"""

import argparse
import concurrent.futures
import datetime
import os
import shlex
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import allocators as alloc_mod  # noqa: E402
import bigheap  # noqa: E402
import binaries  # noqa: E402
import known_issues  # noqa: E402
import machine  # noqa: E402
import programs  # noqa: E402
import report  # noqa: E402
import results  # noqa: E402
import runner  # noqa: E402
import workloads  # noqa: E402

DEFAULT_HAKMEM = os.path.join(binaries.REPO_DIR, "build", "release", "libhakmem.so")
TIMEOUTS = {"smoke": 60, "quick": 180, "full": 900}  # seconds, per run
CALLGRIND_TIMEOUT = 600
CALLGRIND_JOBS = 2
PROGRAM_TIMEOUTS = {"smoke": 120, "quick": 120, "full": 600}  # seconds, per run
CACHEGRIND_TIMEOUT = 900
MIN_FULL_PROGRAM_ROUNDS = 6  # BENCH.md: real programs, at least 6 counted rounds
QUICK_PROGRAM_ROUNDS = 3  # quick mode's figures are indicative; it must stay short
# Allocators that cannot run under valgrind, with the reason the report gives.
NO_CALLGRIND = {"scudo": "scudo aborts under valgrind (\"Scudo ERROR: internal map failure\")"}


def parse_args(argv):
    p = argparse.ArgumentParser(description="Run the hakmem benchmark suite.")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", dest="mode", action="store_const", const="quick",
                      help="quick sizes (the default; bench/README.md says how long it takes)")
    mode.add_argument("--full", dest="mode", action="store_const", const="full",
                      help="the sizes to quote (much longer)")
    mode.add_argument("--smoke", dest="mode", action="store_const", const="smoke",
                      help="tiny sizes, for testing the harness (numbers mean nothing)")
    p.set_defaults(mode="quick")
    p.add_argument("--hakmem", default=DEFAULT_HAKMEM, help="libhakmem.so (default: %(default)s)")
    p.add_argument("--out", help="output directory (default: build/bench-results/MODE-TIMESTAMP)")
    p.add_argument("--only", help="comma-separated workload or program names or name prefixes (%s)"
                   % ", ".join(workloads.all_names() + programs.names() + bigheap.names()))
    which = p.add_mutually_exclusive_group()
    which.add_argument("--no-programs", action="store_true", help="leave out the real programs")
    which.add_argument("--programs-only", action="store_true",
                       help="only the real programs (and their cachegrind pass)")
    p.add_argument("--allocators", help="comma-separated subset of %s" % ",".join(
        alloc_mod.ORDER + tuple(bigheap.HUGEPAGE_VARIANTS)))
    p.add_argument("--lib", action="append", default=[], metavar="NAME=PATH",
                   help="use PATH as allocator NAME's library instead of searching for it; "
                        "a NAME that is not one of the known allocators adds an extra one "
                        "(another build of hakmem, say)")
    p.add_argument("--set", action="append", default=[], metavar="NAME:VAR=VALUE",
                   help="run allocator NAME with the environment variable VAR=VALUE, e.g. "
                        "--lib hakmem-nopurge=build/release/libhakmem.so "
                        "--set hakmem-nopurge:HAKMEM_PURGE_DELAY_MS=-1")
    p.add_argument("--bin-dir", help="directory with the bench_* binaries (default: %s; "
                   "compiled by the harness if missing)" % binaries.DEFAULT_BIN_DIR)
    p.add_argument("--rounds", type=int, default=5, help="counted rounds (default 5)")
    p.add_argument("--warmup", type=int, default=1, help="warm-up rounds (default 1)")
    p.add_argument("--program-rounds", type=int,
                   help="counted rounds of the real programs (default: %d in quick mode, --rounds and "
                        "at least %d in full mode)" % (QUICK_PROGRAM_ROUNDS, MIN_FULL_PROGRAM_ROUNDS))
    p.add_argument("--no-callgrind", action="store_true", help="skip the callgrind figure")
    p.add_argument("--no-cachegrind", action="store_true", help="skip the real programs' cachegrind pass")
    p.add_argument("--svg", action="store_true", help="write SVG charts even if matplotlib is there")
    p.add_argument("--strict", action="store_true",
                   help="count known bugs of comparison allocators as failures too")
    p.add_argument("--self-test-corrupt", action="store_true",
                   help="testing only: make the workloads that support it corrupt a block, "
                        "so every such run must be reported as failed")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.warmup < 0 or (args.program_rounds is not None and args.program_rounds < 1):
        p.error("--rounds and --program-rounds must be >= 1 and --warmup >= 0")
    if args.program_rounds is None:
        args.program_rounds = {"full": max(args.rounds, MIN_FULL_PROGRAM_ROUNDS),
                               "quick": min(args.rounds, QUICK_PROGRAM_ROUNDS)}.get(args.mode, args.rounds)
    args.only = [w for w in (args.only or "").split(",") if w] or None
    args.allocators = [a for a in (args.allocators or "").split(",") if a] or None
    overrides = {}
    for item in args.lib:
        name, sep, path = item.partition("=")
        if not sep or name == "glibc" or not alloc_mod.EXTRA_NAME.match(name):
            p.error("--lib wants NAME=PATH with NAME one of %s, or a new lower-case name"
                    % ", ".join(n for n in alloc_mod.ORDER if n != "glibc"))
        overrides[name] = path
    unknown = set(args.allocators or []) - set(alloc_mod.ORDER) - set(overrides) - set(bigheap.HUGEPAGE_VARIANTS)
    if unknown:
        p.error("unknown allocator(s): %s" % ", ".join(sorted(unknown)))
    settings = {}
    for item in args.set:
        name, sep, assignment = item.partition(":")
        var, eq, value = assignment.partition("=")
        if not sep or not eq or not var:
            p.error("--set wants NAME:VAR=VALUE")
        settings.setdefault(name, {})[var] = value
    args.settings = settings
    args.overrides = overrides
    return args


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class Suite:
    """One harness run: its plan, its records, and where they are written."""

    def __init__(self, args, allocs, bin_dir, meta, out_dir):
        self.args, self.allocs, self.bin_dir = args, allocs, bin_dir
        self.meta, self.out_dir = meta, out_dir
        self.helper = os.path.join(bin_dir, workloads.binary_name(programs.HELPER))
        self.records = []
        self.given_up = set()  # (allocator, workload, threads) that failed: not run again

    def save(self):
        results.write_json(os.path.join(self.out_dir, "results.json"), self.meta, self.records)
        results.write_csv(os.path.join(self.out_dir, "results.csv"), self.records)
        results.write_meta(os.path.join(self.out_dir, "meta.json"), self.meta)

    def binary(self, program):
        return os.path.join(self.bin_dir, workloads.binary_name(program))

    def run_timed(self, bench, threads):
        argv = [self.binary(bench.program)] + bench.args(self.args.mode, threads)
        if self.args.self_test_corrupt and bench.supports_corrupt:
            argv.append("--self-test-corrupt")
        total = self.args.warmup + self.args.rounds
        for rnd in range(total):
            for a in self.allocs:
                key = (a.name, bench.name, threads)
                if key in self.given_up:
                    continue
                out = runner.run(argv, a.env(), TIMEOUTS[self.args.mode])
                res = out.result or {}
                rec = results.make_record(
                    kind="timed", allocator=a.name, workload=bench.name, params=" ".join(argv[1:]),
                    threads=threads, round=rnd, warmup=rnd < self.args.warmup,
                    wall_seconds=out.wall_seconds, throughput=res.get("ops_per_sec"),
                    peak_rss_kib=res.get("peak_rss_kib"), minor_faults=res.get("minor_faults"),
                    exit_status=out.exit_status, status=out.status(),
                    message=out.message(), command=runner.command_line(argv, a.preload, a.settings), result=res)
                self.records.append(rec)
                self.progress(rec, rnd, total)
                if rec["status"] != "ok":
                    self.given_up.add(key)
        self.save()

    def run_callgrind(self, loops):
        """Each loop at N and at 0 iterations under every allocator. Instruction counts do
        not depend on the machine's load, so two runs go at a time (one per core)."""
        jobs = []
        for loop in loops:
            for a in self.allocs:
                if a.name in NO_CALLGRIND:
                    continue
                for iterations in (0, loop.iterations[self.args.mode]):
                    argv = runner.callgrind_argv([self.binary(loop.program)] + loop.args(iterations))
                    jobs.append((loop, a, iterations, argv))
        with concurrent.futures.ThreadPoolExecutor(max_workers=CALLGRIND_JOBS) as pool:
            outcomes = pool.map(lambda job: runner.run(job[3], job[1].env(), CALLGRIND_TIMEOUT), jobs)
            for (loop, a, iterations, argv), out in zip(jobs, outcomes):
                self.records.append(self.callgrind_record(loop, a, iterations, argv, out))
        self.save()

    def callgrind_record(self, loop, a, iterations, argv, out):
        total = runner.parse_callgrind_total(out.stderr)
        status, message = out.status(), out.message()
        if status == "ok" and total is None:
            status, message = "failed", "no instruction total in callgrind's output"
        log("  callgrind %-20s %-9s %8d iterations: %s" % (
            loop.name, a.name, iterations, total if status == "ok" else status + ": " + message))
        return results.make_record(
            kind="callgrind", allocator=a.name, workload=loop.name, params=" ".join(argv[4:]),
            threads=1, round=0, warmup=False, wall_seconds=out.wall_seconds, instructions=total,
            iterations=iterations, exit_status=out.exit_status, status=status, message=message,
            command=runner.command_line(argv, a.preload, a.settings), result=out.result or {})

    # ---- real programs ------------------------------------------------------------------

    def program_dir(self, prog, what):
        """An empty scratch directory for one run of prog (the same path every time, so
        that the recorded commands are the same in every round)."""
        path = os.path.join(self.out_dir, "programs", prog.name, what)
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
        return path

    def program_env(self, prog, a):
        """The allocator's environment for prog; a program linked with another malloc gets
        the C library preloaded for its glibc row (programs.find_libc)."""
        env = a.env()
        if a.preload is None and prog.glibc_preloads_libc and programs.find_libc():
            env["LD_PRELOAD"] = programs.find_libc()
        return env

    def reference(self, prog, size, ctx, timeout):
        """The program's output with nothing preloaded, or None (recorded as a failure)."""
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        run = prog.run(ctx, env, timeout, self.helper, self.program_dir(prog, "reference"))
        info = {"size": prog.params(size), "status": run.status(), "command": run.command,
                "wall_seconds": round(run.wall_seconds, 3)}
        if run.status() == "ok":
            info.update(output_sha256=programs.digest(run.output), output_lines=len(run.output.splitlines()),
                        cpu_seconds=(run.rusage["utime_us"] + run.rusage["stime_us"]) / 1e6)
        self.meta.setdefault("program_references", {}).setdefault(prog.name, []).append(info)
        if run.status() != "ok":
            self.records.append(self.program_record("program", prog, size, "none", 0, False, run, None))
            log("  %s: the run with nothing preloaded failed (%s): not measured" % (prog.name, run.message()))
            return None
        return run.output

    def program_record(self, kind, prog, size, alloc_name, rnd, warmup, run, expected):
        status, message = run.status(), run.message()
        if status == "ok" and expected is not None:
            diff = programs.first_difference(expected, run.output)
            if diff:
                status, message = "failed", "wrong output: %s" % diff
        ru = run.rusage or {}
        result = {"output_sha256": programs.digest(run.output), "output_lines": len(run.output.splitlines())}
        result.update((k, v) for k, v in ru.items() if k not in ("utime_us", "stime_us", "maxrss_kib", "minflt"))
        result.update(run.extra)
        rec = results.make_record(
            kind=kind, allocator=alloc_name, workload=prog.name, params=prog.params(size), threads=1, round=rnd,
            warmup=warmup, wall_seconds=run.wall_seconds, exit_status=run.exit_status, status=status,
            message=message, command=run.command, result=result)
        if run.rusage:  # under valgrind: valgrind's CPU time (what the pass costs), no memory figures
            rec.update(cpu_seconds=(ru["utime_us"] + ru["stime_us"]) / 1e6, user_seconds=ru["utime_us"] / 1e6,
                       sys_seconds=ru["stime_us"] / 1e6)
            if kind in ("program", bigheap.KIND):
                rec.update(peak_rss_kib=ru["maxrss_kib"], minor_faults=ru["minflt"])
        if kind == "cachegrind":
            counts = runner.parse_cachegrind_summary(run.stderr)
            if counts:
                rec.update(instructions=counts["Ir"], d1_misses=counts["D1mr"] + counts["D1mw"],
                           ll_misses=counts["ILmr"] + counts["DLmr"] + counts["DLmw"])
                rec["result"].update(counts)
            elif rec["status"] == "ok":
                rec.update(status="failed", message="no cachegrind summary in valgrind's output")
        return rec

    def run_program(self, prog, kind="program", allocs=None):
        """prog under every allocator (or those of allocs), interleaved, as runs of kind."""
        size = prog.sizes[self.args.mode]
        ctx = dict(prog.prepare(size, os.path.join(self.out_dir, "programs", "inputs")), bin_dir=self.bin_dir)
        timeout = PROGRAM_TIMEOUTS[self.args.mode]
        expected = self.reference(prog, size, ctx, timeout)
        if expected is None:
            self.save()
            return
        total = self.args.warmup + self.args.program_rounds
        given_up = set()
        for rnd in range(total):
            for a in allocs or self.allocs:
                if a.name in given_up:
                    continue
                run = prog.run(ctx, self.program_env(prog, a), timeout, self.helper, self.program_dir(prog, "run"))
                rec = self.program_record(kind, prog, size, a.name, rnd, rnd < self.args.warmup, run, expected)
                self.records.append(rec)
                self.program_progress(rec, rnd, total)
                if rec["status"] != "ok":
                    given_up.add(a.name)
        shutil.rmtree(os.path.join(self.out_dir, "programs", prog.name), ignore_errors=True)
        self.save()

    def run_cachegrind(self, progs):
        """Each program once per allocator on its shortened input under cachegrind, two at
        a time. A run that fails there is recorded and reported, never a failure of the
        harness: valgrind cannot run every allocator."""
        jobs = []
        for prog in progs:
            size = programs.cachegrind_size(prog, self.args.mode)
            ctx = prog.prepare(size, os.path.join(self.out_dir, "programs", "inputs"))
            expected = self.reference(prog, size, ctx, PROGRAM_TIMEOUTS[self.args.mode])
            if expected is not None:
                jobs += [(prog, size, ctx, expected, a) for a in self.allocs if a.name not in NO_CALLGRIND]

        def one(job):
            prog, size, ctx, expected, a = job
            run_dir = self.program_dir(prog, "cachegrind-" + a.name)
            run = prog.run(ctx, self.program_env(prog, a), CACHEGRIND_TIMEOUT, self.helper, run_dir,
                           prefix=programs.cachegrind_prefix(prog))
            shutil.rmtree(run_dir, ignore_errors=True)
            return self.program_record("cachegrind", prog, size, a.name, 0, False, run, expected)

        with concurrent.futures.ThreadPoolExecutor(max_workers=CALLGRIND_JOBS) as pool:
            for rec in pool.map(one, jobs):
                self.records.append(rec)
                log("  cachegrind %-8s %-9s %s" % (rec["workload"], rec["allocator"], "%s Ir, %s D1 misses, %s LL misses"
                                                   % (rec["instructions"], rec["d1_misses"], rec["ll_misses"])
                                                   if rec["status"] == "ok" else
                                                   "%s under valgrind (recorded, not counted): %s"
                                                   % (rec["status"], rec["message"])))
        for prog in progs:
            shutil.rmtree(os.path.join(self.out_dir, "programs", prog.name), ignore_errors=True)
        self.save()

    def program_progress(self, rec, rnd, total):
        what = "%s round %d/%d%s %-9s" % (rec["workload"], rnd + 1, total, " (warm-up)" if rec["warmup"] else "",
                                          rec["allocator"])
        if rec["status"] == "ok":
            log("  %s cpu %6.3f s (sys %5.3f) %8.1f MiB %8d minflt %6.2f s%s" % (
                what, rec["cpu_seconds"], rec["sys_seconds"], rec["peak_rss_kib"] / 1024, rec["minor_faults"],
                rec["wall_seconds"], bigheap.progress_note(rec["result"])))
        else:
            log("  %s %s: %s" % (what, rec["status"].upper(), rec["message"]))

    def progress(self, rec, rnd, total):
        what = "%s t=%d round %d/%d%s %-9s" % (rec["workload"], rec["threads"], rnd + 1, total,
                                               " (warm-up)" if rec["warmup"] else "", rec["allocator"])
        if rec["status"] == "ok":
            log("  %s %10.4g ops/s %8.1f MiB %6.2f s" % (what, rec["throughput"] or 0,
                                                         (rec["peak_rss_kib"] or 0) / 1024, rec["wall_seconds"]))
        else:
            log("  %s %s: %s" % (what, rec["status"].upper(), rec["message"]))


def api_notes(records):
    """Notes on the workloads whose runs say which allocation API they used (api= in the
    RESULT line: heap_requests takes the allocator's own heap API where it finds one)."""
    used = {}
    for r in records:
        api = (r.get("result") or {}).get("api")
        if r["kind"] == "timed" and r["status"] == "ok" and api:
            used.setdefault(r["workload"], {})[r["allocator"]] = api
    notes = []
    for workload, by_alloc in used.items():
        apis = set(by_alloc.values())
        if apis == {"malloc"}:
            continue
        own = ["%s: %s" % (a, api) for a, api in by_alloc.items() if api != "malloc"]
        without = [a for a, api in by_alloc.items() if api == "malloc"]
        note = "%s: heap API used by %s" % (workload, ", ".join(own))
        if without:
            note += "; %s: no heap API found with dlsym, so these runs do the same work with " \
                    "malloc and free" % ", ".join(without)
        notes.append(note + ".")
    return notes


def default_out_dir(mode):
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join(binaries.REPO_DIR, "build", "bench-results", "%s-%s" % (mode, stamp))


def main(argv=None):
    cli = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(cli)
    out_dir = os.path.abspath(args.out or default_out_dir(args.mode))
    os.makedirs(out_dir, exist_ok=True)
    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")

    benches, loops = workloads.selected(args.only, args.mode)
    progs = [] if args.no_programs else programs.selected(args.only)
    bigprogs = [] if args.no_programs else bigheap.selected(args.only)
    if args.programs_only:
        benches, loops = [], []
    if args.only and not benches and not loops and not progs and not bigprogs:
        log("no workload matches --only %s; names: %s" % (
            ",".join(args.only), ", ".join(workloads.all_names() + programs.names() + bigheap.names())))
        return 2
    notes, skipped_programs = [], []
    for group in (progs, bigprogs):
        for prog in list(group):
            why = prog.missing()
            if why:
                skipped_programs.append({"name": prog.name, "note": why})
                group.remove(prog)
    if loops and not args.no_callgrind and shutil.which("valgrind") is None:
        notes.append("callgrind figure skipped: valgrind is not installed")
        loops = []
    if args.no_callgrind:
        loops = []
    cachegrind_progs = progs
    if progs and not args.no_cachegrind and shutil.which("valgrind") is None:
        notes.append("real programs' cachegrind pass skipped: valgrind is not installed")
        cachegrind_progs = []
    if args.no_cachegrind:
        cachegrind_progs = []

    binaries_needed = {b.program for b in benches} | {c.program for c in loops} | {"fastpath_loop"}
    if progs or bigprogs:
        binaries_needed.add(programs.HELPER)
    if bigprogs:
        binaries_needed.add(bigheap.POINTER_CHASE)
    bin_dir, bin_note = binaries.ensure(args.bin_dir, os.path.join(out_dir, "bin"), sorted(binaries_needed))
    notes.append(bin_note)

    found, skipped = alloc_mod.discover(args.hakmem, args.overrides, args.allocators, args.settings)
    probe_cmd = [os.path.join(bin_dir, workloads.binary_name("fastpath_loop")), "fixed", "64", "0"]
    allocs = []
    for a in found:
        why = alloc_mod.probe(a, probe_cmd)
        if why is None:
            allocs.append(a)
        else:
            skipped.append(alloc_mod.Skipped(a.name, why))
    big_allocs, big_skipped = bigheap.allocators(allocs, args.allocators) if bigprogs else ([], [])
    skipped += big_skipped
    for s in skipped:
        log("note: skipping %s: %s" % (s.name, s.note))
    for s in skipped_programs:
        log("note: skipping program %s: %s" % (s["name"], s["note"]))
    if not allocs:
        log("no allocator left to run: nothing measured")
        return 0

    meta = {
        "mode": args.mode, "rounds": args.rounds, "warmup": args.warmup,
        "harness_command": shlex.join([sys.executable, os.path.abspath(__file__)] + cli),
        "started": started, "machine": machine.describe(binaries.REPO_DIR),
        "allocators": [{"name": a.name, "preload": a.preload, "version": a.version,
                        "settings": a.settings} for a in allocs]
                      + [{"name": a.name, "preload": a.preload, "version": a.version, "settings": a.settings,
                          "large_heap_only": True} for a in big_allocs if a not in allocs],
        "skipped": [{"name": s.name, "note": s.note} for s in skipped],
        "scale_notes": workloads.scale_notes(args.mode) if benches or loops else [],
        "notes": notes,
        "program_rounds": args.program_rounds,
        "programs": [{"name": p.name, "description": p.description, "package": p.package,
                      "version": programs.package_version(p), "size": p.params(p.sizes[args.mode]),
                      "cachegrind_size": p.params(programs.cachegrind_size(p, args.mode)) if cachegrind_progs else None,
                      "glibc_preloads_libc": p.glibc_preloads_libc} for p in progs],
        "skipped_programs": skipped_programs,
        "bigheap": bigheap.describe(bigprogs, args.mode, big_allocs) if bigprogs else None,
        "cachegrind_options": runner.CACHEGRIND_GEOMETRY if cachegrind_progs else [],
        "phase_seconds": {},
    }
    if loops or cachegrind_progs:
        for a in allocs:
            if a.name in NO_CALLGRIND:
                notes.append("callgrind and cachegrind figures skipped for %s: %s" % (a.name, NO_CALLGRIND[a.name]))
    suite = Suite(args, allocs, bin_dir, meta, out_dir)
    log("hakmem bench, %s mode: %s; results in %s" % (args.mode, ", ".join(a.name for a in allocs), out_dir))

    def phase(name, work):
        started_at = time.monotonic()
        work()
        meta["phase_seconds"][name] = round(time.monotonic() - started_at, 1)

    def timed():
        for bench in benches:
            for threads in bench.threads:
                log("%s, %d thread(s)" % (bench.name, threads))
                suite.run_timed(bench, threads)

    def real_programs():
        for prog in progs:
            log("program %s (%s)" % (prog.name, prog.params(prog.sizes[args.mode])))
            suite.run_program(prog)

    if benches:
        phase("workloads", timed)
    if progs:
        phase("programs", real_programs)
    if bigprogs:
        phase("large-heap programs", lambda: bigheap.run_all(suite, bigprogs, big_allocs, log))
    if loops:
        log("callgrind")
        phase("callgrind", lambda: suite.run_callgrind(loops))
    if cachegrind_progs:
        log("cachegrind (real programs, shortened inputs)")
        phase("cachegrind", lambda: suite.run_cachegrind(cachegrind_progs))
    meta["notes"] += api_notes(suite.records)
    meta["finished"] = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    suite.save()

    report_path = report.generate(os.path.join(out_dir, "results.json"), force_svg=args.svg)
    log("wrote %s, results.json, results.csv" % report_path)

    bad = report.failures(suite.records) if args.strict else report.unexpected_failures(suite.records)
    known = [r for r in report.failures(suite.records) if r not in bad]
    for r in known:
        log("known issue (not counted): %s / %s t=%d: %s" % (r["allocator"], r["workload"], r["threads"], r["message"]))
    if bad:
        log("FAILED runs:")
        for r in bad:
            log("  allocator=%s workload=%s threads=%d round=%d status=%s exit=%s: %s" % (
                r["allocator"], r["workload"], r["threads"], r["round"], r["status"],
                r["exit_status"], r["message"]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
