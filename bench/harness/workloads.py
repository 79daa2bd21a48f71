"""The benchmark suite: which workload binaries run, with which arguments, per mode.

Modes (scales):
  smoke  tiny sizes, to check that every workload runs and checks itself (tests only;
         the numbers mean nothing)
  quick  the default: about five minutes for all five allocators on a 2-core machine
  full   the sizes to quote: longer steady states, larger working sets

Multi-threaded workloads keep their total work constant across thread counts (per-thread
work = total / threads), so ops/s at 1, 2 and 8 threads compare directly.
"""

from dataclasses import dataclass, field

SCALES = ("smoke", "quick", "full")
THREADS_MT = (1, 2, 8)

# workload binary -> source file in bench/workloads/ (the same list as bench/CMakeLists.txt)
SOURCES = {
    "random_mixed": "random_mixed.c",
    "larson": "larson.c",
    "producer_consumer": "producer_consumer.c",
    "thread_churn": "thread_churn.c",
    "false_sharing": "false_sharing.c",
    "realloc_growth": "realloc_growth.c",
    "calloc": "calloc_bench.c",
    "aligned": "aligned_bench.c",
    "large": "large_bench.c",
    "huge": "huge_bench.c",
    "memory_behaviour": "memory_behaviour.c",
    "class_shift": "class_shift.c",
    "tier_shift": "tier_shift.c",
    "heap_requests": "heap_requests.c",
    "fastpath_loop": "fastpath_loop.c",
    "pointer_chase": "pointer_chase.c",  # a large-heap program (bigheap.py)
    "exec_rusage": "exec_rusage.c",  # not a workload: runs the real programs (programs.py)
    "malloc_tail": "malloc_tail.c",  # not a row: the slowest mallocs, for docs/huge-pages.md
    "fork_touch": "fork_touch.c",  # not a row: fork of a big heap, for docs/huge-pages.md
    "first_touch": "first_touch.c",  # not a row: first-touch cost of huge pages, huge-pages.md
}


def binary_name(program):
    return "bench_" + program


@dataclass(frozen=True)
class Benchmark:
    """A timed workload: `sizes[scale]` are its size parameters, `argv` builds its
    arguments from them and a thread count."""

    name: str
    program: str
    sizes: dict
    argv: object  # (sizes, threads) -> list of argument strings
    threads: tuple = (1,)
    supports_corrupt: bool = False

    def args(self, scale, threads):
        return [str(a) for a in self.argv(self.sizes[scale], threads)]


@dataclass(frozen=True)
class CallgrindLoop:
    """A fast-path loop run under callgrind at `iterations[scale]` and at 0; through the
    allocator's heap API when `api` is "heap" (its malloc from a heap) or "heapdefault"
    (plain malloc with that heap the default)."""

    name: str
    mode_args: tuple
    iterations: dict = field(default_factory=lambda: {"smoke": 1000, "quick": 200000,
                                                      "full": 1000000})
    api: str = ""

    program = "fastpath_loop"

    def args(self, iterations):
        mode, *rest = self.mode_args
        prefix = [self.api] if self.api else []
        if mode == "fixed":
            return prefix + ["fixed", str(rest[0]), str(iterations)]
        if mode == "xthread":
            return prefix + ["xthread", str(rest[0]), str(iterations)] + [str(a) for a in rest[1:]]
        return prefix + ["ring", str(iterations)] + [str(a) for a in rest]


def _per_thread(total, threads):
    return max(1, total // threads)


BENCHMARKS = [
    Benchmark("random_mixed", "random_mixed",
              {"smoke": {"ops": 20000}, "quick": {"ops": 10_000_000}, "full": {"ops": 50_000_000}},
              lambda s, t: [s["ops"], 8192, 1], supports_corrupt=True),
    Benchmark("larson", "larson",
              {"smoke": {"seconds": 0.05, "blocks": 100, "rounds": 10},
               "quick": {"seconds": 0.5, "blocks": 1000, "rounds": 100},
               "full": {"seconds": 3, "blocks": 1000, "rounds": 100}},
              lambda s, t: [s["seconds"], 8, 1000, s["blocks"], s["rounds"], 4141, t], THREADS_MT),
    Benchmark("producer_consumer", "producer_consumer",
              {"smoke": {"ops": 20000}, "quick": {"ops": 3_000_000}, "full": {"ops": 20_000_000}},
              lambda s, t: [_per_thread(s["ops"], t), 64, 1, t], THREADS_MT),
    Benchmark("thread_churn", "thread_churn",
              {"smoke": {"ops": 20000}, "quick": {"ops": 1_000_000}, "full": {"ops": 5_000_000}},
              lambda s, t: [_per_thread(s["ops"] // 1000, t), 1000, 1, t], THREADS_MT),
    Benchmark("false_sharing_active", "false_sharing",
              {"smoke": {"rounds": 40}, "quick": {"rounds": 2000}, "full": {"rounds": 10000}},
              lambda s, t: ["active", _per_thread(s["rounds"], t), 10000, 8, t], THREADS_MT),
    Benchmark("false_sharing_passive", "false_sharing",
              {"smoke": {"rounds": 40}, "quick": {"rounds": 2000}, "full": {"rounds": 10000}},
              lambda s, t: ["passive", _per_thread(s["rounds"], t), 10000, 8, t], THREADS_MT),
    Benchmark("realloc_growth", "realloc_growth",
              {"smoke": {"rounds": 5}, "quick": {"rounds": 500}, "full": {"rounds": 3000}},
              lambda s, t: [s["rounds"], 65536, 8, 1]),
    Benchmark("calloc", "calloc",
              {"smoke": {"ops": 20000}, "quick": {"ops": 500_000}, "full": {"ops": 3_000_000}},
              lambda s, t: [s["ops"], 256, 16384, 1]),
    Benchmark("aligned", "aligned",
              {"smoke": {"ops": 20000}, "quick": {"ops": 2_000_000}, "full": {"ops": 10_000_000}},
              lambda s, t: [s["ops"], 4096, 1]),
    Benchmark("large", "large",
              {"smoke": {"ops": 20}, "quick": {"ops": 120}, "full": {"ops": 1000}},
              lambda s, t: [s["ops"], max(1, 16 // t), 1, 65536, 33554432, t], (1, 8)),
    Benchmark("huge", "huge",
              {"smoke": {"ops": 2, "max": 34603008}, "quick": {"ops": 4, "max": 100663296},
               "full": {"ops": 30, "max": 268435456}},
              lambda s, t: [s["ops"], 1, 34603008, s["max"], 65536]),
    Benchmark("memory_behaviour", "memory_behaviour",
              {"smoke": {"mib": 16, "ms": 20, "keep": 0}, "quick": {"mib": 256, "ms": 300, "keep": 0},
               "full": {"mib": 512, "ms": 300, "keep": 0}},
              lambda s, t: [s["mib"], s["keep"], s["ms"], 1]),
    Benchmark("memory_behaviour_keep1pct", "memory_behaviour",
              {"smoke": {"mib": 16, "ms": 20, "keep": 100}, "quick": None,
               "full": {"mib": 512, "ms": 300, "keep": 100}},
              lambda s, t: [s["mib"], s["keep"], s["ms"], 1]),
    Benchmark("class_shift", "class_shift",
              {"smoke": {"mib": 4}, "quick": {"mib": 64}, "full": {"mib": 256}},
              lambda s, t: [s["mib"], 90, 1]),
    # Per-request heaps, 500 blocks of 16 B-4 KiB each: made and destroyed whole with the
    # allocator's own heap API where the workload finds one (hakmem, mimalloc), else
    # (and in the _malloc row, for every allocator) malloc and free of every block.
    # Freed small and mid blocks, then huge ones at once: is the freed memory still resident?
    Benchmark("tier_shift", "tier_shift",
              {"smoke": {"mib": 16, "huge": 8}, "quick": {"mib": 256, "huge": 64},
               "full": {"mib": 512, "huge": 64}},
              lambda s, t: [s["mib"], s["huge"], 3, 1]),
    Benchmark("heap_requests", "heap_requests",
              {"smoke": {"requests": 100}, "quick": {"requests": 10_000}, "full": {"requests": 40_000}},
              lambda s, t: ["heap", s["requests"], 500, 16, 4096, 1]),
    Benchmark("heap_requests_malloc", "heap_requests",
              {"smoke": {"requests": 100}, "quick": {"requests": 10_000}, "full": {"requests": 40_000}},
              lambda s, t: ["malloc", s["requests"], 500, 16, 4096, 1]),
]

CALLGRIND_LOOPS = [
    CallgrindLoop("fastpath_fixed_16", ("fixed", 16)),
    CallgrindLoop("fastpath_fixed_64", ("fixed", 64)),
    CallgrindLoop("fastpath_fixed_256", ("fixed", 256)),
    CallgrindLoop("fastpath_fixed_1024", ("fixed", 1024)),
    CallgrindLoop("fastpath_ring", ("ring", 1000, 1)),
    # One thread mallocs 64-byte blocks, another frees them, 64 at a time; the freeing
    # thread only frees, or (_both) also allocates, and so has whatever state an
    # allocator gives a thread that allocates. Each pair is counted whole: both sides.
    CallgrindLoop("xthread_64", ("xthread", 64, 64, 0)),
    CallgrindLoop("xthread_both_64", ("xthread", 64, 64, 1)),
]

# The same loops through the heap API (hak_heap_malloc from a heap; plain malloc with a
# heap as the default), every block freed by free(): bench/perfcheck.py checks them
# against hakmem's baseline. Not in the suite: most allocators have no heap API.
HEAP_LOOPS = [
    CallgrindLoop("heap_fixed_64", ("fixed", 64), api="heap"),
    CallgrindLoop("heap_ring", ("ring", 1000, 1), api="heap"),
    CallgrindLoop("heapdefault_fixed_64", ("fixed", 64), api="heapdefault"),
    CallgrindLoop("heapdefault_ring", ("ring", 1000, 1), api="heapdefault"),
]


def scale_notes(scale):
    """What the report says about a scaled-down mode, generated from the tables above."""
    if scale == "full":
        return []
    changes = []
    for b in BENCHMARKS:
        mine, full = b.sizes.get(scale), b.sizes["full"]
        if mine is None:
            changes.append("%s not run" % b.name)
            continue
        diff = ["%s %s (full %s)" % (k, mine[k], full[k]) for k in mine if mine[k] != full[k]]
        if diff:
            changes.append("%s: %s" % (b.name, ", ".join(diff)))
    loops = CALLGRIND_LOOPS[0].iterations
    changes.append("callgrind loops: iterations %d (full %d)" % (loops[scale], loops["full"]))
    notes = ["%s mode, scaled down from full: %s." % (scale, "; ".join(changes))]
    if scale == "quick":
        notes.append("Some quick runs are shorter than 0.5 s and 10M ops (producer_consumer, "
                     "thread_churn, false_sharing, realloc_growth, calloc, aligned, large and huge, "
                     "under the faster allocators): their medians are indicative; use --full for "
                     "figures to quote.")
    else:
        notes.append("smoke sizes only check that everything runs: the numbers mean nothing.")
    return notes


def selected(only=None, scale="quick"):
    """(benchmarks, callgrind loops) matching the --only filter (names or name prefixes)."""
    def wanted(name):
        return not only or any(name == o or name.startswith(o) for o in only)

    benches = [b for b in BENCHMARKS if b.sizes.get(scale) is not None and wanted(b.name)]
    loops = [c for c in CALLGRIND_LOOPS if wanted(c.name)]
    return benches, loops


def all_names():
    return [b.name for b in BENCHMARKS] + [c.name for c in CALLGRIND_LOOPS]
