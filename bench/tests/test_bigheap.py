"""The large-heap programs: sampling smaps_rollup, the huge-page variants of the anchors,
issue 46's targets judged per anchor, the report's section and its summary screen, and
the programs themselves (their outputs agree across allocators and interpreters)."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

import support
import allocators
import bigheap
import bigheap_report
import report
import results
import summary

ROLLUP = """\
55d0c0000000-7ffd1e3f2000 ---p 00000000 00:00 0                          [rollup]
Rss:              204800 kB
Pss:              204000 kB
Anonymous:        200704 kB
AnonHugePages:    163840 kB
Swap:                  0 kB
"""


def big_run(alloc, prog, rnd, cpu, rss, anon=None, huge=None, warmup=False, status="ok", thp=1):
    result = {}
    if anon is not None:
        result = {"anon_peak_kib": anon, "anon_huge_at_peak_kib": huge, "anon_huge_max_kib": huge,
                  "smaps_samples": 10, "thp_enabled": thp}
    return results.make_record(kind="bigheap", allocator=alloc, workload=prog, params="keys=1", threads=1, round=rnd,
                               warmup=warmup, wall_seconds=cpu, cpu_seconds=cpu, user_seconds=cpu, sys_seconds=0.0,
                               peak_rss_kib=rss, minor_faults=1, exit_status=0 if status == "ok" else 1,
                               status=status, message=None if status == "ok" else "wrong output: line 1",
                               command="%s %s" % (alloc, prog), result=result)


# CPU seconds per round: hakmem 0.8 against glibc's 1.0 (0.80x), mimalloc 0.9 (0.89x), ...
CPU = {"hakmem": 0.8, "hakmem-nothp": 1.0, "glibc": 1.0, "glibc-hp": 0.85, "mimalloc": 0.9, "mimalloc-hp": 0.8,
       "jemalloc": 1.0, "jemalloc-hp": 0.9, "tcmalloc": 1.0}


def records(progs=("big_a", "big_b"), rounds=3):
    recs = []
    for prog in progs:
        for rnd in range(rounds + 1):
            for alloc, cpu in CPU.items():
                # hakmem: 90% coverage, RSS 2% over hakmem-nothp's
                rss = 1020 if alloc == "hakmem" else 1000
                recs.append(big_run(alloc, prog, rnd, cpu * (1 + rnd / 10), rss, 1000, 900 if alloc == "hakmem" else 0,
                                    warmup=rnd == 0))
    return recs


class SmapsTest(unittest.TestCase):
    def test_parse_rollup_and_coverage(self):
        got = bigheap.parse_smaps_rollup(ROLLUP)
        self.assertEqual(got, {"rss_kib": 204800, "anon_kib": 200704, "anon_huge_kib": 163840})
        self.assertIsNone(bigheap.parse_smaps_rollup("Rss: 1 kB\nAnonymous: 1 kB\n"))
        self.assertAlmostEqual(bigheap.coverage({"anon_peak_kib": 1000, "anon_huge_at_peak_kib": 800}), 0.8)
        self.assertIsNone(bigheap.coverage({}))
        self.assertIsNone(bigheap.coverage({"anon_peak_kib": 0, "anon_huge_at_peak_kib": 0}))

    def _holder(self, disable_thp):
        """A shell whose child python holds 48 MiB (written) until its stdin closes; with
        disable_thp it first calls prctl(PR_SET_THP_DISABLE), as Redis does in THP `always`."""
        code = textwrap.dedent("""\
            import ctypes, sys
            if %r:
                ctypes.CDLL(None, use_errno=True).prctl(41, 1, 0, 0, 0)
            block = bytearray(48 << 20)
            for i in range(0, len(block), 4096):
                block[i] = 1
            print("ready", flush=True)
            sys.stdin.read()
            """ % disable_thp)
        # "; true" keeps the shell from exec'ing python: the sampler must look below the root
        return subprocess.Popen(["sh", "-c", '"$0" -c "$1"; true', sys.executable, code],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def test_sampler_finds_the_descendant_and_its_peak(self):
        for disable in (False, True):
            proc = self._holder(disable)
            try:
                self.assertEqual(proc.stdout.readline().strip(), "ready")
                sampler = bigheap.PeakSampler(proc.pid, start=False)
                sampler.sample_once()
                figures = sampler.stop()
            finally:
                proc.stdin.close()
                proc.wait(60)
                proc.stdout.close()
            self.assertGreaterEqual(figures["anon_peak_kib"], 48 << 10)
            self.assertLessEqual(figures["anon_huge_at_peak_kib"], figures["anon_peak_kib"])
            self.assertEqual(figures["thp_enabled"], 0 if disable else 1)
            if disable:
                self.assertEqual(figures["anon_huge_max_kib"], 0)

    def test_sampler_of_a_process_without_children_has_no_figures(self):
        proc = subprocess.Popen(["sleep", "5"])
        try:
            sampler = bigheap.PeakSampler(proc.pid, start=False)
            sampler.sample_once()
            self.assertEqual(sampler.stop(), {})
        finally:
            proc.kill()
            proc.wait()


class VariantsTest(unittest.TestCase):
    def test_each_variant_follows_its_allocator_with_its_settings(self):
        found = [allocators.Allocator("hakmem", "/lib/h.so", settings={"X": "1"}), allocators.Allocator("glibc", None),
                 allocators.Allocator("jemalloc", "/lib/j.so")]
        got, skipped = bigheap.allocators(found)
        self.assertEqual([a.name for a in got], ["hakmem", "hakmem-nothp", "glibc", "glibc-hp", "jemalloc",
                                                 "jemalloc-hp"])
        self.assertEqual(got[1].settings, {"X": "1", "HAKMEM_THP": "0"})
        self.assertEqual(got[1].preload, "/lib/h.so")
        self.assertIsNone(got[3].preload)
        self.assertEqual(got[3].env({})["GLIBC_TUNABLES"], "glibc.malloc.hugetlb=1")
        self.assertEqual(got[5].env({})["MALLOC_CONF"], "thp:always")
        self.assertEqual([s.name for s in skipped], ["mimalloc-hp"])  # mimalloc was not found
        got, skipped = bigheap.allocators(found, wanted=["hakmem", "glibc", "glibc-hp"])
        self.assertEqual([a.name for a in got], ["hakmem", "glibc", "glibc-hp", "jemalloc"])
        self.assertEqual(skipped, [])

    def test_variant_names_are_accepted_on_the_command_line(self):
        import run
        args = run.parse_args(["--allocators", "hakmem,mimalloc,mimalloc-hp,hakmem-nothp"])
        self.assertIn("mimalloc-hp", args.allocators)
        self.assertEqual([p.name for p in bigheap.selected(["big_"])], bigheap.names())
        self.assertEqual([p.name for p in bigheap.selected(["big_redis"])], ["big_redis"])

    def test_every_program_has_every_size(self):
        for p in bigheap.PROGRAMS:
            for scale in ("smoke", "quick", "full"):
                self.assertIn(scale, p.sizes, p.name)
        full = {p.name: p.sizes["full"] for p in bigheap.PROGRAMS}
        self.assertGreaterEqual(full["big_redis"]["keys"], 2000000)
        self.assertGreaterEqual(full["big_sqlite"]["rows"], 2000000)
        for name in ("big_python", "big_perl", "big_lua"):
            self.assertGreaterEqual(full[name]["keys"], 2000000)
        self.assertGreaterEqual(full["big_chase"]["blocks"] * full["big_chase"]["size"], 200 << 20)


class TargetsTest(unittest.TestCase):
    def judged(self, recs):
        groups = bigheap_report.group(recs)
        return {t: (m, v) for t, m, v in bigheap_report.judge(groups, bigheap_report.allocator_order({}, groups))}

    def test_each_anchor_judged_in_turn_with_rounds_won(self):
        got = self.judged(records())
        # per-round ratios are exact: the rounds scale every allocator alike
        self.assertEqual(got["CPU geometric mean <= 0.85x glibc (each anchor at its defaults)"],
                         ("0.80 (rounds won 6 of 6)", "met"))
        self.assertEqual(got["CPU geometric mean <= 0.85x mimalloc (each anchor at its defaults)"],
                         ("0.89 (rounds won 6 of 6)", "missed"))
        self.assertEqual(got["CPU geometric mean <= 0.95x glibc-hp (each anchor with its huge-page setting)"][1], "met")
        self.assertEqual(got["CPU geometric mean <= 0.95x mimalloc-hp (each anchor with its huge-page setting)"],
                         ("1.00 (rounds won 0 of 6)", "missed"))
        self.assertEqual(got["no program above 1.00x any default anchor"][1], "met")
        self.assertEqual(got["big_a: huge-page coverage at the peak >= 80%"], ("90%", "met"))
        self.assertEqual(got["big_b: peak RSS <= 1.03x hakmem-nothp"], ("1.02 (0 of 3 rounds below)", "met"))

    def test_a_slow_row_coverage_and_rss_miss(self):
        recs = [r for r in records() if not (r["allocator"] == "hakmem" and r["workload"] == "big_b")]
        recs += [big_run("hakmem", "big_b", rnd, 1.2, 1100, 1000, 100, warmup=rnd == 0) for rnd in range(4)]
        got = self.judged(recs)
        self.assertEqual(got["no program above 1.00x any default anchor"][1], "missed")
        self.assertIn("big_b against mimalloc", got["no program above 1.00x any default anchor"][0])
        self.assertEqual(got["big_b: huge-page coverage at the peak >= 80%"], ("10%", "missed"))
        self.assertEqual(got["big_b: peak RSS <= 1.03x hakmem-nothp"][1], "missed")
        behind = bigheap_report.behind(bigheap_report.group(recs), list(CPU))
        self.assertEqual(behind[0][1:], ("big_b", "mimalloc-hp"))

    def test_anchor_that_did_not_run_is_not_measured(self):
        recs = [r for r in records() if r["allocator"] not in ("jemalloc-hp", "hakmem-nothp")]
        got = self.judged(recs)
        self.assertEqual(got["CPU geometric mean <= 0.95x jemalloc-hp (each anchor with its huge-page setting)"],
                         ("jemalloc-hp did not run", "not measured"))
        self.assertEqual(got["peak RSS <= 1.03x hakmem-nothp"][1], "not measured")


class ReportTest(unittest.TestCase):
    def meta(self):
        allocs = [{"name": a, "preload": None, "version": "", "settings": {}} for a in
                  ("hakmem", "glibc", "mimalloc", "jemalloc", "tcmalloc")]
        allocs += [{"name": a, "preload": None, "version": "", "settings": {}, "large_heap_only": True}
                   for a in ("hakmem-nothp", "glibc-hp", "mimalloc-hp", "jemalloc-hp")]
        return {"mode": "quick", "allocators": allocs, "program_rounds": 3, "warmup": 1,
                "bigheap": {"allocators": list(CPU), "thp": {"enabled": "madvise", "defrag": "madvise"},
                            "programs": [], "sample_seconds": 0.1}}

    def test_summary_opens_the_report_and_variants_stay_in_their_section(self):
        recs = records() + [big_run("mimalloc", "big_c", 1, 1.0, 1000, status="failed")]
        recs += [big_run(a, "big_c", 1, c, 1000, 1000, 0) for a, c in CPU.items() if a != "mimalloc"]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "results.json")
            results.write_json(path, self.meta(), recs)
            report.generate(path, force_svg=True)
            with open(os.path.join(d, "report.md")) as f:
                text = f.read()
            charts = sorted(os.listdir(os.path.join(d, "charts")))
        sections = [l for l in text.splitlines() if l.startswith("## ")]
        self.assertEqual(sections[0], "## Summary")
        self.assertIn("## Large-heap programs", sections)
        self.assertIn("| large-heap CPU time | 0.80 | 0.89 |", text)
        self.assertIn("mimalloc-hp", text.split("## Large-heap programs")[0])  # a summary column
        self.assertIn("**Large-heap programs** (issue 46's targets)", text)
        # big_c's mimalloc run failed: its bars are missing, and the summary says why
        self.assertIn("no bar for mimalloc in big_c (failed: wrong output: line 1)", text)
        self.assertEqual(charts, ["bigheap_coverage.svg", "bigheap_cpu_vs_glibc.svg", "bigheap_peak_rss_vs_glibc.svg"])
        # the synthetic sections' allocator list leaves the large-heap-only ones out
        self.assertEqual(report.allocator_order(self.meta(), recs), ["hakmem", "glibc", "mimalloc", "jemalloc",
                                                                     "tcmalloc"])

    def test_missing_bars_notes(self):
        specs = [{"name": "c", "title": "T", "groups": ["w t=1", "w t=2"],
                  "series": [{"label": "hakmem", "values": [1.0, None]}, {"label": "scudo", "values": [None, None]},
                             {"label": "glibc", "values": [1.0, 1.0]}]}]
        fail = results.make_record(kind="timed", allocator="hakmem", workload="w", threads=2, round=1, status="crashed",
                                   message="killed by signal 11 (SIGSEGV)")
        notes = summary.missing_bars(specs, [fail])
        self.assertEqual(notes, ["- `c` (T): no bar for hakmem in w t=2 (crashed: killed by signal 11 (SIGSEGV)); "
                                 "no bars at all for scudo (not measured on these rows)."])
        specs[0]["series"] = specs[0]["series"][2:]
        self.assertEqual(summary.missing_bars(specs, []), [])
        # a ratio chart whose baseline failed in a row has no bar there at all: one note
        specs = [{"name": "throughput_vs_mimalloc", "title": "T", "groups": ["a t=1", "b t=1"],
                  "series": [{"label": "hakmem", "values": [None, 1.0]}, {"label": "glibc", "values": [None, 1.0]}]}]
        base = results.make_record(kind="timed", allocator="mimalloc", workload="a", threads=1, round=1,
                                   status="failed", message="FAIL workload=a: not aligned")
        self.assertEqual(summary.missing_bars(specs, [base]),
                         ["- `throughput_vs_mimalloc` (T): no bar for any allocator in a t=1 (the baseline mimalloc: "
                          "failed: FAIL workload=a: not aligned)."])

    def test_round_trip_through_csv_keeps_the_coverage(self):
        recs = records(("big_a",), 1)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "results.csv")
            results.write_csv(path, recs)
            back = results.read_csv(path)
        self.assertEqual(bigheap.coverage(back[0]["result"]), 0.9)
        self.assertEqual(back[0]["kind"], "bigheap")


class ProgramsTest(unittest.TestCase):
    def test_pointer_chase_same_output_under_two_allocators_and_bad_arguments(self):
        binary = os.path.join(support.bin_dir(), "bench_pointer_chase")
        outs = set()
        lib, _ = allocators.find_library("mimalloc")
        for preload in [None] + ([lib] if lib else []):
            env = dict(os.environ, LD_PRELOAD=preload) if preload else dict(os.environ)
            out = subprocess.run([binary, "5000", "48", "12345", "3"], capture_output=True, text=True, env=env,
                                 timeout=60)
            self.assertEqual(out.returncode, 0, out.stderr)
            outs.add(out.stdout)
        self.assertEqual(len(outs), 1)
        self.assertIn("visits checked", outs.pop())
        self.assertEqual(subprocess.run([binary, "1"], capture_output=True, timeout=60).returncode, 2)

    def test_the_three_interpreters_print_the_same_lines(self):
        argv = {"python": ["/usr/bin/python3", "-S", "bighash.py"], "perl": ["perl", "bighash.pl"],
                "lua": ["lua5.4", "bighash.lua"]}
        outs = {}
        for name, cmd in argv.items():
            if shutil.which(cmd[0]) is None:
                continue
            cmd = cmd[:-1] + [os.path.join(support.BENCH_DIR, "programs", cmd[-1]), "3000", "5000", "2"]
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=dict(os.environ, **bigheap.PY_ENV))
            self.assertEqual(out.returncode, 0, out.stderr)
            outs[name] = out.stdout
        self.assertGreaterEqual(len(outs), 1)
        self.assertEqual(len(set(outs.values())), 1, outs)
        self.assertIn("keys=3000 lookups=5000", next(iter(outs.values())))

    @unittest.skipUnless(shutil.which("sqlite3"), "sqlite3 is not installed")
    def test_sqlite_every_lookup_hits(self):
        out = subprocess.run(["sqlite3", "-batch", ":memory:"], input=bigheap.sqlite_lookup_script(1000, 2500),
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.splitlines()[-1].split("|")[0], "2500")

    def test_harness_runs_the_rows_with_the_variants(self):
        with tempfile.TemporaryDirectory() as out:
            proc = support.run_harness("--only", "big_chase,big_lua", "--allocators", "glibc,glibc-hp",
                                       "--rounds", "1", "--out", out)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            with open(os.path.join(out, "results.json")) as f:
                data = json.load(f)
            with open(os.path.join(out, "report.md")) as f:
                text = f.read()
        runs = [r for r in data["runs"] if r["kind"] == "bigheap"]
        self.assertEqual({r["allocator"] for r in runs}, {"glibc", "glibc-hp"})
        self.assertTrue(all(r["status"] == "ok" for r in runs))
        self.assertEqual(data["meta"]["bigheap"]["allocators"], ["glibc", "glibc-hp"])
        self.assertIn("GLIBC_TUNABLES=glibc.malloc.hugetlb=1", text)
        self.assertTrue(text.startswith("# hakmem benchmark report\n\n## Summary"))


if __name__ == "__main__":
    unittest.main()
