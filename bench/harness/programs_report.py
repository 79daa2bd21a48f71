"""The real programs' part of the report, from the results file alone.

Tables of CPU time, peak RSS and minor page faults per program and allocator, with ratios
taken per round (allocator A's run over allocator B's run of the same round, which shared
the machine's state) and then the median over the rounds, as BENCH.md asks; hakmem
against the anchor it compares worst with; and the cachegrind counts of the shortened
inputs. Runs of kind "program" and "cachegrind" (see results.py).
"""

from collections import OrderedDict

import stats
from tables import fmt_cv, fmt_num, fmt_ratio, md_table

BASELINES = ("mimalloc", "glibc")
ANCHORS = ("glibc", "mimalloc", "jemalloc", "tcmalloc")
CPU = lambda r: r.get("cpu_seconds")  # noqa: E731
RSS = lambda r: r.get("peak_rss_kib")  # noqa: E731
FAULTS = lambda r: r.get("minor_faults")  # noqa: E731
SYS = lambda r: r.get("sys_seconds")  # noqa: E731
# (title, value, unit divisor, what a lower ratio means, chart name)
METRICS = [("CPU time (s, user + system)", CPU, 1.0, "faster", "cpu"),
           ("Peak RSS (MiB)", RSS, 1024.0, "leaner", "peak_rss"),
           ("Minor page faults", FAULTS, None, "fewer", "minor_faults")]  # None: a count
CACHEGRIND = [("I refs", "instructions"), ("D1 misses", "d1_misses"), ("LL misses", "ll_misses")]


# ---- analysis --------------------------------------------------------------------------

def group(records, kind="program"):
    """{program: {allocator: [counted, correct runs]}} of the runs of kind, in the order
    run. A program whose run with nothing preloaded failed (allocator "none") has no
    entry for "none"."""
    groups = OrderedDict()
    for r in records:
        if r["kind"] != kind or r["allocator"] == "none":
            continue
        runs = groups.setdefault(r["workload"], OrderedDict()).setdefault(r["allocator"], [])
        if not r["warmup"] and r["status"] == "ok":
            runs.append(r)
    return groups


def per_round(runs, value):
    return {r["round"]: value(r) for r in runs if value(r) is not None}


def round_ratios(by_alloc, alloc, base, value):
    """alloc's value over base's in every counted round where both ran correctly."""
    return stats.paired_ratios(per_round(by_alloc.get(alloc, []), value), per_round(by_alloc.get(base, []), value))


def ratio_table(groups, allocators, base, value):
    """{program: {allocator: median of its per-round ratios to base}} (None when no round
    has both)."""
    return OrderedDict((prog, {a: stats.median(round_ratios(by_alloc, a, base, value)) for a in allocators})
                       for prog, by_alloc in groups.items())


def summary(runs, value):
    xs = [value(r) for r in runs if value(r) is not None]
    if not xs:
        return None
    return {"n": len(xs), "median": stats.median(xs), "min": min(xs), "max": max(xs), "cv": stats.cv(xs)}


def against_anchors(by_alloc, value, mine="hakmem"):
    """(median per-round ratio of mine to the anchor, the anchor, rounds where mine was at
    or below it, rounds with both) for the anchor that gives the largest median ratio:
    the one mine compares worst with (lower values are better). None without one."""
    best = None
    for anchor in ANCHORS:
        ratios = round_ratios(by_alloc, mine, anchor, value)
        if not ratios:
            continue
        med = stats.median(ratios)
        if best is None or med > best[0]:
            best = (med, anchor, sum(1 for q in ratios if q <= 1.0), len(ratios))
    return best


def cachegrind_runs(records):
    """{program: {allocator: record}} of the cachegrind pass (every status)."""
    table = OrderedDict()
    for r in records:
        if r["kind"] == "cachegrind" and r["allocator"] != "none":
            table.setdefault(r["workload"], OrderedDict())[r["allocator"]] = r
    return table


def cachegrind_ratios(table, base, field):
    """{program: {allocator: field / base's field}} from correct runs only."""
    out = OrderedDict()
    for prog, by_alloc in table.items():
        ref = by_alloc.get(base)
        ref_value = ref[field] if ref is not None and ref["status"] == "ok" else None
        out[prog] = {a: stats.ratio(r[field] if r["status"] == "ok" else None, ref_value)
                     for a, r in by_alloc.items()}
    return out


# ---- the report ------------------------------------------------------------------------

def _value_table(groups, allocators, value, scale):
    def fmt(v):
        return "%d" % round(v) if scale is None else fmt_num(v / scale)

    rows = []
    for prog, by_alloc in groups.items():
        cells = []
        for a in allocators:
            s = summary(by_alloc.get(a, []), value)
            cells.append("n/a" if s is None else "%s%s [%s–%s]" % (fmt(s["median"]), fmt_cv(s), fmt(s["min"]),
                                                                  fmt(s["max"])))
        rows.append([prog] + cells)
    return md_table(["program"] + list(allocators), rows)


def _ratio_table(table, allocators):
    rows = [[prog] + [fmt_ratio(row.get(a)) for a in allocators] for prog, row in table.items()]
    gm = {a: stats.geomean(row.get(a) for row in table.values()) for a in allocators}
    rows.append(["**geometric mean**"] + ["**%s**" % fmt_ratio(gm[a]) for a in allocators])
    return md_table(["program"] + list(allocators), rows)


def render(meta, records, allocators):
    """The "Real programs" section as a list of Markdown lines ([] without program runs)."""
    groups = group(records)
    cg = cachegrind_runs(records)
    if not groups and not cg:
        return []
    rounds = meta.get("program_rounds", meta.get("rounds", "?"))
    out = ["## Real programs", "",
           "Programs from Debian packages under `LD_PRELOAD`, the allocators interleaved in every round "
           "(%s warm-up and %s counted round(s)). Every run's output is compared with the same program's "
           "output on the same input with nothing preloaded: a different output is a failure, not a slow "
           "row. CPU time is user + system time of the measured process and of every process it waited "
           "for, peak RSS the largest ru_maxrss among them, both from wait4 (the programs start from a "
           "1 MiB helper, so the harness's own memory is not counted). Ratios are taken per round "
           "(A over B in the same round), then the median over the rounds; the last row of a ratio "
           "table is the geometric mean over the programs." % (meta.get("warmup", "?"), rounds), ""]
    if meta.get("mode") in ("quick", "smoke"):
        out += ["In %s mode the inputs are small and the rounds few: these figures are indicative; "
                "`--full` gives the ones to quote." % meta["mode"], ""]
    described = meta.get("programs", [])
    if described:
        out += [md_table(["program", "what runs", "size", "packages"],
                         [[p["name"], p["description"], p["size"], p.get("version") or p["package"]]
                          for p in described]), ""]
    for p in described:
        if p.get("glibc_preloads_libc"):
            out.append("- %s is linked with libjemalloc.so.2 in Debian: with nothing preloaded its malloc is "
                       "jemalloc's. Its glibc row therefore preloads libc.so.6, which puts glibc's malloc first "
                       "in the symbol search order; its reference run preloads nothing." % p["name"])
    for s in meta.get("skipped_programs", []):
        out.append("- **%s skipped**: %s" % (s["name"], s["note"]))
    if described or meta.get("skipped_programs"):
        out.append("")

    for title, value, scale, better, _ in METRICS:
        if not any(summary(runs, value) for by_alloc in groups.values() for runs in by_alloc.values()):
            continue
        out += ["### %s" % title, "", "Median [min–max] ±CV over the counted rounds.", "",
                _value_table(groups, allocators, value, scale), ""]
        for base in BASELINES:
            if base in allocators:
                out += ["#### %s relative to %s (per-round ratios, median; lower is %s)"
                        % (title.split(" (")[0], base, better), "",
                        _ratio_table(ratio_table(groups, allocators, base, value), allocators), ""]
        if value is CPU:
            rows = []
            for prog, by_alloc in groups.items():
                cells = []
                for a in allocators:
                    cpu, sys_ = summary(by_alloc.get(a, []), CPU), summary(by_alloc.get(a, []), SYS)
                    cells.append("n/a" if not cpu or not sys_ else "%s (%.0f%%)" % (
                        fmt_num(sys_["median"]), 100 * sys_["median"] / cpu["median"]))
                rows.append([prog] + cells)
            out += ["#### of which system time (s, median, and its share of the CPU time)", "",
                    md_table(["program"] + list(allocators), rows), ""]

    if "hakmem" in allocators and groups:
        out += ["### hakmem against the anchors", "",
                "hakmem's per-round ratio to each of %s, median over the rounds; the anchor shown is the one "
                "hakmem compares worst with. \"rounds\" counts the rounds in which hakmem was at or below that "
                "anchor (as fast, as lean)." % ", ".join(a for a in ANCHORS if a in allocators), ""]
        rows = []
        for prog, by_alloc in groups.items():
            cells = []
            for value in (CPU, RSS, FAULTS):
                best = against_anchors(by_alloc, value)
                cells += ["n/a", "n/a"] if best is None else ["%s (%s)" % (fmt_ratio(best[0]), best[1]),
                                                              "%d of %d" % (best[2], best[3])]
            rows.append([prog] + cells)
        out += [md_table(["program", "CPU time", "rounds", "peak RSS", "rounds", "minor faults", "rounds"], rows), ""]

    if cg:
        geometry = " ".join(meta.get("cachegrind_options", []))
        out += ["### Cachegrind: the shortened inputs, one run per allocator", "",
                "`valgrind --tool=cachegrind --cache-sim=yes %s` (git with `--trace-children=yes`, its "
                "git processes' counts summed; the exact commands are at the end); deterministic. D1 misses are D1mr + D1mw, LL misses ILmr + DLmr + "
                "DLmw. A run that fails under valgrind is shown and listed, and does not fail the harness."
                % geometry, ""]
        sizes = [(p["name"], p.get("cachegrind_size")) for p in described if p.get("cachegrind_size")]
        if sizes:
            out += ["Sizes: " + "; ".join("%s %s" % s for s in sizes) + ".", ""]
        for title, field in CACHEGRIND:
            rows = []
            for prog, by_alloc in cg.items():
                rows.append([prog] + [("n/a" if by_alloc.get(a) is None else
                                       fmt_num(by_alloc[a][field], 4) if by_alloc[a]["status"] == "ok" else
                                       by_alloc[a]["status"]) for a in allocators])
            out += ["#### %s" % title, "", md_table(["program"] + list(allocators), rows), ""]
        for base in BASELINES:
            if base not in allocators:
                continue
            tables = [cachegrind_ratios(cg, base, field) for _, field in CACHEGRIND]
            rows = [[prog] + [" / ".join(fmt_ratio(t[prog].get(a)) for t in tables) for a in allocators]
                    for prog in cg]
            gms = [{a: stats.geomean(row.get(a) for row in t.values()) for a in allocators} for t in tables]
            rows.append(["**geometric mean**"] + ["**%s**" % " / ".join(fmt_ratio(g[a]) for g in gms)
                                                  for a in allocators])
            out += ["#### Relative to %s: I refs / D1 misses / LL misses (lower is better)" % base, "",
                    md_table(["program"] + list(allocators), rows), ""]
    return out


def chart_specs(records, allocators):
    """Ratio charts of the programs: CPU time and peak RSS against mimalloc and glibc,
    minor faults and cachegrind's instructions and D1 misses against glibc."""
    groups, cg = group(records), cachegrind_runs(records)
    specs = []

    def spec(name, title, ylabel, table):
        progs = list(table)
        if not any(v is not None for row in table.values() for v in row.values()):
            return
        specs.append({"name": name, "title": title, "ylabel": ylabel, "log": True, "baseline": 1.0,
                      "groups": progs,
                      "series": [{"label": a, "values": [table[p].get(a) for p in progs]} for a in allocators]})

    if groups:
        for title, value, _, better, short in METRICS:
            for base in (BASELINES if value is not FAULTS else ("glibc",)):
                if base in allocators:
                    spec("programs_%s_vs_%s" % (short, base),
                         "Real programs: %s relative to %s" % (title.split(" (")[0], base),
                         "median of per-round ratios (lower is %s)" % better,
                         ratio_table(groups, allocators, base, value))
    if cg and "glibc" in allocators:
        for title, field in CACHEGRIND[:2]:
            spec("programs_cachegrind_%s_vs_glibc" % field, "Real programs under cachegrind: %s relative to glibc"
                 % title, "ratio (lower is better)", cachegrind_ratios(cg, "glibc", field))
    return specs
