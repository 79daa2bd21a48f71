#!/usr/bin/env python3
"""Rust workloads under four global allocators (issue 49): hakmem, mimalloc, jemalloc, system.

bench/rust/ is one cargo project whose global allocator is chosen by a cargo feature
(alloc-hakmem: the crate in bindings/rust/hakmem; alloc-mimalloc: the mimalloc crate;
alloc-jemalloc: tikv-jemallocator; alloc-system: std::alloc::System, glibc's malloc). This
script builds the four binaries (`cargo build --release --features alloc-X`, each copied out
of target/), runs each workload with every allocator in turn, A B C D A B C D ..., one
warm-up round and ROUNDS counted ones, and reads each child's CPU time (user + sys) and peak
RSS from wait4. A run is correct when it exits 0 and prints exactly what the system
allocator's build printed. It writes rust.md (median CPU s, per-round ratio to system,
median peak RSS MiB, ratio) and rust.csv under --out.

If cargo is missing or a build fails, the report says so and the script exits 0 (BENCH.md:
a harness that cannot find an allocator skips it and says so).
"""

import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROJECT = os.path.join(REPO, "bench", "rust")
ALLOCATORS = ("hakmem", "mimalloc", "jemalloc", "system")
BASELINE = "system"
# name -> (full argv tail, quick argv tail)
WORKLOADS = {
    "json": (["json", "100000", "4"], ["json", "20000", "2"]),
    "maps": (["maps", "500000", "4"], ["maps", "100000", "4"]),
}


def find_cargo():
    found = shutil.which("cargo")
    if found:
        return found
    home = os.path.expanduser("~/.cargo/bin/cargo")
    return home if os.access(home, os.X_OK) else None


def build(cargo, bin_dir, log):
    """Build one binary per allocator; returns {name: path} of those that built."""
    built = {}
    for name in ALLOCATORS:
        cmd = [cargo, "build", "--release", "--quiet", "--features", "alloc-" + name]
        proc = subprocess.run(cmd, cwd=PROJECT, capture_output=True, text=True)
        if proc.returncode != 0:
            log.append(f"{name}: `{' '.join(cmd[1:])}` failed (exit {proc.returncode}); "
                       f"skipped: {proc.stderr.strip().splitlines()[-1:]}")
            continue
        dest = os.path.join(bin_dir, "rust-bench-" + name)
        shutil.copy2(os.path.join(PROJECT, "target", "release", "hakmem-rust-bench"), dest)
        which = subprocess.run([dest, "which"], capture_output=True, text=True).stdout.strip()
        if which != name:
            log.append(f"{name}: the binary says it uses {which!r}; skipped")
            continue
        built[name] = dest
    return built




def run_child(path, args):
    """Run one child; return (CPU seconds, peak RSS KiB, stdout). The child is reaped
    here with wait4, not by subprocess, so that its rusage reaches us."""
    proc = subprocess.Popen([path] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.stdout.read(), proc.stderr.read()
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"exit {proc.returncode}: "
                           f"{err.decode(errors='replace').strip()[-300:]}")
    return ru.ru_utime + ru.ru_stime, ru.ru_maxrss, out.decode()


def markdown(rows, rounds, command, notes):
    lines = [f"Median of {rounds} interleaved rounds (after one warm-up); ratios are per-round "
             f"ratios to the `{BASELINE}` allocator, then the median.", "",
             f"Command: `{command}`", "",
             "| workload | allocator | CPU s (median) | CPU min-max | ratio to system | "
             "peak RSS MiB | RSS ratio to system |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['workload']} | {r['allocator']} | {r['cpu']:.3f} | "
                     f"{r['cpu_min']:.2f}-{r['cpu_max']:.2f} | {r['cpu_ratio']:.3f} | "
                     f"{r['rss'] / 1024:.1f} | {r['rss_ratio']:.3f} |")
    if notes:
        lines += ["", "Notes:"] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(REPO, "build", "bench-results", "rust"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="smaller inputs")
    opts = ap.parse_args()
    os.makedirs(opts.out, exist_ok=True)
    report = os.path.join(opts.out, "rust.md")
    command = "python3 bench/harness/rust_bench.py " + " ".join(sys.argv[1:])
    notes = []
    cargo = find_cargo()
    if cargo is None:
        notes.append("cargo not found: the Rust benchmark was skipped")
    bin_dir = os.path.join(opts.out, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    built = build(cargo, bin_dir, notes) if cargo else {}
    if BASELINE not in built:
        if cargo:
            notes.append(f"the {BASELINE} build is missing: nothing to compare with; skipped")
        with open(report, "w") as f:
            f.write("# Rust workloads\n\n" + "\n".join(f"- {n}" for n in notes) + "\n")
        print("\n".join(notes))
        return 0
    order = [a for a in ALLOCATORS if a in built]
    samples = {}  # (workload, allocator) -> list of (cpu, rss)
    for wl, (full, quick) in WORKLOADS.items():
        args = quick if opts.quick else full
        expected = None
        for rnd in range(opts.rounds + 1):
            for alloc in order:
                cpu, rss, out = run_child(built[alloc], args)
                if expected is None:
                    expected = out
                if out != expected:
                    raise SystemExit(f"{wl} {alloc}: wrong answer {out!r}, expected {expected!r}")
                if rnd > 0:
                    samples.setdefault((wl, alloc), []).append((cpu, rss))
                print(f"{wl} round {rnd} {alloc}: cpu {cpu:.3f} s, rss {rss} KiB", flush=True)
        notes.append(f"{wl}: `{' '.join(args)}` printed `{expected.strip()}` with every allocator")
    rows = []
    for wl in WORKLOADS:
        base = samples[(wl, BASELINE)]
        for alloc in order:
            s = samples[(wl, alloc)]
            cpus = [c for c, _ in s]
            rows.append({"workload": wl, "allocator": alloc, "cpu": statistics.median(cpus),
                         "cpu_min": min(cpus), "cpu_max": max(cpus),
                         "cpu_ratio": statistics.median(a[0] / b[0] for a, b in zip(s, base)),
                         "rss": statistics.median(r for _, r in s),
                         "rss_ratio": statistics.median(a[1] / b[1] for a, b in zip(s, base))})
    text = markdown(rows, opts.rounds, command, notes)
    with open(report, "w") as f:
        f.write("# Rust workloads\n\n" + text)
    with open(os.path.join(opts.out, "rust.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
