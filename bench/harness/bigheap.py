"""Large-heap programs: heaps of hundreds of MiB, where the page size decides the speed.

BENCH.md's "Large heaps": each program runs under every allocator, interleaved, its
output checked against its run with nothing preloaded (like the real programs of
programs.py, through the same exec_rusage helper: CPU time, peak RSS, page faults), and
while it runs the harness samples /proc/PID/smaps_rollup of the measured process every
SAMPLE_SECONDS: the largest `Anonymous` seen is its peak of committed anonymous memory,
and `AnonHugePages` at that sample (and its largest) is how much of it sat in huge
pages. Coverage = AnonHugePages / Anonymous at the peak.

  big_redis   redis-server on 127.0.0.1: DEBUG POPULATE of KEYS keys of 64 B, then
              redis-benchmark SET/GET/INCR/LPUSH pipelined (-P 16) over KEYS random keys;
              the server's CPU time is measured, not the clients'
  big_sqlite  sqlite3 :memory:: ROWS rows with an indexed random key, then LOOKUPS
              look-ups through the index at keys in a scattered order
  big_python  python3 (PYTHONMALLOC=malloc) bench/programs/bighash.py KEYS LOOKUPS SEED
  big_perl    perl bench/programs/bighash.pl KEYS LOOKUPS SEED
  big_lua     lua5.4 bench/programs/bighash.lua KEYS LOOKUPS SEED
  big_chase   bench_pointer_chase BLOCKS SIZE STEPS SEED (bench/workloads/pointer_chase.c)

Besides the allocators of the rest of the suite, these rows run the anchors with their
own huge-page settings and hakmem with huge pages off (HUGEPAGE_VARIANTS); those run
only here. Redis: Debian's redis-server has `disable-thp yes` (its default), which makes
it call prctl(PR_SET_THP_DISABLE) on itself when the system's THP mode is `always`, and
do nothing in `madvise` or `never` mode. The harness leaves that setting as it is (what
users run) and records the process's THP_enabled flag from /proc/PID/status, so a row
where the kernel kept huge pages from the process says so in the report.
"""

import os
import shlex
import threading
from dataclasses import dataclass

import allocators as alloc_mod
import programs
from programs import LC, PROGRAMS_DIR, SEED, Program, Redis, Script, Sqlite

KIND = "bigheap"  # the records' kind (results.py)
SAMPLE_SECONDS = 0.1
THP_DIR = "/sys/kernel/mm/transparent_hugepage"
POINTER_CHASE = "pointer_chase"  # the workload binary (bench/workloads/pointer_chase.c)

# name -> (the allocator it is a setting of, its environment)
HUGEPAGE_VARIANTS = {
    "hakmem-nothp": ("hakmem", {"HAKMEM_THP": "0"}),
    "glibc-hp": ("glibc", {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}),
    "mimalloc-hp": ("mimalloc", {"MIMALLOC_LARGE_OS_PAGES": "1"}),
    "jemalloc-hp": ("jemalloc", {"MALLOC_CONF": "thp:always"}),
}
DEFAULT_ANCHORS = ("glibc", "mimalloc", "jemalloc", "tcmalloc")
HUGEPAGE_ANCHORS = ("glibc-hp", "mimalloc-hp", "jemalloc-hp")


def allocators(found, wanted=None):
    """(the allocators of the large-heap rows, the variants skipped): every allocator
    found, each huge-page variant after the one it is a setting of. A variant whose
    allocator was not found is skipped with a note; with --allocators, only the named."""
    out, skipped = [], []
    for a in found:
        out.append(a)
        for name, (base, settings) in HUGEPAGE_VARIANTS.items():
            if base != a.name or (wanted is not None and name not in wanted):
                continue
            out.append(alloc_mod.Allocator(name, a.preload, a.version, dict(a.settings, **settings)))
    names = {a.name for a in out}
    for name, (base, _) in HUGEPAGE_VARIANTS.items():
        if name not in names and (wanted is None or name in wanted):
            skipped.append(alloc_mod.Skipped(name, "%s was not found or not run, so neither is its huge-page "
                                                   "setting" % base))
    return out, skipped


def thp_mode():
    """{"enabled": ..., "defrag": ...}: the bracketed words of the system's THP settings."""
    mode = {}
    for name in ("enabled", "defrag"):
        try:
            with open(os.path.join(THP_DIR, name)) as f:
                words = f.read().split()
            mode[name] = next((w.strip("[]") for w in words if w.startswith("[")), "?")
        except OSError:
            mode[name] = "unknown (no %s)" % THP_DIR
    return mode


# ---- sampling a running process --------------------------------------------------------

def parse_smaps_rollup(text):
    """{"rss_kib", "anon_kib", "anon_huge_kib"} from /proc/PID/smaps_rollup's text, or
    None when a field is missing."""
    fields = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        words = rest.split()
        if len(words) == 2 and words[1] == "kB":
            fields[key.strip()] = int(words[0])
    names = {"Rss": "rss_kib", "Anonymous": "anon_kib", "AnonHugePages": "anon_huge_kib"}
    if not all(k in fields for k in names):
        return None
    return {ours: fields[theirs] for theirs, ours in names.items()}


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def descendants(pid):
    """The pids below pid (children, theirs, ...), from /proc/PID/task/*/children."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in os.listdir("/proc/%d/task" % parent) if os.path.isdir("/proc/%d/task" % parent) else []:
            text = _read("/proc/%d/task/%s/children" % (parent, task)) or ""
            for child in text.split():
                found.append(int(child))
                todo.append(int(child))
    return found


class PeakSampler(threading.Thread):
    """Samples the descendants of a process (the helper's program) until stopped: the
    largest anonymous memory any of them held, its AnonHugePages at that sample, the
    largest AnonHugePages seen, and whether the kernel let that process have huge pages
    (THP_enabled in /proc/PID/status: 0 after prctl(PR_SET_THP_DISABLE))."""

    def __init__(self, root_pid, interval=SAMPLE_SECONDS, start=True):
        super().__init__(daemon=True)
        self.root_pid, self.interval = root_pid, interval
        self.done = threading.Event()
        self.samples, self.peak, self.huge_max, self.thp_enabled = 0, None, 0, None
        if start:
            self.start()

    def sample_once(self):
        for pid in descendants(self.root_pid):
            got = parse_smaps_rollup(_read("/proc/%d/smaps_rollup" % pid) or "")
            if got is None:
                continue
            self.samples += 1
            self.huge_max = max(self.huge_max, got["anon_huge_kib"])
            if self.peak is None or got["anon_kib"] >= self.peak["anon_kib"]:
                self.peak = got
                for line in (_read("/proc/%d/status" % pid) or "").splitlines():
                    if line.startswith("THP_enabled:"):
                        self.thp_enabled = int(line.split()[1])

    def run(self):
        while not self.done.is_set():
            self.sample_once()
            self.done.wait(self.interval)

    def stop(self):
        self.done.set()
        if self.is_alive():
            self.join()
        return self.figures()

    def figures(self):
        """The result fields of a run (empty when no sample was taken)."""
        if self.peak is None:
            return {}
        out = {"anon_peak_kib": self.peak["anon_kib"], "anon_huge_at_peak_kib": self.peak["anon_huge_kib"],
               "anon_huge_max_kib": self.huge_max, "smaps_samples": self.samples}
        if self.thp_enabled is not None:
            out["thp_enabled"] = self.thp_enabled
        return out


def coverage(result):
    """AnonHugePages / Anonymous at the peak, from a run's result fields, or None."""
    anon, huge = result.get("anon_peak_kib"), result.get("anon_huge_at_peak_kib")
    if not anon or huge is None:
        return None
    return huge / anon


def most_coverage(result):
    """The largest AnonHugePages seen, over Anonymous at the peak, or None: how much of
    the heap was in huge pages at most, where the peak comes before the huge pages (a
    heap that grows, then frees a table it rebuilt, before its ranges are collapsed)."""
    anon, huge = result.get("anon_peak_kib"), result.get("anon_huge_max_kib")
    if not anon or huge is None:
        return None
    return huge / anon


# ---- the programs ----------------------------------------------------------------------

@dataclass(frozen=True)
class BigScript(Script):
    watch = PeakSampler

    def argv(self, ctx, run_dir):
        size = ctx["size"]
        return list(self.interpreter) + [os.path.join(PROGRAMS_DIR, self.script), str(size["keys"]),
                                         str(size["lookups"]), str(SEED)]


def sqlite_lookup_script(rows, lookups):
    """The big_sqlite script: ROWS rows (id, a key k scattered over 32 bits by a
    multiplicative hash of id, a text of 8..40 bytes), an index on k, then LOOKUPS
    look-ups through that index at ids visited in a scattered order; every look-up hits.
    Generated in SQL (recursive CTEs), so the script is a few lines at any size."""
    return "\n".join([
        "CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER NOT NULL, v TEXT NOT NULL);",
        "BEGIN;",
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < %d) "
        "INSERT INTO t(id, k, v) SELECT i, (i * 2654435761) %% 4294967296, "
        "printf('%%.*c', 8 + i %% 33, char(97 + i %% 26)) FROM n;" % (rows - 1),
        "COMMIT;",
        "CREATE INDEX t_k ON t(k);",
        "SELECT count(*), sum(length(v)) FROM t;",
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < %d) "
        "SELECT count(*), sum(t.id), sum(length(t.v)) FROM n JOIN t ON t.k = "
        "((n.i * 40503 + 17) %% %d) * 2654435761 %% 4294967296;" % (lookups, rows),
    ]) + "\n"


@dataclass(frozen=True)
class BigSqlite(Sqlite):
    watch = PeakSampler

    def prepare(self, size, input_dir):
        path = os.path.join(input_dir, "big-sqlite-%d-%d.sql" % (size["rows"], size["lookups"]))
        programs._write_once(path, sqlite_lookup_script(size["rows"], size["lookups"]).encode())
        return {"size": size, "script": path}


@dataclass(frozen=True)
class PointerChase(Program):
    """bench_pointer_chase from the workloads' directory (ctx["bin_dir"], which the
    suite sets)."""

    watch = PeakSampler

    def argv(self, ctx, run_dir):
        size = ctx["size"]
        binary = os.path.join(ctx["bin_dir"], "bench_" + POINTER_CHASE)
        return [binary, str(size["blocks"]), str(size["size"]), str(size["steps"]), str(SEED)]


@dataclass(frozen=True)
class BigRedis(Redis):
    """programs.Redis's run (the server through the helper on a free port of 127.0.0.1,
    SHUTDOWN NOSAVE at the end), sampled, with clients of its own: DEBUG POPULATE of
    KEYS keys of 64 bytes, redis-benchmark's SET, GET, INCR and LPUSH pipelined over KEYS
    random keys, then DBSIZE (at least KEYS) and a read-back of a sample of the
    populated keys (which redis-benchmark's key names never touch)."""

    tests: str = "set,get,incr,lpush"
    watch = PeakSampler

    def prepare(self, size, input_dir):
        keys = size["keys"]
        sample = [str(i * 7919 % keys) for i in range(40)]
        path = os.path.join(input_dir, "big-redis-%d.checks" % keys)
        programs._write_once(path, "".join("STRLEN key:%s\nGETRANGE key:%s 0 11\n" % (i, i) for i in sample).encode())
        return {"size": size, "checks": path}

    def server_argv(self, port, run_dir):
        return super().server_argv(port, run_dir) + ["--enable-debug-command", "local"]

    def populate_argv(self, size):
        return ["DEBUG", "POPULATE", str(size["keys"]), "key", "64"]

    def benchmark_argv(self, port, size):
        return ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-n", str(size["requests"]),
                "-r", str(size["keys"]), "-c", "8", "-P", "16", "-d", "64", "-t", self.tests, "--csv"]

    def command_line(self, env, prefix, ctx, run_dir):
        cli = "redis-cli -h 127.0.0.1 -p $PORT"
        lines = ["%s %s &" % (programs._prefix_line(env, self.env),
                              shlex.join(list(prefix) + self.server_argv("$PORT", run_dir))),
                 "%s %s" % (cli, shlex.join(self.populate_argv(ctx["size"]))),
                 shlex.join(self.benchmark_argv("$PORT", ctx["size"])),
                 "%s DBSIZE" % cli, "%s < %s" % (cli, ctx["checks"]), "%s SHUTDOWN NOSAVE" % cli]
        return "\n".join(lines).replace("'$PORT'", "$PORT").strip()

    def session(self, client, cli, ctx, port):
        size, error = ctx["size"], None
        res = client(cli + self.populate_argv(size))
        output = ["populate: " + res.stdout.strip()]
        if res.stdout.strip() != "OK":
            error = "DEBUG POPULATE failed: %s" % (res.stdout + res.stderr).strip()[-200:]
        res = client(self.benchmark_argv(port, size))
        tests = [l.split(",")[0].strip('"') for l in res.stdout.splitlines()[1:] if l.startswith('"')]
        if (res.returncode != 0 or len(tests) != len(self.tests.split(","))) and error is None:
            error = "redis-benchmark exited %d after %s: %s" % (res.returncode, tests, res.stderr.strip()[-200:])
        output.append("benchmark " + ";".join(tests))
        dbsize = client(cli + ["DBSIZE"]).stdout.strip()
        output.append("dbsize >= %d: %s" % (size["keys"], dbsize.isdigit() and int(dbsize) >= size["keys"]))
        res = client(cli, ctx["checks"])
        if res.returncode != 0 and error is None:
            error = "redis-cli read-back exited %d" % res.returncode
        output.append(res.stdout)
        return output, error


PY_ENV = dict(LC, PYTHONMALLOC="malloc", PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1")
PERL_ENV = dict(LC, PERL_HASH_SEED="0", PERL_PERTURB_KEYS="0")

# Sizes: full is issue 46's (>= 2M keys or rows, >= 200 MiB of blocks); quick about a
# fifteenth of it (heaps of 20-60 MiB, still far past the TLB's reach with 4 KiB pages),
# for `make bench`; smoke tiny, for the harness's tests.
PROGRAMS = [
    BigRedis("big_redis", "redis-server, redis-tools", ("redis-server", "redis-cli", "redis-benchmark"),
             "redis-server holding KEYS keys of 64 B: DEBUG POPULATE, then SET/GET/INCR/LPUSH pipelined "
             "(-P 16, 8 clients) over KEYS random keys; the server's CPU time",
             {"smoke": {"keys": 2000, "requests": 2000}, "quick": {"keys": 200000, "requests": 200000},
              "full": {"keys": 2000000, "requests": 2000000}},
             env=LC, glibc_preloads_libc=True),
    BigSqlite("big_sqlite", "sqlite3", ("sqlite3",),
              "sqlite3 :memory: with ROWS rows and an index on a scattered key, then LOOKUPS random "
              "look-ups through the index",
              {"smoke": {"rows": 2000, "lookups": 4000}, "quick": {"rows": 150000, "lookups": 200000},
               "full": {"rows": 2000000, "lookups": 3000000}}, env=LC),
    BigScript("big_python", "python3", ("/usr/bin/python3",),
              "python3 (PYTHONMALLOC=malloc): a dict of KEYS string keys, LOOKUPS random look-ups",
              {"smoke": {"keys": 2000, "lookups": 4000}, "quick": {"keys": 200000, "lookups": 400000},
               "full": {"keys": 3000000, "lookups": 6000000}},
              env=PY_ENV, interpreter=("/usr/bin/python3", "-S"), script="bighash.py"),
    BigScript("big_perl", "perl", ("perl",), "perl: a hash of KEYS string keys, LOOKUPS random look-ups",
              {"smoke": {"keys": 2000, "lookups": 4000}, "quick": {"keys": 200000, "lookups": 400000},
               "full": {"keys": 3000000, "lookups": 6000000}},
              env=PERL_ENV, interpreter=("perl",), script="bighash.pl"),
    BigScript("big_lua", "lua5.4", ("lua5.4",), "lua5.4: a table of KEYS string keys, LOOKUPS random look-ups",
              {"smoke": {"keys": 2000, "lookups": 4000}, "quick": {"keys": 200000, "lookups": 400000},
               "full": {"keys": 3000000, "lookups": 6000000}},
              env=LC, interpreter=("lua5.4",), script="bighash.lua"),
    PointerChase("big_chase", "(bench workload)", (),
                 "bench_pointer_chase: BLOCKS blocks of SIZE bytes linked in random order, chased STEPS steps",
                 {"smoke": {"blocks": 20000, "size": 48, "steps": 100000},
                  "quick": {"blocks": 800000, "size": 48, "steps": 4000000},
                  "full": {"blocks": 4400000, "size": 48, "steps": 40000000}}),
]


def names():
    return [p.name for p in PROGRAMS]


def selected(only=None):
    """The large-heap programs matching the --only filter (names or name prefixes)."""
    return [p for p in PROGRAMS if not only or any(p.name == o or p.name.startswith(o) for o in only)]


def describe(progs, mode, allocs):
    """meta["bigheap"]: the programs and their sizes, the allocators, the THP mode."""
    return {"programs": [{"name": p.name, "description": p.description, "package": p.package,
                          "version": programs.package_version(p) if p.executables else "",
                          "size": p.params(p.sizes[mode])} for p in progs],
            "allocators": [a.name for a in allocs], "thp": thp_mode(), "sample_seconds": SAMPLE_SECONDS}


def run_all(suite, progs, allocs, log):
    """Every large-heap program under every allocator of allocs, interleaved (the
    suite's run_program, with runs of kind KIND)."""
    for prog in progs:
        log("large-heap program %s (%s)" % (prog.name, prog.params(prog.sizes[suite.args.mode])))
        suite.run_program(prog, KIND, allocs)


def progress_note(result):
    """The huge-page figures of a run for the progress line ('' without a sample)."""
    cov = coverage(result)
    if cov is None:
        return ""
    return " huge %3.0f%% of %.0f MiB%s" % (100 * cov, result["anon_peak_kib"] / 1024,
                                            "" if result.get("thp_enabled", 1) else " (THP off for the process)")
