"""The large-heap programs' part of the report, from the results file alone.

Tables of CPU time, peak RSS and huge-page coverage (AnonHugePages over anonymous memory
at the peak, bigheap.coverage) per program and allocator; hakmem's per-round CPU ratio to
every anchor, median and rounds won (BENCH.md, "Comparing with the best of several");
issue 46's targets, each judged against each anchor in turn; and the charts of CPU time,
peak RSS and coverage. Runs of kind "bigheap" (results.py).
"""

from collections import OrderedDict

import programs_report
import stats
from bigheap import DEFAULT_ANCHORS, HUGEPAGE_ANCHORS, KIND, coverage, most_coverage
from tables import fmt_num, fmt_ratio, md_table

CPU = lambda r: r.get("cpu_seconds")  # noqa: E731
RSS = lambda r: r.get("peak_rss_kib")  # noqa: E731
COVERAGE = lambda r: coverage(r.get("result") or {})  # noqa: E731
MOST_COVERAGE = lambda r: most_coverage(r.get("result") or {})  # noqa: E731
MINE, NOTHP = "hakmem", "hakmem-nothp"
# Issue 46, item 3: (what, anchors, the most hakmem's geometric mean of per-program
# medians of per-round CPU ratios may be)
CPU_TARGETS = (("each anchor at its defaults", DEFAULT_ANCHORS, 0.85),
               ("each anchor with its huge-page setting", HUGEPAGE_ANCHORS, 0.95))
ROW_LIMIT = 1.00  # no program's CPU ratio above this against any default anchor
COVERAGE_TARGET = 0.80
RSS_LIMIT = 1.03  # peak RSS against hakmem with HAKMEM_THP=0


# ---- analysis --------------------------------------------------------------------------

def group(records):
    """{program: {allocator: [counted, correct runs]}} of the large-heap rows."""
    return programs_report.group(records, KIND)


def allocator_order(meta, groups):
    names = list((meta.get("bigheap") or {}).get("allocators") or [])
    for by_alloc in groups.values():
        names += [a for a in by_alloc if a not in names]
    return names


def paired(by_alloc, alloc, base, value):
    """alloc's value over base's, round by round (only rounds where both ran correctly)."""
    def per_round(runs):
        return {r["round"]: value(r) for r in runs if value(r) is not None}
    return stats.paired_ratios(per_round(by_alloc.get(alloc, [])), per_round(by_alloc.get(base, [])))


def versus(groups, base, value=CPU, mine=MINE):
    """{program: (median per-round ratio of mine to base, rounds mine was below base,
    rounds with both)}, None for a program without a round of both."""
    out = OrderedDict()
    for prog, by_alloc in groups.items():
        q = paired(by_alloc, mine, base, value)
        out[prog] = (stats.median(q), sum(1 for x in q if x < 1.0), len(q)) if q else None
    return out


def geomean_of(table):
    return stats.geomean(v[0] for v in table.values() if v is not None)


def median_of(runs, value):
    return stats.median([value(r) for r in runs if value(r) is not None])


def judge(groups, allocators):
    """Issue 46's targets as [(target, figure, verdict: "met", "missed" or "not measured")]."""
    out = []
    if MINE not in allocators:
        return [("issue 46's targets", "hakmem did not run", "not measured")]
    for what, anchors, limit in CPU_TARGETS:
        for anchor in anchors:
            label = "CPU geometric mean <= %.2fx %s (%s)" % (limit, anchor, what)
            if anchor not in allocators:
                out.append((label, "%s did not run" % anchor, "not measured"))
                continue
            table = versus(groups, anchor)
            gm = geomean_of(table)
            won = sum(v[1] for v in table.values() if v)
            rounds = sum(v[2] for v in table.values() if v)
            out.append((label, "%s (rounds won %d of %d)" % (fmt_ratio(gm), won, rounds),
                        "not measured" if gm is None else "met" if gm <= limit else "missed"))
    worst = []
    for anchor in DEFAULT_ANCHORS:
        if anchor in allocators:
            worst += [(v[0], prog, anchor) for prog, v in versus(groups, anchor).items() if v]
    if worst:
        above = sorted(w for w in worst if w[0] > ROW_LIMIT)
        top = max(worst)
        out.append(("no program above %.2fx any default anchor" % ROW_LIMIT,
                    "worst %s (%s against %s)%s" % (fmt_ratio(top[0]), top[1], top[2],
                                                    "; %d above" % len(above) if above else ""),
                    "missed" if above else "met"))
    for prog, by_alloc in groups.items():
        cov = median_of(by_alloc.get(MINE, []), COVERAGE)
        out.append(("%s: huge-page coverage at the peak >= %.0f%%" % (prog, 100 * COVERAGE_TARGET),
                    "n/a" if cov is None else "%.0f%%" % (100 * cov),
                    "not measured" if cov is None else "met" if cov >= COVERAGE_TARGET else "missed"))
    if NOTHP in allocators:
        for prog, v in versus(groups, NOTHP, RSS).items():
            out.append(("%s: peak RSS <= %.2fx %s" % (prog, RSS_LIMIT, NOTHP),
                        "n/a" if v is None else "%s (%d of %d rounds below)" % (fmt_ratio(v[0]), v[1], v[2]),
                        "not measured" if v is None else "met" if v[0] <= RSS_LIMIT else "missed"))
    else:
        out.append(("peak RSS <= %.2fx %s" % (RSS_LIMIT, NOTHP), "%s did not run" % NOTHP, "not measured"))
    return out


def behind(groups, allocators):
    """[(median per-round CPU ratio, program, anchor)] where hakmem is slower than an
    anchor (default or huge-page), worst first, one line per program (its worst anchor)."""
    rows = []
    for prog in groups:
        worst = None
        for anchor in DEFAULT_ANCHORS + HUGEPAGE_ANCHORS:
            if anchor in allocators:
                v = versus({prog: groups[prog]}, anchor)[prog]
                if v and v[0] > 1.0 and (worst is None or v[0] > worst[0]):
                    worst = (v[0], prog, anchor)
        if worst:
            rows.append(worst)
    return sorted(rows, reverse=True)


def ratio_table(groups, allocators, base, value):
    """{program: {allocator: median per-round ratio to base}}."""
    return OrderedDict((prog, {a: stats.median(paired(by_alloc, a, base, value)) for a in allocators})
                       for prog, by_alloc in groups.items())


# ---- the report ------------------------------------------------------------------------

def _cells(groups, allocators, value, fmt):
    rows = []
    for prog, by_alloc in groups.items():
        cells = []
        for a in allocators:
            xs = [value(r) for r in by_alloc.get(a, []) if value(r) is not None]
            cells.append("n/a" if not xs else "%s [%s–%s]" % (fmt(stats.median(xs)), fmt(min(xs)), fmt(max(xs))))
        rows.append([prog] + cells)
    return md_table(["program"] + list(allocators), rows)


def render(meta, records):
    """The "Large-heap programs" section as Markdown lines ([] without such runs)."""
    groups = group(records)
    if not groups:
        return []
    allocators = allocator_order(meta, groups)
    info = meta.get("bigheap") or {}
    thp = info.get("thp") or {}
    out = ["## Large-heap programs", "",
           "Programs whose heaps are hundreds of MiB (BENCH.md, \"Large heaps\"), run like the real programs: "
           "interleaved, %s counted round(s) after %s warm-up, each output checked against the run with nothing "
           "preloaded, CPU time (user + system) and peak RSS from wait4. While each runs, the harness reads "
           "/proc/PID/smaps_rollup every %s s: *coverage* is AnonHugePages over Anonymous at the sample where "
           "anonymous memory peaked. Besides the anchors at their defaults, these rows run them with their own "
           "huge-page settings (glibc-hp: `GLIBC_TUNABLES=glibc.malloc.hugetlb=1`, mimalloc-hp: "
           "`MIMALLOC_LARGE_OS_PAGES=1`, jemalloc-hp: `MALLOC_CONF=thp:always`) and hakmem-nothp (the same "
           "library with `HAKMEM_THP=0`). System THP mode: enabled `%s`, defrag `%s`."
           % (meta.get("program_rounds", "?"), meta.get("warmup", "?"), info.get("sample_seconds", "?"),
              thp.get("enabled", "?"), thp.get("defrag", "?")), ""]
    if meta.get("mode") in ("quick", "smoke"):
        out += ["In %s mode the heaps are about a fifteenth of full mode's (20-60 MiB): indicative figures; `--full` gives "
                "issue 46's sizes." % meta["mode"], ""]
    described = info.get("programs") or []
    if described:
        out += [md_table(["program", "what runs", "size", "packages"],
                         [[p["name"], p["description"], p["size"], p.get("version") or p["package"]]
                          for p in described]), ""]
    disabled = sorted({(r["workload"], r["allocator"]) for by_alloc in groups.values() for runs in by_alloc.values()
                       for r in runs if (r.get("result") or {}).get("thp_enabled") == 0})
    out.append("- big_redis keeps Redis's own `disable-thp yes`: Redis calls prctl(PR_SET_THP_DISABLE) on itself "
               "when the THP mode is `always` (not in `madvise` or `never` mode), and the harness records the "
               "process's THP_enabled flag.")
    if disabled:
        out.append("- THP disabled by the process itself (THP_enabled 0): %s; their coverage is 0 by design."
                   % ", ".join("%s under %s" % d for d in disabled))
    out.append("")

    mib = lambda v: fmt_num(v / 1024.0)  # noqa: E731
    pct = lambda v: "%.0f%%" % (100 * v)  # noqa: E731
    out += ["### CPU time (s), median [min–max]", "", _cells(groups, allocators, CPU, fmt_num), "",
            "### Peak RSS (MiB), median [min–max]", "", _cells(groups, allocators, RSS, mib), "",
            "### Huge-page coverage at the peak, median [min–max]", "",
            _cells(groups, allocators, COVERAGE, pct), "",
            "### Huge pages at most (the largest AnonHugePages seen over Anonymous at the peak), median [min–max]",
            "", _cells(groups, allocators, MOST_COVERAGE, pct), ""]
    for title, value in (("CPU time", CPU), ("Peak RSS", RSS)):
        if "glibc" in allocators:
            table = ratio_table(groups, allocators, "glibc", value)
            rows = [[p] + [fmt_ratio(row.get(a)) for a in allocators] for p, row in table.items()]
            rows.append(["**geometric mean**"] + ["**%s**" % fmt_ratio(stats.geomean(row.get(a) for row in table.values()))
                                                  for a in allocators])
            out += ["#### %s relative to glibc (per-round ratios, median; lower is better)" % title, "",
                    md_table(["program"] + allocators, rows), ""]

    if MINE in allocators:
        anchors = [a for a in DEFAULT_ANCHORS + HUGEPAGE_ANCHORS + (NOTHP,) if a in allocators]
        tables = {a: versus(groups, a) for a in anchors}
        rows = [[p] + ["n/a" if tables[a][p] is None else "%s (%d/%d)" % (fmt_ratio(tables[a][p][0]), tables[a][p][1],
                                                                          tables[a][p][2]) for a in anchors]
                for p in groups]
        rows.append(["**geometric mean**"] + ["**%s**" % fmt_ratio(geomean_of(tables[a])) for a in anchors])
        out += ["### hakmem's CPU time against each anchor", "",
                "hakmem's per-round ratio to the anchor, median over the rounds, and (in brackets) the rounds "
                "hakmem was faster of the rounds both ran.", "", md_table(["program"] + anchors, rows), ""]
        out += ["### Issue 46's targets", "",
                md_table(["target", "measured", "verdict"],
                         [[t, m, "**%s**" % v if v != "met" else v] for t, m, v in judge(groups, allocators)]), ""]
    return out


def chart_specs(records, meta):
    """CPU time and peak RSS relative to glibc (medians of per-round ratios), and the
    huge-page coverage, of the large-heap programs."""
    groups = group(records)
    if not groups:
        return []
    allocators = allocator_order(meta, groups)
    progs = list(groups)
    specs = []
    if "glibc" in allocators:
        for name, title, value, better in (("cpu", "CPU time", CPU, "faster"), ("peak_rss", "Peak RSS", RSS, "leaner")):
            table = ratio_table(groups, allocators, "glibc", value)
            specs.append({"name": "bigheap_%s_vs_glibc" % name, "title": "Large-heap programs: %s relative to glibc"
                          % title, "ylabel": "median of per-round ratios (lower is %s)" % better, "log": True,
                          "baseline": 1.0, "groups": progs,
                          "series": [{"label": a, "values": [table[p].get(a) for p in progs]} for a in allocators]})
    unsampled = {a: {p: "no smaps_rollup sample: every run was shorter than the sampling interval"
                     for p in progs if groups[p].get(a) and median_of(groups[p][a], COVERAGE) is None}
                 for a in allocators}
    specs.append({"name": "bigheap_coverage", "why_missing": unsampled, "title": "Large-heap programs: huge-page coverage at the peak",
                  "ylabel": "AnonHugePages / anonymous memory (%)", "log": False, "baseline": 0.0, "groups": progs,
                  "series": [{"label": a, "values": [None if median_of(groups[p].get(a, []), COVERAGE) is None else
                                                     100 * median_of(groups[p].get(a, []), COVERAGE) for p in progs]}
                             for a in allocators]})
    return specs
