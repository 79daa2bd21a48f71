#!/usr/bin/env python3
"""Where hakmem's shared locks saturate as cores grow: counts from an instrumented build.

Runs multi-threaded workloads under a library built with -DHAKMEM_LOCKSTAT=ON (which
prints per lock class: acquisitions, contended acquisitions, time held) and
HAKMEM_STATS=json (remote pushes, heaps made), at oversubscribed thread counts, and
prints per million operations how often each lock is taken and how long it is held.

The model (docs/scaling.md): a global lock taken a times per operation and held h
seconds each, in a program doing X operations per second per core, is busy
U(N) = N * X * a * h of the time on N cores; it saturates (queues grow without bound)
near N* = 1 / (X * a * h). a comes from the run at N threads (oversubscribed here: the
rates per operation are what such a run gives, not times). h and X come from runs at 2
threads (this machine's cores; the median of --hold-rounds runs): h is the mean of the
holds under 2^20 cycles, which leaves out a holder preempted for a time slice on a busy
machine but also a hold across a slow syscall; U_all uses every hold instead (an upper
bound here). Heap locks are per heap: the owner and the purge thread meet there, so
they are listed, not modelled as one lock.

usage: tools/scaling_model.py --lib build/lockstat/libhakmem.so [--bin build/release/bench]
                              [--threads 1,2,16,64,256] [--only larson,...]
"""
import argparse
import json
import statistics
import os
import re
import subprocess
import sys

LOCKS = ("region_lock", "heaps_lock", "heap->lock")

# name -> argv builder (threads) -> list of arguments; sizes keep the total work constant.
WORKLOADS = {
    "larson": ("bench_larson", lambda t: [0.3, 8, 1000, 1000, 100, 4141, t]),
    "producer_consumer": ("bench_producer_consumer", lambda t: [max(1, 2_000_000 // t), 64, 1, t]),
    "thread_churn": ("bench_thread_churn", lambda t: [max(1, 1000 // t), 1000, 1, t]),
    "large": ("bench_large", lambda t: [400, max(1, 16 // t), 1, 65536, 33554432, t]),
}

_LS = re.compile(r"^lockstat (\S+) acquired=(\d+) contended=(\d+) held_ns=(\d+) wait_ns=(\d+) "
                 r"p50_held_ns=(\d+) p90_held_ns=(\d+) trim_held_ns=(\d+)", re.M)
_SITE = re.compile(r"^lockstat_site (\S+) (\S+) (.*) acquired=(\d+) held_ns=(\d+)", re.M)


def run_one(binary, args, lib):
    env = dict(os.environ, LD_PRELOAD=lib, HAKMEM_STATS="json")
    p = subprocess.run([binary] + [str(a) for a in args], env=env, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError("%s %s: exit %d: %s" % (binary, args, p.returncode, p.stderr[-300:]))
    res = {}
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            res = dict(tok.split("=", 1) for tok in line.split()[1:] if "=" in tok)
    locks = {m[0]: dict(acq=int(m[1]), cont=int(m[2]), held=int(m[3]), wait=int(m[4]), p50=int(m[5]),
                        trim=int(m[7]))
             for m in _LS.findall(p.stderr)}
    sites = [dict(cls=m[0], site=os.path.basename(m[1]), acq=int(m[3]), held=int(m[4]))
             for m in _SITE.findall(p.stderr)]
    err = p.stderr
    stats = json.loads(err[err.index("{"):err.rindex("}") + 1])
    return dict(ops=int(res["ops"]), ops_per_sec=float(res["ops_per_sec"]), locks=locks, sites=sites,
                remote_pushes=stats["remote"]["pushes"], heaps=stats["heaps"]["created"],
                purge_passes=stats["purge"]["passes"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", required=True, help="libhakmem.so built with -DHAKMEM_LOCKSTAT=ON")
    ap.add_argument("--bin", default="build/release/bench")
    ap.add_argument("--threads", default="1,2,16,64,256")
    ap.add_argument("--only", help="comma-separated workloads (default: all of %s)" % ",".join(WORKLOADS))
    ap.add_argument("--cores", type=int, default=64,
                    help="the core count to model (default 64); its rates come from the run at that many threads")
    ap.add_argument("--hold-rounds", type=int, default=3, help="runs at 2 threads for h and X (default 3)")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    names = args.only.split(",") if args.only else list(WORKLOADS)
    print("%-17s %4s %9s %8s | %s | %9s %6s" % (
        "workload", "thr", "Mops/s", "Mops", " | ".join("%-11s acq/Mop cont%% p50_ns trim_ns" % l for l in LOCKS),
        "push/Mop", "heaps"))
    for name in names:
        binary, argv = WORKLOADS[name]
        runs = {}
        for t in threads:
            r = runs[t] = run_one(os.path.join(args.bin, binary), argv(t), args.lib)
            r["threads"] = t
            mops = r["ops"] / 1e6
            cells = []
            for l in LOCKS:
                k = r["locks"].get(l, dict(acq=0, cont=0, held=0))
                cells.append("%-11s %7.1f %5.1f %6d %7d" % (
                    "", k["acq"] / mops, 100.0 * k["cont"] / max(1, k["acq"] + k["cont"]),
                    k.get("p50", 0), k.get("trim", 0)))
            print("%-17s %4d %9.3f %8.2f | %s | %9.1f %6d" % (name, t, r["ops_per_sec"] / 1e6, mops,
                                                           " | ".join(cells), r["remote_pushes"] / mops,
                                                           r["heaps"]))
            sys.stdout.flush()
        # h and X: the median of --hold-rounds runs at 2 threads (as many as this machine's cores)
        holds = [runs[2]] if 2 in runs else []
        holds += [run_one(os.path.join(args.bin, binary), argv(2), args.lib) for _ in range(args.hold_rounds - len(holds))]
        top = runs[args.cores] if args.cores in runs else runs[max(threads)]
        x = statistics.median(r["ops_per_sec"] for r in holds) / 2
        for l in ("region_lock", "heaps_lock"):
            a = top["locks"].get(l, {}).get("acq", 0) / top["ops"]
            h = statistics.median(r["locks"].get(l, {}).get("trim", 0) for r in holds) * 1e-9
            per_core = x * a * h
            # every hold: the lock's total time per operation at 2 threads
            all_per_op = statistics.median(r["locks"].get(l, {}).get("held", 0) / r["ops"] for r in holds) * 1e-9
            print("  model %-17s %-11s X=%.3g ops/s/core a(%d thr)=%.3g/op h=%.0f ns: U(%d)=%.3f N*=%s;"
                  " every hold %.0f ns/op: U_all(%d)=%.3f" % (
                      name, l, x, top["threads"], a, h * 1e9, args.cores, args.cores * per_core,
                      "%.0f" % (1 / per_core) if per_core > 0 else "inf", all_per_op * 1e9, args.cores,
                      args.cores * x * all_per_op))
        for sdict in sorted(top["sites"], key=lambda d: -d["acq"])[:6]:
            print("    %d thr: %-11s %-28s %9.1f acq/Mop %8.0f ns mean" % (
                top["threads"], sdict["cls"], sdict["site"], sdict["acq"] / (top["ops"] / 1e6),
                sdict["held"] / max(1, sdict["acq"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
