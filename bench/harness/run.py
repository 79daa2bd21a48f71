#!/usr/bin/env python3
"""Runs the hakmem benchmark suite against every allocator found and writes the results.

usage: python3 bench/harness/run.py [--quick|--full] [--hakmem PATH] [--out DIR]
                                    [--only W1,W2] [--allocators A,B] [options]

For each workload and thread count, the allocators run interleaved (A B C D E, A B C D E,
...) for one warm-up round and --rounds counted rounds; then each fast-path loop runs
under callgrind once per allocator, with and without its iterations. Every run goes to
results.json and results.csv in --out, followed by report.md and charts/.

Exit status: 0 when every run of every allocator found was correct; 1 when any run
failed (wrong result, crash, timeout), each named on stderr; allocators that are not
installed are skipped with a note and never make the run fail. Failures that are known
bugs of a comparison allocator (known_issues.py) are reported but do not fail the run
unless --strict.
"""

import argparse
import concurrent.futures
import datetime
import os
import shlex
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import allocators as alloc_mod  # noqa: E402
import binaries  # noqa: E402
import known_issues  # noqa: E402
import machine  # noqa: E402
import report  # noqa: E402
import results  # noqa: E402
import runner  # noqa: E402
import workloads  # noqa: E402

DEFAULT_HAKMEM = os.path.join(binaries.REPO_DIR, "build", "release", "libhakmem.so")
TIMEOUTS = {"smoke": 60, "quick": 180, "full": 900}  # seconds, per run
CALLGRIND_TIMEOUT = 600
CALLGRIND_JOBS = 2
# Allocators that cannot run under valgrind, with the reason the report gives.
NO_CALLGRIND = {"scudo": "scudo aborts under valgrind (\"Scudo ERROR: internal map failure\")"}


def parse_args(argv):
    p = argparse.ArgumentParser(description="Run the hakmem benchmark suite.")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", dest="mode", action="store_const", const="quick",
                      help="about 5 minutes for 5 allocators (default)")
    mode.add_argument("--full", dest="mode", action="store_const", const="full",
                      help="the sizes to quote (much longer)")
    mode.add_argument("--smoke", dest="mode", action="store_const", const="smoke",
                      help="tiny sizes, for testing the harness (numbers mean nothing)")
    p.set_defaults(mode="quick")
    p.add_argument("--hakmem", default=DEFAULT_HAKMEM, help="libhakmem.so (default: %(default)s)")
    p.add_argument("--out", help="output directory (default: build/bench-results/MODE-TIMESTAMP)")
    p.add_argument("--only", help="comma-separated workload names or name prefixes (%s)"
                   % ", ".join(workloads.all_names()))
    p.add_argument("--allocators", help="comma-separated subset of %s" % ",".join(alloc_mod.ORDER))
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
    p.add_argument("--no-callgrind", action="store_true", help="skip the callgrind figure")
    p.add_argument("--svg", action="store_true", help="write SVG charts even if matplotlib is there")
    p.add_argument("--strict", action="store_true",
                   help="count known bugs of comparison allocators as failures too")
    p.add_argument("--self-test-corrupt", action="store_true",
                   help="testing only: make the workloads that support it corrupt a block, "
                        "so every such run must be reported as failed")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.warmup < 0:
        p.error("--rounds must be >= 1 and --warmup >= 0")
    args.only = [w for w in (args.only or "").split(",") if w] or None
    args.allocators = [a for a in (args.allocators or "").split(",") if a] or None
    overrides = {}
    for item in args.lib:
        name, sep, path = item.partition("=")
        if not sep or name == "glibc" or not alloc_mod.EXTRA_NAME.match(name):
            p.error("--lib wants NAME=PATH with NAME one of %s, or a new lower-case name"
                    % ", ".join(n for n in alloc_mod.ORDER if n != "glibc"))
        overrides[name] = path
    unknown = set(args.allocators or []) - set(alloc_mod.ORDER) - set(overrides)
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
        self.records = []
        self.given_up = set()  # (allocator, workload, threads) that failed: not run again

    def save(self):
        results.write_json(os.path.join(self.out_dir, "results.json"), self.meta, self.records)
        results.write_csv(os.path.join(self.out_dir, "results.csv"), self.records)

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
                    peak_rss_kib=res.get("peak_rss_kib"), exit_status=out.exit_status, status=out.status(),
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

    def progress(self, rec, rnd, total):
        what = "%s t=%d round %d/%d%s %-9s" % (rec["workload"], rec["threads"], rnd + 1, total,
                                               " (warm-up)" if rec["warmup"] else "", rec["allocator"])
        if rec["status"] == "ok":
            log("  %s %10.4g ops/s %8.1f MiB %6.2f s" % (what, rec["throughput"] or 0,
                                                         (rec["peak_rss_kib"] or 0) / 1024, rec["wall_seconds"]))
        else:
            log("  %s %s: %s" % (what, rec["status"].upper(), rec["message"]))


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
    if args.only and not benches and not loops:
        log("no workload matches --only %s; names: %s" % (",".join(args.only), ", ".join(workloads.all_names())))
        return 2
    notes = []
    if loops and not args.no_callgrind and shutil.which("valgrind") is None:
        notes.append("callgrind figure skipped: valgrind is not installed")
        loops = []
    if args.no_callgrind:
        loops = []

    programs = sorted({b.program for b in benches} | {c.program for c in loops} | {"fastpath_loop"})
    bin_dir, bin_note = binaries.ensure(args.bin_dir, os.path.join(out_dir, "bin"), programs)
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
    for s in skipped:
        log("note: skipping %s: %s" % (s.name, s.note))
    if not allocs:
        log("no allocator left to run: nothing measured")
        return 0

    meta = {
        "mode": args.mode, "rounds": args.rounds, "warmup": args.warmup,
        "harness_command": shlex.join([sys.executable, os.path.abspath(__file__)] + cli),
        "started": started, "machine": machine.describe(binaries.REPO_DIR),
        "allocators": [{"name": a.name, "preload": a.preload, "version": a.version,
                        "settings": a.settings} for a in allocs],
        "skipped": [{"name": s.name, "note": s.note} for s in skipped],
        "scale_notes": workloads.scale_notes(args.mode),
        "notes": notes,
    }
    if loops:
        for a in allocs:
            if a.name in NO_CALLGRIND:
                notes.append("callgrind figure skipped for %s: %s" % (a.name, NO_CALLGRIND[a.name]))
    suite = Suite(args, allocs, bin_dir, meta, out_dir)
    log("hakmem bench, %s mode: %s; results in %s" % (args.mode, ", ".join(a.name for a in allocs), out_dir))
    for bench in benches:
        for threads in bench.threads:
            log("%s, %d thread(s)" % (bench.name, threads))
            suite.run_timed(bench, threads)
    if loops:
        log("callgrind")
        suite.run_callgrind(loops)
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
