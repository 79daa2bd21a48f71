import json
import os
import sys
import tempfile
import unittest

import support
import known_issues
import runner


class WrongResultTest(unittest.TestCase):
    def test_workload_detects_its_own_corruption(self):
        binary = os.path.join(support.bin_dir(), "bench_random_mixed")
        out = runner.run([binary, "1000", "16", "1", "--self-test-corrupt"], dict(os.environ), 30)
        self.assertEqual(out.status(), "failed")
        self.assertEqual(out.exit_status, 1)
        self.assertIn("FAIL workload=random_mixed", out.message())

    def test_harness_reports_the_wrong_result_and_fails(self):
        with tempfile.TemporaryDirectory() as out:
            proc = support.run_harness("--only", "random_mixed,aligned", "--allocators", "glibc",
                                       "--rounds", "2", "--warmup", "1", "--self-test-corrupt", "--out", out)
            self.assertEqual(proc.returncode, 1, proc.stderr)
            self.assertIn("allocator=glibc workload=random_mixed", proc.stderr)
            self.assertIn("exit=1", proc.stderr)
            self.assertNotIn("workload=aligned", proc.stderr.split("FAILED runs:")[1])
            with open(os.path.join(out, "results.json")) as f:
                runs = json.load(f)["runs"]
            failed = [r for r in runs if r["status"] != "ok"]
            self.assertEqual([(r["allocator"], r["workload"]) for r in failed], [("glibc", "random_mixed")])
            with open(os.path.join(out, "report.md")) as f:
                self.assertIn("**unexpected**", f.read())


class OutcomeTest(unittest.TestCase):
    def test_signal_is_a_crash(self):
        out = runner.run(["/bin/sh", "-c", "kill -SEGV $$"], dict(os.environ), 30)
        self.assertEqual(out.status(), "crashed")
        self.assertEqual(out.exit_status, -11)
        self.assertIn("SIGSEGV", out.message())

    def test_timeout_kills(self):
        out = runner.run(["/bin/sleep", "10"], dict(os.environ), 0.2)
        self.assertEqual(out.status(), "timeout")
        self.assertLess(out.wall_seconds, 5)

    def test_exit_zero_without_result_line_is_a_failure(self):
        out = runner.run([sys.executable, "-c", "print('hello')"], dict(os.environ), 30)
        self.assertEqual(out.status(), "failed")

    def test_peak_rss_is_the_workloads_own(self):
        binary = os.path.join(support.bin_dir(), "bench_memory_behaviour")
        out = runner.run([binary, "64", "0", "0"], dict(os.environ), 30)
        self.assertEqual(out.status(), "ok")
        self.assertGreater(out.result["peak_rss_kib"], 64 * 1024)
        small = runner.run([os.path.join(support.bin_dir(), "bench_random_mixed"), "1000"], dict(os.environ), 30)
        self.assertLess(small.result["peak_rss_kib"], 8 * 1024)


class CallgrindParseTest(unittest.TestCase):
    def test_collected_total(self):
        text = "==4646== Events    : Ir\n==4646== Collected : 34527740\n==4646== \n" \
               "==4646== I   refs:      34,527,740\n"
        self.assertEqual(runner.parse_callgrind_total(text), 34527740)
        self.assertEqual(runner.parse_callgrind_total("==1== I   refs:      1,234\n"), 1234)
        self.assertIsNone(runner.parse_callgrind_total("nothing"))


class KnownIssueTest(unittest.TestCase):
    def test_only_the_named_allocator_and_message(self):
        rec = {"status": "failed", "allocator": "mimalloc", "workload": "aligned",
               "message": "FAIL workload=aligned: aligned_alloc(256, 256) gave 0x10, not aligned"}
        self.assertIsNotNone(known_issues.match(rec))
        self.assertIsNone(known_issues.match(dict(rec, allocator="hakmem")))
        self.assertIsNone(known_issues.match(dict(rec, message="FAIL workload=aligned: overwritten")))
        self.assertIsNone(known_issues.match(dict(rec, status="ok")))


if __name__ == "__main__":
    unittest.main()
