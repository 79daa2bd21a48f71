"""callgrind_share: the allocator's inclusive cost from a callgrind output file."""

import re
import shutil
import tempfile
import unittest

import support  # noqa: F401  (import path)
import callgrind_share

# A program (ob 1) calling a preloaded allocator (ob 2): malloc twice, free once, calloc
# once (which calls memset in libc, ob 3) and realloc, which calls the allocator's own
# malloc (not to be counted twice). libc's strdup calls malloc too (counted: the caller
# is not the allocator). Name compression: "(id) name" defines, "(id)" refers; cob=
# holds for the next call only.
OUT = """\
# callgrind format
version: 1
positions: line
events: Ir Dr
summary: 100000 5000

ob=(1) /usr/bin/prog
fl=(1) prog.c
fn=(1) main
10 500
cob=(2) /opt/liballoc.so.1
cfi=(2) ???
cfn=(2) malloc
calls=2 0
11 300 10
cob=(2)
cfn=(3) free
calls=1 0
12 40
cob=(2)
cfn=(4) calloc
calls=1 0
13 1000
cob=(2)
cfn=(5) realloc
calls=3 0
+1 600
cob=(3) /lib/libc.so.6
cfn=(6) strdup
calls=1 0
* 70
cfn=(7) helper
calls=5 0
* 9999

fn=(7)
20 9999

ob=(3)
fl=(3) string.c
fn=(6)
1 20
cob=(2)
cfn=(2)
calls=1 0
2 50

ob=(2)
fl=(2)
fn=(4)
0 100
cob=(3)
cfn=(8) __memset_avx2_unaligned_erms
calls=1 0
0 900
fn=(5)
0 200
cfn=(2)
calls=3 0
0 400
fn=(2)
0 350
"""


class ShareTest(unittest.TestCase):
    def share(self, obj="/opt/liballoc.so.1"):
        return callgrind_share.share(callgrind_share.read(OUT.splitlines(True)), obj)

    def test_inclusive_cost_of_calls_from_outside(self):
        s = self.share()
        self.assertEqual(s["total"], 100000)
        self.assertEqual(s["groups"]["malloc"], {"calls": 3, "ir": 350})  # main's 2 and strdup's 1
        self.assertEqual(s["groups"]["free"], {"calls": 1, "ir": 40})
        self.assertEqual(s["groups"]["calloc"], {"calls": 1, "ir": 1000})
        self.assertEqual(s["groups"]["realloc"], {"calls": 3, "ir": 600})  # its own malloc inside
        self.assertEqual(s["allocator"], 350 + 40 + 1000 + 600)
        self.assertEqual(s["memory"], 900)  # calloc's memset
        self.assertNotIn("helper", str(s))

    def test_cob_applies_to_one_call(self):
        # "helper" follows a call with cob=(3) but has none: it is in main's object
        profile = callgrind_share.read(OUT.splitlines(True))
        self.assertIn(((("/usr/bin/prog", "main"), ("/usr/bin/prog", "helper"))), profile.edges)

    def test_without_the_object_only_api_names_count(self):
        s = self.share(obj=None)
        self.assertEqual(s["allocator"], 350 + 40 + 1000 + 600)

    def test_groups_by_name(self):
        for name, group in [("malloc", "malloc"), ("__libc_malloc", "malloc"), ("_Znwm", "malloc"),
                            ("free", "free"), ("_ZdlPvm", "free"), ("cfree", "free"), ("calloc", "calloc"),
                            ("realloc", "realloc"), ("reallocarray", "realloc"), ("posix_memalign", "aligned"),
                            ("aligned_alloc", "aligned"), ("malloc_usable_size", "usable_size"),
                            ("malloc_size", "usable_size"),
                            ("init_constructor", "other")]:
            self.assertEqual(callgrind_share.group_of(name), group, name)

    def test_two_positions_and_files_add_up(self):
        # every cost line gets an instruction address before its line number
        text = re.sub(r"(?m)^(?=[0-9+*-])", "0x4a0 ", OUT.replace("positions: line", "positions: instr line"))
        profile = callgrind_share.read(text.splitlines(True))
        callgrind_share.read(OUT.splitlines(True), profile)
        s = callgrind_share.share(profile, "/opt/liballoc.so.1")
        self.assertEqual(s["total"], 200000)
        self.assertEqual(s["groups"]["malloc"]["ir"], 700)


if __name__ == "__main__":
    unittest.main()


@unittest.skipUnless(shutil.which("valgrind") and shutil.which("sqlite3"), "valgrind or sqlite3 is not installed")
class RunTest(unittest.TestCase):
    def test_runs_a_harness_program_under_callgrind(self):
        with tempfile.TemporaryDirectory() as out:
            files, command, status = callgrind_share.run_program("sqlite", "orders=40", None, out)
            self.assertEqual(status, "ok")
            self.assertIn("valgrind --tool=callgrind", command)
            profile = callgrind_share.Profile()
            for path in files:
                with open(path) as f:
                    callgrind_share.read(f, profile)
        s = callgrind_share.share(profile)
        self.assertGreater(s["groups"]["malloc"]["calls"], 100)
        self.assertGreater(s["allocator"], 0)
        self.assertLess(s["allocator"], s["total"])
