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

    def test_extra_allocator_comes_last_with_its_settings(self):
        with tempfile.NamedTemporaryFile(suffix=".so") as lib:
            found, _ = allocators.discover(None, overrides={"hakmem-nopurge": lib.name},
                                           wanted=["glibc", "hakmem-nopurge"],
                                           settings={"hakmem-nopurge": {"HAKMEM_PURGE_DELAY_MS": "-1"}})
        self.assertEqual([a.name for a in found], ["glibc", "hakmem-nopurge"])
        env = found[1].env({"PATH": "/bin"})
        self.assertEqual(env["LD_PRELOAD"], os.path.abspath(lib.name))
        self.assertEqual(env["HAKMEM_PURGE_DELAY_MS"], "-1")
        self.assertNotIn("HAKMEM_PURGE_DELAY_MS", found[0].env({"PATH": "/bin"}))

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

    def test_extra_allocator_runs_with_its_setting(self):
        # The C library itself is a library any program accepts in LD_PRELOAD.
        with open("/proc/self/maps") as f:
            libc = next(line.split()[-1] for line in f if "/libc.so" in line or "/libc-" in line)
        with tempfile.TemporaryDirectory() as out:
            proc = support.run_harness("--only", "random_mixed", "--allocators", "glibc,libc-again",
                                       "--lib", "libc-again=" + libc, "--set", "libc-again:MALLOC_ARENA_MAX=1",
                                       "--rounds", "1", "--warmup", "0", "--out", out)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            with open(os.path.join(out, "results.json")) as f:
                data = json.load(f)
        runs = {r["allocator"]: r for r in data["runs"] if not r.get("warmup")}
        self.assertEqual(set(runs), {"glibc", "libc-again"})
        self.assertIn("MALLOC_ARENA_MAX=1 ", runs["libc-again"]["command"])
        self.assertNotIn("MALLOC_ARENA_MAX", runs["glibc"]["command"])
        self.assertEqual(data["meta"]["allocators"][1]["settings"], {"MALLOC_ARENA_MAX": "1"})

    def test_bad_extra_name_is_refused(self):
        import run
        with self.assertRaises(SystemExit):
            run.parse_args(["--lib", "Bad Name=/x.so"])


if __name__ == "__main__":
    unittest.main()
