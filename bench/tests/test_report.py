import os
import re
import tempfile
import unittest
import xml.etree.ElementTree as ET

import support
import charts
import report
import results
import workloads


def timed(alloc, workload, threads, rnd, tp, rss, warmup=False, status="ok", result=None):
    return results.make_record(kind="timed", allocator=alloc, workload=workload, params="p", threads=threads,
                               round=rnd, warmup=warmup, wall_seconds=1.0, throughput=tp, peak_rss_kib=rss,
                               exit_status=0 if status == "ok" else 1, status=status,
                               message=None if status == "ok" else "FAIL workload=%s: bad" % workload,
                               command="cmd %s %s %d" % (alloc, workload, threads), result=result or {})


def callgrind(alloc, loop, iterations, instructions):
    return results.make_record(kind="callgrind", allocator=alloc, workload=loop, params="fixed 64 %d" % iterations,
                               threads=1, round=0, warmup=False, wall_seconds=0.5, instructions=instructions,
                               iterations=iterations, exit_status=0, status="ok", command="valgrind %s" % alloc)


def synthetic():
    recs = []
    for rnd in range(3):
        warm = rnd == 0
        recs += [timed("glibc", "w1", 1, rnd, 100.0 if not warm else 1.0, 1000, warm),
                 timed("mimalloc", "w1", 1, rnd, 200.0, 2000, warm),
                 timed("glibc", "w2", 2, rnd, 50.0, 4000, warm),
                 timed("mimalloc", "w2", 2, rnd, [40.0, 50.0, 60.0][rnd], 1000, warm)]
    recs.append(timed("hakmem", "w2", 2, 1, None, 10, status="failed"))
    recs += [callgrind("glibc", "fastpath_fixed_64", 0, 1000), callgrind("glibc", "fastpath_fixed_64", 100, 11000),
             callgrind("mimalloc", "fastpath_fixed_64", 0, 2000), callgrind("mimalloc", "fastpath_fixed_64", 100, 7000)]
    return recs


class AnalysisTest(unittest.TestCase):
    def test_warmup_and_failed_runs_not_counted(self):
        fig = report.figure(report.group_timed(synthetic()), lambda r: r["throughput"])
        self.assertEqual(fig[("w1", 1)]["glibc"]["median"], 100.0)
        self.assertEqual(fig[("w1", 1)]["glibc"]["n"], 2)
        self.assertIsNone(fig[("w2", 2)]["hakmem"])

    def test_ratios_and_geomean(self):
        fig = report.figure(report.group_timed(synthetic()), lambda r: r["throughput"])
        r = report.ratios(fig, "glibc")
        self.assertEqual(r[("w1", 1)]["mimalloc"], 2.0)
        self.assertEqual(r[("w2", 2)]["mimalloc"], 55.0 / 50.0)
        self.assertAlmostEqual(report.geomeans(r, ["mimalloc"])["mimalloc"], (2.0 * 1.1) ** 0.5)

    def test_callgrind_subtracts_the_zero_run(self):
        table = report.callgrind_per_pair(synthetic())
        self.assertEqual(table["fastpath_fixed_64"], {"glibc": 100.0, "mimalloc": 50.0})


    def test_against_best_anchor_takes_the_best_anchor_and_ignores_other_builds(self):
        medians = {"hakmem": 90.0, "hakmem-secure": 500.0, "glibc": 60.0, "tcmalloc": 120.0, "mimalloc": None}
        self.assertEqual(report.against_best_anchor(medians, max), (0.75, "tcmalloc"))
        self.assertEqual(report.against_best_anchor(medians, min), (1.5, "glibc"))
        self.assertIsNone(report.against_best_anchor({"hakmem": 1.0, "hakmem-secure": 2.0}, max))
        self.assertIsNone(report.against_best_anchor({"glibc": 1.0}, max))

    def test_report_marks_rows_that_miss_a_target(self):
        recs = []
        for rnd in range(2):
            recs += [timed("hakmem", "w1", 1, rnd, 90.0, 1300), timed("glibc", "w1", 1, rnd, 100.0, 1000),
                     timed("hakmem", "w2", 1, rnd, 110.0, 1200), timed("glibc", "w2", 1, rnd, 100.0, 1000)]
        text = report.render({"allocators": [{"name": "hakmem"}, {"name": "glibc"}]}, recs, [])
        self.assertIn("| w1 t=1 | 0.90 (glibc) * | 0 of 2 | 1.30 (glibc) * | 0 of 2 |", text)
        self.assertIn("| w2 t=1 | 1.10 (glibc) | 2 of 2 | 1.20 (glibc) | 2 of 2 |", text)

    def test_rounds_at_target_pairs_runs_by_round(self):
        # By medians hakmem is behind (97 against 100), but it led in one round of three;
        # a warm-up round and a round the anchor failed are not counted.
        recs = [timed("hakmem", "w", 1, 0, 500.0, 1, warmup=True), timed("glibc", "w", 1, 0, 1.0, 1, warmup=True)]
        for rnd, (mine, theirs) in enumerate([(95.0, 100.0), (120.0, 90.0), (80.0, 100.0), (99.0, None)], 1):
            recs.append(timed("hakmem", "w", 1, rnd, mine, 1000))
            recs.append(timed("glibc", "w", 1, rnd, theirs, 1000, status="ok" if theirs else "failed"))
        groups = report.group_timed(recs)
        at = report.rounds_at_target(groups[("w", 1)], "glibc", lambda r: r["throughput"], lambda q: q >= 1.0)
        self.assertEqual(at, (1, 3))
        self.assertIsNone(report.rounds_at_target(groups[("w", 1)], "tcmalloc", lambda r: r["throughput"],
                                                  lambda q: q >= 1.0))
        text = report.render({"allocators": [{"name": "hakmem"}, {"name": "glibc"}]}, recs, [])
        self.assertIn("| w t=1 | 0.97 (glibc) * | 1 of 3 | 1.00 (glibc) | 3 of 3 |", text)


class GenerateTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.meta = {"mode": "quick", "rounds": 2, "warmup": 1,
                     "allocators": [{"name": "hakmem"}, {"name": "glibc"}, {"name": "mimalloc"}],
                     "machine": {"uname": "Linux test", "cpu": "cpu", "nproc": 2, "git_commit": "abc"}}

    def test_report_and_svg_charts_from_results_json(self):
        path = os.path.join(self.dir.name, "results.json")
        results.write_json(path, self.meta, synthetic())
        md_path = report.generate(path, force_svg=True)
        with open(md_path) as f:
            md = f.read()
        for needle in ("Figure 1: throughput", "Figure 2: peak RSS", "Figure 3: instructions",
                       "geometric mean", "relative to mimalloc", "relative to glibc", "Linux test",
                       "cmd glibc w1 1", "**unexpected**", "charts/throughput_vs_mimalloc.svg"):
            self.assertIn(needle, md)
        svgs = sorted(os.listdir(os.path.join(self.dir.name, "charts")))
        self.assertIn("throughput_vs_mimalloc.svg", svgs)
        for name in svgs:
            root = ET.parse(os.path.join(self.dir.name, "charts", name)).getroot()
            self.assertTrue(root.tag.endswith("svg"))

    def test_report_from_csv_alone(self):
        path = os.path.join(self.dir.name, "results.csv")
        results.write_csv(path, synthetic())
        md_path = report.generate(path, force_svg=True)
        with open(md_path) as f:
            self.assertIn("Figure 1: throughput", f.read())

    def test_svg_writer_handles_gaps_and_one_value(self):
        spec = {"name": "c", "title": "t", "ylabel": "y", "log": True, "baseline": 1.0,
                "groups": ["a", "b"], "series": [{"label": "hakmem", "values": [None, 1.5]}]}
        name = charts.write_charts([spec], self.dir.name, force_svg=True)[0]
        ET.parse(os.path.join(self.dir.name, name))


class SuiteDefinitionTest(unittest.TestCase):
    def test_cmake_and_harness_list_the_same_workloads(self):
        with open(os.path.join(support.BENCH_DIR, "CMakeLists.txt")) as f:
            cmake = dict(re.findall(r"^\s+(\w+):(\w+\.c)\s*\)?\s*$", f.read(), re.M))
        self.assertEqual(cmake, workloads.SOURCES)

    def test_every_benchmark_has_every_scale_or_none(self):
        for b in workloads.BENCHMARKS:
            for scale in workloads.SCALES:
                if b.sizes.get(scale) is not None:
                    for t in b.threads:
                        self.assertTrue(all(isinstance(a, str) for a in b.args(scale, t)))


if __name__ == "__main__":
    unittest.main()
