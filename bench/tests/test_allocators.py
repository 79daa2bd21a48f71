import json
import os
import tempfile
import unittest

import support
import allocators


class DiscoverTest(unittest.TestCase):
    def test_missing_hakmem_is_skipped_with_a_note(self):
        found, skipped = allocators.discover("/nonexistent/libhakmem.so", wanted=["hakmem", "glibc"])
        self.assertEqual([a.name for a in found], ["glibc"])
        self.assertEqual([s.name for s in skipped], ["hakmem"])
        self.assertIn("/nonexistent/libhakmem.so", skipped[0].note)

    def test_missing_comparison_library_is_skipped(self):
        found, skipped = allocators.discover(None, overrides={"mimalloc": "/nonexistent/libmimalloc.so.2"},
                                             wanted=["mimalloc", "glibc"])
        self.assertEqual([a.name for a in found], ["glibc"])
        self.assertEqual([s.name for s in skipped], ["mimalloc"])

    def test_glibc_preloads_nothing(self):
        glibc = allocators.Allocator("glibc", None)
        self.assertNotIn("LD_PRELOAD", glibc.env({"LD_PRELOAD": "/leftover.so", "PATH": "/bin"}))

    def test_canonical_order(self):
        found, _ = allocators.discover("/nonexistent.so")
        names = [a.name for a in found]
        self.assertEqual(names, [n for n in allocators.ORDER if n in names])

    def test_unloadable_library_is_caught_by_the_probe(self):
        with tempfile.NamedTemporaryFile(suffix=".so") as bogus:
            bogus.write(b"not an ELF file")
            bogus.flush()
            why = allocators.probe(allocators.Allocator("hakmem", bogus.name), ["/bin/true"])
        self.assertIsNotNone(why)


class HarnessSkipTest(unittest.TestCase):
    def test_run_with_missing_allocators_succeeds_and_says_so(self):
        with tempfile.TemporaryDirectory() as out:
            proc = support.run_harness("--only", "random_mixed", "--allocators", "hakmem,glibc,jemalloc",
                                       "--hakmem", "/nonexistent/libhakmem.so",
                                       "--lib", "jemalloc=/nonexistent/libjemalloc.so.2",
                                       "--rounds", "1", "--warmup", "0", "--out", out)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            self.assertIn("skipping hakmem", proc.stderr)
            self.assertIn("skipping jemalloc", proc.stderr)
            with open(os.path.join(out, "results.json")) as f:
                data = json.load(f)
            self.assertEqual({s["name"] for s in data["meta"]["skipped"]}, {"hakmem", "jemalloc"})
            self.assertEqual({r["allocator"] for r in data["runs"]}, {"glibc"})
            with open(os.path.join(out, "report.md")) as f:
                self.assertIn("hakmem skipped", f.read())


if __name__ == "__main__":
    unittest.main()
