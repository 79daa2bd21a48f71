import os
import tempfile
import unittest

import support  # noqa: F401  (import path)
import results


def sample_records():
    return [
        results.make_record(kind="timed", allocator="glibc", workload="larson", params="0.5 8 1000 1000 100 4141 2",
                            threads=2, round=0, warmup=True, wall_seconds=0.5123456789, throughput=12345678.9,
                            peak_rss_kib=4321, exit_status=0, status="ok",
                            command="/x/bench_larson 0.5 8 1000 1000 100 4141 2",
                            result={"workload": "larson", "ops": 6172839, "seconds": 0.500001,
                                    "ops_per_sec": 1.23457e+07}),
        results.make_record(kind="timed", allocator="mimalloc", workload="aligned", params="2000 4096 1",
                            threads=1, round=3, warmup=False, wall_seconds=0.01, peak_rss_kib=1800,
                            exit_status=1, status="failed",
                            message="FAIL workload=aligned: aligned_alloc(1024, 1024) gave 0x1, not aligned",
                            command="LD_PRELOAD=/usr/lib/libmimalloc.so.2 /x/bench_aligned 2000 4096 1"),
        results.make_record(kind="callgrind", allocator="jemalloc", workload="fastpath_fixed_64",
                            params="fixed 64 0", threads=1, round=0, warmup=False, wall_seconds=0.7,
                            instructions=6222193, iterations=0, exit_status=-11, status="crashed",
                            message="killed by signal 11 (SIGSEGV)",
                            command="LD_PRELOAD=/j.so valgrind --tool=callgrind x 'a b'"),
    ]


class RoundTripTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def test_json_round_trip(self):
        path = os.path.join(self.dir.name, "results.json")
        meta = {"mode": "quick", "machine": {"nproc": 2}}
        results.write_json(path, meta, sample_records())
        meta2, records = results.load(path)
        self.assertEqual(meta2, meta)
        self.assertEqual(records, sample_records())

    def test_csv_round_trip(self):
        path = os.path.join(self.dir.name, "results.csv")
        results.write_csv(path, sample_records())
        meta, records = results.load(path)
        self.assertEqual(meta, {})
        self.assertEqual(records, sample_records())

    def test_csv_with_meta_beside_it(self):
        path = os.path.join(self.dir.name, "results.csv")
        results.write_csv(path, sample_records())
        self.assertEqual(results.load(path)[0], {})
        meta = {"mode": "full", "rounds": 2, "machine": {"nproc": 2, "uname": "Linux x"}}
        results.write_meta(os.path.join(self.dir.name, "meta.json"), meta)
        meta2, records = results.load(path)
        self.assertEqual(meta2, meta)
        self.assertEqual(records, sample_records())

    def test_every_record_has_every_field(self):
        for r in sample_records():
            self.assertEqual(list(r), results.FIELDS)

    def test_unknown_field_rejected(self):
        with self.assertRaises(KeyError):
            results.make_record(colour="red")


class ResultLineTest(unittest.TestCase):
    def test_last_result_line_parsed_with_types(self):
        out = "noise\nRESULT workload=x ops=10 seconds=0.5\nRESULT workload=random_mixed ops=100 " \
              "seconds=0.25 ops_per_sec=4e+02 mode=fixed\n"
        self.assertEqual(results.parse_result_line(out),
                         {"workload": "random_mixed", "ops": 100, "seconds": 0.25, "ops_per_sec": 400.0,
                          "mode": "fixed"})

    def test_no_result_line(self):
        self.assertIsNone(results.parse_result_line("FAIL workload=x: broken\n"))


if __name__ == "__main__":
    unittest.main()
