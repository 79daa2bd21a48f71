"""The real programs: parsing what the helper and cachegrind print, per-round ratios, the
report's section, the generated inputs, and the harness catching a wrong output."""

import csv
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest
from dataclasses import dataclass

import support
import allocators
import program_inputs
import programs
import programs_report
import report
import results
import run
import runner
import stats


def prog_run(alloc, prog, rnd, cpu, rss, faults, warmup=False, status="ok", sys_seconds=0.1):
    return results.make_record(kind="program", allocator=alloc, workload=prog, params="steps=1", threads=1,
                               round=rnd, warmup=warmup, wall_seconds=cpu, cpu_seconds=cpu,
                               user_seconds=cpu - sys_seconds, sys_seconds=sys_seconds, peak_rss_kib=rss,
                               minor_faults=faults, exit_status=0 if status == "ok" else 1, status=status,
                               message=None if status == "ok" else "wrong output: line 1",
                               command="%s %s" % (alloc, prog))


def cg_run(alloc, prog, ir, d1, ll, status="ok"):
    return results.make_record(kind="cachegrind", allocator=alloc, workload=prog, params="steps=1", threads=1,
                               round=0, warmup=False, wall_seconds=1.0, instructions=ir if status == "ok" else None,
                               d1_misses=d1 if status == "ok" else None, ll_misses=ll if status == "ok" else None,
                               exit_status=0 if status == "ok" else -11, status=status,
                               message=None if status == "ok" else "killed by signal 11",
                               command="valgrind %s %s" % (alloc, prog))


CACHEGRIND_STDERR = """\
==101== Cachegrind, a cache and branch-prediction profiler
--101-- warning: L3 cache found, using its data for the LL simulation.
==101== I   refs:      1,000,000
==101== I1  misses:        1,000
==101== LLi misses:          500
==101== I1  miss rate:      0.10%
==101== LLi miss rate:      0.05%
==101==
==101== D   refs:        400,000  (300,000 rd   + 100,000 wr)
==101== D1  misses:       10,000  (  8,000 rd   +   2,000 wr)
==101== LLd misses:        3,000  (  2,500 rd   +     500 wr)
==101== D1  miss rate:       2.5% (    2.7%     +     2.0%  )
==101== LLd miss rate:       0.8% (    0.8%     +     0.5%  )
==101==
==101== LL refs:          11,000  (  9,000 rd   +   2,000 wr)
==101== LL misses:         3,500  (  3,000 rd   +     500 wr)
==102== I   refs:         20,000
==102== I1  misses:           10
==102== LLi misses:            5
==102== D   refs:          8,000  (  6,000 rd   +   2,000 wr)
==102== D1  misses:          100  (     80 rd   +      20 wr)
==102== LLd misses:           30  (     25 rd   +       5 wr)
==103== I   refs:          7,777
"""


class ParseTest(unittest.TestCase):
    def test_helper_line(self):
        ru = programs.parse_rusage("utime_us=1500 stime_us=500 maxrss_kib=2048 minflt=77 majflt=0 exit=0\n")
        self.assertEqual(ru["utime_us"] + ru["stime_us"], 2000)
        self.assertEqual(ru["maxrss_kib"], 2048)
        self.assertEqual(ru["minflt"], 77)

    def test_helper_line_incomplete_or_garbled(self):
        self.assertIsNone(programs.parse_rusage("utime_us=1 stime_us=2 maxrss_kib=3 exit=0"))  # no minflt
        self.assertIsNone(programs.parse_rusage("utime_us=x stime_us=2 maxrss_kib=3 minflt=1 exit=0"))
        self.assertIsNone(programs.parse_rusage(""))

    def test_cachegrind_summary_sums_complete_processes(self):
        counts = runner.parse_cachegrind_summary(CACHEGRIND_STDERR)
        # pid 103 printed only its I refs (killed, say): left out
        self.assertEqual(counts["processes"], 2)
        self.assertEqual(counts["Ir"], 1020000)
        self.assertEqual(counts["I1mr"], 1010)
        self.assertEqual(counts["ILmr"], 505)
        self.assertEqual((counts["Dr"], counts["Dw"]), (306000, 102000))
        self.assertEqual((counts["D1mr"], counts["D1mw"]), (8080, 2020))
        self.assertEqual((counts["DLmr"], counts["DLmw"]), (2525, 505))

    def test_cachegrind_summary_missing(self):
        self.assertIsNone(runner.parse_cachegrind_summary("==1== Events    : Ir\n==1== Collected : 5\n"))
        self.assertIsNone(runner.parse_cachegrind_summary("==7== I   refs:      7,777\n"))

    def test_first_difference(self):
        self.assertIsNone(programs.first_difference("a\nb\n", "a\nb\n"))
        self.assertIn("line 2", programs.first_difference("a\nb\n", "a\nc\n"))
        self.assertIn("3 lines, expected 2", programs.first_difference("a\nb\n", "a\nb\nc\n"))
        self.assertIsNotNone(programs.first_difference("a\n", "a"))


class RoundRatioTest(unittest.TestCase):
    def test_paired_ratios_only_rounds_with_both(self):
        self.assertEqual(stats.paired_ratios({1: 2.0, 2: 3.0, 3: 4.0}, {1: 1.0, 3: 8.0, 4: 1.0}), [2.0, 0.5])
        self.assertEqual(stats.paired_ratios({1: 2.0}, {1: 0.0}), [])

    def test_per_round_ratios_then_median_not_ratio_of_medians(self):
        # Medians are 20 and 20 (ratio 1.0), but hakmem was half glibc's time in two of
        # the three rounds: per-round ratios 0.5, 2.0, 0.5 -> median 0.5.
        recs = []
        for rnd, (mine, theirs) in enumerate([(10.0, 20.0), (20.0, 10.0), (30.0, 60.0)], 1):
            recs += [prog_run("hakmem", "lua", rnd, mine, 1000, 10), prog_run("glibc", "lua", rnd, theirs, 1000, 10)]
        groups = programs_report.group(recs)
        table = programs_report.ratio_table(groups, ["hakmem", "glibc"], "glibc", programs_report.CPU)
        self.assertEqual(table["lua"]["hakmem"], 0.5)
        self.assertEqual(table["lua"]["glibc"], 1.0)

    def test_group_leaves_out_warmup_failed_and_reference_runs(self):
        recs = [prog_run("hakmem", "perl", 0, 99.0, 1, 1, warmup=True), prog_run("hakmem", "perl", 1, 1.0, 1, 1),
                prog_run("hakmem", "perl", 2, 5.0, 1, 1, status="failed"), prog_run("none", "perl", 0, 1.0, 1, 1,
                                                                                    status="failed")]
        groups = programs_report.group(recs)
        self.assertEqual(list(groups["perl"]), ["hakmem"])
        self.assertEqual([r["round"] for r in groups["perl"]["hakmem"]], [1])

    def test_against_anchors_takes_the_one_hakmem_compares_worst_with(self):
        recs = []
        for rnd in range(1, 4):
            recs += [prog_run("hakmem", "git", rnd, 1.0, 1000, 100), prog_run("glibc", "git", rnd, 1.25, 500, 100),
                     prog_run("mimalloc", "git", rnd, [0.9, 1.1, 0.8][rnd - 1], 2000, 100),
                     prog_run("hakmem-secure", "git", rnd, 0.1, 10, 1)]
        by_alloc = programs_report.group(recs)["git"]
        ratio, anchor, at, n = programs_report.against_anchors(by_alloc, programs_report.CPU)
        self.assertEqual(anchor, "mimalloc")  # ratios 1/0.9, 1/1.1, 1/0.8 -> median 1.11
        self.assertAlmostEqual(ratio, 1 / 0.9)
        self.assertEqual((at, n), (1, 3))
        ratio, anchor, at, n = programs_report.against_anchors(by_alloc, programs_report.RSS)
        self.assertEqual((ratio, anchor, at, n), (2.0, "glibc", 0, 3))
        self.assertIsNone(programs_report.against_anchors({"hakmem": by_alloc["hakmem"]}, programs_report.CPU))

    def test_cachegrind_ratios_skip_failed_runs(self):
        table = programs_report.cachegrind_runs([cg_run("glibc", "lua", 100, 10, 4), cg_run("hakmem", "lua", 80, 5, 4),
                                                 cg_run("tcmalloc", "lua", 0, 0, 0, status="crashed")])
        ratios = programs_report.cachegrind_ratios(table, "glibc", "instructions")
        self.assertEqual(ratios["lua"], {"glibc": 1.0, "hakmem": 0.8, "tcmalloc": None})


class ReportTest(unittest.TestCase):
    def records(self):
        recs = []
        for rnd in range(3):
            for prog, base in (("lua", 1.0), ("redis", 2.0)):
                recs += [prog_run("hakmem", prog, rnd, base * 0.9, 1000, 100, warmup=rnd == 0),
                         prog_run("glibc", prog, rnd, base, 1200, 150, warmup=rnd == 0),
                         prog_run("mimalloc", prog, rnd, base * 0.8, 1500, 120, warmup=rnd == 0)]
        recs += [cg_run("hakmem", "lua", 900, 90, 9), cg_run("glibc", "lua", 1000, 100, 10),
                 cg_run("mimalloc", "lua", 0, 0, 0, status="crashed")]
        return recs

    def test_section_tables_and_geometric_means(self):
        meta = {"allocators": [{"name": "hakmem"}, {"name": "glibc"}, {"name": "mimalloc"}], "warmup": 1,
                "program_rounds": 2, "programs": [{"name": "redis", "description": "d", "size": "keys=1",
                                                   "package": "redis-server", "glibc_preloads_libc": True}]}
        text = report.render(meta, self.records(), [])
        for needle in ("## Real programs", "### CPU time (s, user + system)", "CPU time relative to mimalloc",
                       "Peak RSS relative to glibc", "Minor page faults relative to glibc",
                       "hakmem against the anchors", "Cachegrind", "#### I refs", "preloads libc.so.6"):
            self.assertIn(needle, text)
        self.assertIn("| lua | 0.90 | 1.00 | 0.80 |", text)  # CPU relative to glibc
        self.assertIn("| **geometric mean** | **0.90** | **1.00** | **0.80** |", text)
        self.assertIn("| lua | 1.12 (mimalloc) | 0 of 2 | 0.83 (glibc) | 2 of 2 | 0.83 (mimalloc) | 2 of 2 |", text)
        self.assertIn("| lua | 0.90 / 0.90 / 0.90 | 1.00 / 1.00 / 1.00 | n/a / n/a / n/a |", text)
        # the crash under valgrind is listed but is not a failure of the run
        self.assertIn("Under valgrind", text)
        self.assertEqual(report.failures(self.records()), [])
        self.assertEqual(len(report.valgrind_failures(self.records())), 1)

    def test_charts_from_the_results_file(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "results.json")
            results.write_json(path, {"allocators": [{"name": "hakmem"}, {"name": "glibc"}, {"name": "mimalloc"}]},
                               self.records())
            report.generate(path, force_svg=True)
            names = set(os.listdir(os.path.join(d, "charts")))
        for name in ("programs_cpu_vs_mimalloc.svg", "programs_cpu_vs_glibc.svg", "programs_peak_rss_vs_glibc.svg",
                     "programs_minor_faults_vs_glibc.svg", "programs_cachegrind_instructions_vs_glibc.svg"):
            self.assertIn(name, names)


class ResultsCompatibilityTest(unittest.TestCase):
    def test_program_record_round_trip_and_old_csv(self):
        with tempfile.TemporaryDirectory() as d:
            rec = prog_run("hakmem", "lua", 1, 0.25, 4096, 321)
            rec["result"] = {"output_sha256": "ab12", "output_lines": 4}
            path = os.path.join(d, "r.csv")
            results.write_csv(path, [rec])
            self.assertEqual(results.load(path)[1], [rec])
            # a file written before the program fields existed reads back with them empty
            old_fields = results.FIELDS[:results.FIELDS.index("cpu_seconds")]
            old = os.path.join(d, "old.csv")
            with open(old, "w", newline="") as f:
                writer = csv.writer(f)
                writer.writerow(old_fields)
                writer.writerow([results._csv_cell(n, rec[n]) for n in old_fields])
            back = results.load(old)[1][0]
            self.assertEqual(back["cpu_seconds"], None)
            self.assertEqual(back["minor_faults"], None)
            self.assertEqual(back["peak_rss_kib"], 4096)
            self.assertEqual(back["result"], rec["result"])
            with self.assertRaises(KeyError):
                results.complete({"colour": "red"})


class InputsTest(unittest.TestCase):
    def test_same_seed_same_bytes(self):
        self.assertEqual(program_inputs.sql_script(300, 1), program_inputs.sql_script(300, 1))
        self.assertNotEqual(program_inputs.sql_script(300, 1), program_inputs.sql_script(300, 2))
        self.assertEqual(program_inputs.git_fast_import(5, 4, 1), program_inputs.git_fast_import(5, 4, 1))
        self.assertEqual(program_inputs.redis_dataset(50, 3), program_inputs.redis_dataset(50, 3))

    def test_git_stream_has_every_commit(self):
        stream = program_inputs.git_fast_import(12, 6, 1)
        self.assertEqual(stream.count(b"\ncommit refs/heads/main\n") + stream.startswith(b"commit "), 12)
        self.assertIn(b"M 100644 inline " + program_inputs.HOT_FILE.encode(), stream)

    def test_redis_commands_are_well_formed_resp(self):
        data, checks = program_inputs.redis_dataset(40, 1)
        count, pos = 0, 0
        while pos < len(data):
            self.assertEqual(data[pos:pos + 1], b"*")
            end = data.index(b"\r\n", pos)
            for _ in range(int(data[pos + 1:end])):
                pos = end + 2
                self.assertEqual(data[pos:pos + 1], b"$")
                end = data.index(b"\r\n", pos)
                length = int(data[pos + 1:end])
                self.assertEqual(data[end + 2 + length:end + 4 + length], b"\r\n")
                end = end + 2 + length
            pos = end + 2
            count += 1
        self.assertGreater(count, 40)
        self.assertEqual(checks.splitlines()[0], "DBSIZE")


class HelperTest(unittest.TestCase):
    def helper(self):
        return os.path.join(support.bin_dir(), "bench_exec_rusage")

    def run_helper(self, argv, env=None):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ru")
            proc = subprocess.run([self.helper(), path] + argv, capture_output=True, text=True, timeout=60,
                                  env=env or dict(os.environ))
            with open(path) as f:
                return proc, programs.parse_rusage(f.read())

    def test_exit_code_and_signal(self):
        proc, ru = self.run_helper(["sh", "-c", "exit 3"])
        self.assertEqual((proc.returncode, ru["exit"]), (3, 3))
        proc, ru = self.run_helper(["sh", "-c", "kill -SEGV $$"])
        self.assertEqual((proc.returncode, ru["exit"]), (128 + 11, -11))

    def test_peak_rss_is_the_programs_own(self):
        _, small = self.run_helper(["/bin/true"])
        self.assertLess(small["maxrss_kib"], 8 * 1024)  # not the harness's 15-25 MiB
        _, big = self.run_helper([sys.executable, "-c", "b = bytearray(64 << 20); b[::4096] = b'x' * len(b[::4096])"])
        self.assertGreater(big["maxrss_kib"], 64 * 1024)
        self.assertGreater(big["minflt"], (64 << 20) // 4096 // 2)

    def test_preload_goes_to_the_program_only(self):
        env = dict(os.environ, BENCH_CHILD_LD_PRELOAD="/nonexistent/libx.so")
        proc, ru = self.run_helper(["sh", "-c", 'echo "[$LD_PRELOAD][${BENCH_CHILD_LD_PRELOAD:-}]"'], env)
        self.assertIn("[/nonexistent/libx.so][]", proc.stdout)
        proc, _ = self.run_helper(["sh", "-c", 'echo "[${LD_PRELOAD:-}]"'],
                                  dict(os.environ, LD_PRELOAD="", BENCH_CHILD_LD_PRELOAD=""))
        self.assertIn("[]", proc.stdout)


@dataclass(frozen=True)
class EchoPreload(programs.Program):
    """A fake program whose output depends on whether anything is preloaded."""

    def argv(self, ctx, run_dir):
        return ["sh", "-c", 'echo "steps ${LD_PRELOAD:+preloaded}"']


class HarnessTest(unittest.TestCase):
    def test_wrong_output_is_a_failure_and_rusage_is_recorded(self):
        with open("/proc/self/maps") as f:
            libc = next(line.split()[-1] for line in f if "/libc.so" in line or "/libc-" in line)
        fake = EchoPreload("echo", "coreutils", ("sh",), "echo", {"smoke": {"steps": 1}})
        with tempfile.TemporaryDirectory() as out:
            args = run.parse_args(["--smoke", "--rounds", "2", "--warmup", "1"])
            allocs = [allocators.Allocator("glibc", None), allocators.Allocator("libc-again", libc)]
            suite = run.Suite(args, allocs, support.bin_dir(), {}, out)
            suite.run_program(fake)
            recs = suite.records
        by_alloc = {}
        for r in recs:
            by_alloc.setdefault(r["allocator"], []).append(r)
        self.assertEqual([r["status"] for r in by_alloc["glibc"]], ["ok"] * 3)
        self.assertGreater(by_alloc["glibc"][0]["peak_rss_kib"], 0)
        self.assertIsNotNone(by_alloc["glibc"][0]["cpu_seconds"])
        # the preloaded run printed "steps preloaded": a wrong answer, and not run again
        self.assertEqual(len(by_alloc["libc-again"]), 1)
        self.assertEqual(by_alloc["libc-again"][0]["status"], "failed")
        self.assertIn("wrong output: line 1", by_alloc["libc-again"][0]["message"])
        self.assertEqual([r["allocator"] for r in report.unexpected_failures(recs)], ["libc-again"])


@unittest.skipUnless(all(shutil.which(p) for p in ("redis-server", "redis-cli", "redis-benchmark")),
                     "redis-server and redis-tools are not installed")
class RedisTest(unittest.TestCase):
    def test_server_runs_answers_and_is_stopped(self):
        prog = next(p for p in programs.PROGRAMS if p.name == "redis")
        with tempfile.TemporaryDirectory() as d:
            ctx = prog.prepare(prog.sizes["smoke"], d)
            result = prog.run(ctx, dict(os.environ), 120, os.path.join(support.bin_dir(), "bench_exec_rusage"), d)
        self.assertEqual(result.status(), "ok", result.message())
        self.assertIn("load errors: 0,", result.output)
        self.assertIn("benchmark SET;GET;", result.output)
        self.assertTrue(result.output.splitlines()[2].isdigit())  # DBSIZE
        self.assertGreater(result.rusage["maxrss_kib"], 1024)
        with socket.socket() as s:  # nothing listens on the port any more
            self.assertNotEqual(s.connect_ex(("127.0.0.1", result.extra["port"])), 0)
        self.assertIn("$PORT", result.command)


class SelectionTest(unittest.TestCase):
    def test_only_and_flags(self):
        self.assertEqual([p.name for p in programs.selected(["lua", "git"])], ["lua", "git"])
        self.assertEqual(programs.selected(["random_mixed"]), [])
        self.assertEqual(len(programs.selected(None)), len(programs.PROGRAMS))
        self.assertEqual(run.parse_args(["--full"]).program_rounds, run.MIN_FULL_PROGRAM_ROUNDS)
        self.assertEqual(run.parse_args(["--full", "--rounds", "9"]).program_rounds, 9)
        self.assertEqual(run.parse_args(["--quick"]).program_rounds, run.QUICK_PROGRAM_ROUNDS)
        self.assertEqual(run.parse_args(["--quick", "--rounds", "2"]).program_rounds, 2)
        self.assertEqual(run.parse_args(["--quick", "--program-rounds", "7"]).program_rounds, 7)
        with self.assertRaises(SystemExit):
            run.parse_args(["--no-programs", "--programs-only"])

    def test_every_program_has_every_size(self):
        for p in programs.PROGRAMS:
            for scale in ("smoke", "quick", "full", "cachegrind"):
                self.assertIn(scale, p.sizes, p.name)

    def test_missing_program_is_skipped_with_a_note(self):
        ghost = programs.Program("ghost", "ghost-package", ("/nonexistent/ghost",), "", {})
        self.assertIn("ghost-package not installed", ghost.missing())
        with tempfile.TemporaryDirectory() as out:
            # lua is skipped when its interpreter is not on PATH
            env = dict(os.environ, PATH="/nonexistent")
            proc = subprocess.run([sys.executable, os.path.join(support.HARNESS_DIR, "run.py"), "--smoke",
                                   "--programs-only", "--only", "lua", "--bin-dir", support.bin_dir(),
                                   "--allocators", "glibc", "--out", out], capture_output=True, text=True,
                                  timeout=120, env=env)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            self.assertIn("skipping program lua", proc.stderr)
            with open(os.path.join(out, "results.json")) as f:
                self.assertEqual(json.load(f)["meta"]["skipped_programs"][0]["name"], "lua")


if __name__ == "__main__":
    unittest.main()
