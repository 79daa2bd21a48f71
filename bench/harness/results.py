"""The results file: one record per run, written as results.json and results.csv.

A record is a dict with exactly the keys of FIELDS. results.json also carries `meta` (the
machine, the allocators found and skipped, the mode, the harness command); the CSV holds
the runs alone. Both read back to the same records, so report.py can work from either.

Fields:
  kind          "timed" (a workload run natively), "callgrind" (a fast-path loop under
                valgrind --tool=callgrind), "program" (a real program run natively) or
                "cachegrind" (a real program on its shortened input under valgrind
                --tool=cachegrind --cache-sim=yes)
  allocator     hakmem, glibc, mimalloc, jemalloc or tcmalloc
  workload      the benchmark's name, e.g. "larson", "fastpath_fixed_64" or "redis"
  params        the workload's arguments, space-separated
  threads       thread count given to the workload (1 for single-threaded ones)
  round         0-based; rounds below the warm-up count are warm-up rounds
  warmup        true for a warm-up round (not counted in the figures)
  wall_seconds  wall time of the whole process, measured by the harness
  throughput    the workload's own ops_per_sec (timed runs)
  peak_rss_kib  the process's peak resident set, KiB (VmHWM, from its RESULT line; for a
                program, wait4's ru_maxrss: the largest of its processes)
  instructions  callgrind's total instruction count (callgrind runs); cachegrind's I refs
                summed over the program's processes (cachegrind runs)
  iterations    loop iterations of a callgrind run (0 for the start-up run)
  exit_status   the process's exit code, or minus the signal number that killed it
  status        ok, failed (non-zero exit or no RESULT line), crashed (signal) or timeout
  message       for a run that is not ok: why (the workload's FAIL line, a signal name...)
  command       the exact command line, LD_PRELOAD included
  result        the key=value pairs of the workload's RESULT line; for a program the
                output's sha256 and line count and the other rusage counts; for cachegrind
                every count of its summary
  cpu_seconds   user + system CPU time of a program run (wait4's, with its waited-for
                descendants); for a cachegrind run, valgrind's
  user_seconds, sys_seconds   the two parts of cpu_seconds
  minor_faults  minor page faults: of a program run (ru_minflt), or of a workload (its
                RESULT line's minor_faults, getrusage RUSAGE_SELF)
  d1_misses     cachegrind: D1 misses, reads + writes (D1mr + D1mw)
  ll_misses     cachegrind: last-level misses, instructions and data (ILmr + DLmr + DLmw)

Files written before a field existed read back with that field empty.
"""

import csv
import json
import os

FIELDS = [
    "kind", "allocator", "workload", "params", "threads", "round", "warmup",
    "wall_seconds", "throughput", "peak_rss_kib", "instructions", "iterations",
    "exit_status", "status", "message", "command", "result",
    "cpu_seconds", "user_seconds", "sys_seconds", "minor_faults", "d1_misses", "ll_misses",
]

INT_FIELDS = {"threads", "round", "peak_rss_kib", "instructions", "iterations", "exit_status", "minor_faults",
              "d1_misses", "ll_misses"}
FLOAT_FIELDS = {"wall_seconds", "throughput", "cpu_seconds", "user_seconds", "sys_seconds"}
BOOL_FIELDS = {"warmup"}


def make_record(**values):
    """A record with every field present; unknown names are a programming error."""
    unknown = set(values) - set(FIELDS)
    if unknown:
        raise KeyError("unknown result fields: %s" % ", ".join(sorted(unknown)))
    record = {name: None for name in FIELDS}
    record["result"] = {}
    record.update(values)
    return record


def parse_value(text):
    """A RESULT value as int, float or str, whichever reads it exactly."""
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text


def parse_result_line(stdout):
    """The key=value pairs of the last 'RESULT ' line of a workload's output, or None."""
    found = None
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            found = line
    if found is None:
        return None
    pairs = {}
    for token in found.split()[1:]:
        key, sep, value = token.partition("=")
        if sep:
            pairs[key] = parse_value(value)
    return pairs


def format_result(pairs):
    return " ".join("%s=%s" % (k, v) for k, v in pairs.items())


def write_json(path, meta, records):
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"meta": meta, "runs": records}, f, indent=1)
        f.write("\n")


def write_meta(path, meta):
    """The run's details alone (machine, mode, rounds, allocators): kept beside results.csv
    in docs/benchmarks/, where results.json is not, so that a report regenerated from the
    CSV still says how the run was made."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
        f.write("\n")


def write_csv(path, records):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(FIELDS)
        for r in records:
            writer.writerow([_csv_cell(name, r.get(name)) for name in FIELDS])


def _csv_cell(name, value):
    if value is None:
        return ""
    if name == "result":
        return format_result(value)
    if name in BOOL_FIELDS:
        return "true" if value else "false"
    if name in FLOAT_FIELDS:
        return repr(float(value))
    return str(value)


def _from_csv_cell(name, text):
    if name == "result":
        return {k: parse_value(v) for k, _, v in (t.partition("=") for t in text.split())}
    if text == "":
        return None
    if name in INT_FIELDS:
        return int(text)
    if name in FLOAT_FIELDS:
        return float(text)
    if name in BOOL_FIELDS:
        return text == "true"
    return text


def complete(record):
    """The record with every field of FIELDS, the ones it lacks (a file written before
    they existed) empty; a key that is not a field is an error."""
    return make_record(**record)


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    if set(header) - set(FIELDS) or len(set(header)) != len(header):
        raise ValueError("%s: unexpected columns %s" % (path, header))
    return [complete({name: _from_csv_cell(name, cell) for name, cell in zip(header, row)}) for row in body]


def read_json(path):
    """(meta, records) from a results.json file."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return data.get("meta", {}), [complete(r) for r in data["runs"]]


def load(path):
    """(meta, records) from results.json, or from results.csv and the meta.json beside it
    (an empty meta where there is none)."""
    if str(path).endswith(".csv"):
        meta_path = os.path.join(os.path.dirname(os.path.abspath(path)), "meta.json")
        meta = {}
        if os.path.exists(meta_path):
            with open(meta_path, encoding="utf-8") as f:
                meta = json.load(f)
        return meta, read_csv(path)
    return read_json(path)
