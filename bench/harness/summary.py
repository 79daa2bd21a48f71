"""The summary screen that opens report.md, from the results file alone.

One screen before the detail: hakmem's geometric means against each allocator (the
synthetic workloads, the real programs, the large-heap programs), the verdicts on the real
programs and on the large-heap targets, the rows where hakmem is behind and by how much,
and a note for every chart that lacks bars (an allocator that failed or did not run a
row), with the reason where the results say it.
"""

from collections import OrderedDict

import bigheap_report
import programs_report
import report
import stats
from tables import fmt_ratio, md_table

SYNTHETIC_RSS_LIMIT = 1.25  # the report's own target for a synthetic row (report.py)
PROGRAM_RSS_LIMIT = 1.10  # a real program more than 10% above the leanest anchor is listed
SHOWN = 12  # rows of each "behind" list shown; the rest are counted


def _geomean_rows(meta, records, allocators):
    """[(figure, {allocator: hakmem's geometric mean against it})] for every figure measured."""
    groups = report.group_timed(records)
    thr = report.figure(groups, lambda r: r["throughput"])
    rss = report.figure(groups, lambda r: r["peak_rss_kib"])
    cg = report.callgrind_per_pair(records)
    progs = programs_report.group(records)
    big = bigheap_report.group(records)
    rows = []

    def add(label, per_base):
        cells = {b: per_base(b) for b in allocators if b != "hakmem"}
        if any(v is not None for v in cells.values()):
            rows.append((label, cells))

    def of_fig(fig):
        return lambda b: stats.geomean(row.get("hakmem") for row in report.ratios(fig, b).values())

    add("synthetic throughput (higher is faster)", of_fig(thr))
    add("synthetic peak RSS (lower is leaner)", of_fig(rss))
    add("instructions per malloc+free pair", lambda b: stats.geomean(
        row.get("hakmem") for row in report.callgrind_ratios(cg, b).values()))
    for label, value in (("real programs CPU time", programs_report.CPU), ("real programs peak RSS", programs_report.RSS)):
        add(label, lambda b, v=value: stats.geomean(
            row.get("hakmem") for row in programs_report.ratio_table(progs, ["hakmem"], b, v).values()))
    for label, value in (("large-heap CPU time", bigheap_report.CPU), ("large-heap peak RSS", bigheap_report.RSS)):
        add(label, lambda b, v=value: bigheap_report.geomean_of(bigheap_report.versus(big, b, v)))
    return rows


def _verdicts(records, allocators):
    out = []
    progs = programs_report.group(records)
    if progs and "hakmem" in allocators:
        parts = []
        for anchor in programs_report.ANCHORS:
            if anchor in allocators:
                gm = stats.geomean(row.get("hakmem") for row in
                                   programs_report.ratio_table(progs, ["hakmem"], anchor, programs_report.CPU).values())
                if gm is not None:
                    parts.append("%s %s" % (fmt_ratio(gm), anchor))
        gms = [float(p.split()[0]) for p in parts]
        if gms:
            verdict = ("at least as fast as every anchor" if max(gms) <= 1.0 else
                       "behind %s" % ", ".join(p.split()[1] for p, g in zip(parts, gms) if g > 1.0))
            out.append("- **Real programs**: CPU time geometric mean %s: %s." % (", ".join(parts), verdict))
    big = bigheap_report.group(records)
    if big:
        judged = bigheap_report.judge(big, bigheap_report.allocator_order({}, big))
        met = [j for j in judged if j[2] == "met"]
        missed = [j for j in judged if j[2] == "missed"]
        unmeasured = [j for j in judged if j[2] == "not measured"]
        line = "- **Large-heap programs** (issue 46's targets): %d met, %d missed, %d not measured" % (
            len(met), len(missed), len(unmeasured))
        if missed:
            line += "; missed: " + "; ".join("%s: %s" % (t, m) for t, m, _ in missed[:6])
            if len(missed) > 6:
                line += "; and %d more" % (len(missed) - 6)
        out.append(line + ".")
    return out


def _behind(records, allocators):
    """Lines naming the rows where hakmem is behind an anchor, worst first."""
    if "hakmem" not in allocators:
        return []
    groups = report.group_timed(records)
    thr = report.figure(groups, lambda r: r["throughput"])
    rss = report.figure(groups, lambda r: r["peak_rss_kib"])
    slow, fat = [], []
    for config in thr:
        t = report.against_best_anchor({a: s["median"] if s else None for a, s in thr[config].items()}, max)
        if t and t[0] < 1.0:
            slow.append((1.0 / t[0], "%s: throughput %s× %s's" % (report.config_label(config), fmt_ratio(t[0]), t[1])))
        m = report.against_best_anchor({a: s["median"] if s else None for a, s in rss[config].items()}, min)
        if m and m[0] > SYNTHETIC_RSS_LIMIT:
            fat.append((m[0], "%s: peak RSS %s× %s's" % (report.config_label(config), fmt_ratio(m[0]), m[1])))
    for prog, by_alloc in programs_report.group(records).items():
        c = programs_report.against_anchors(by_alloc, programs_report.CPU)
        if c and c[0] > 1.0:
            slow.append((c[0], "%s: CPU time %s× %s's (faster in %d of %d rounds)" % (prog, fmt_ratio(c[0]), c[1],
                                                                                     c[2], c[3])))
        m = programs_report.against_anchors(by_alloc, programs_report.RSS)
        if m and m[0] > PROGRAM_RSS_LIMIT:
            fat.append((m[0], "%s: peak RSS %s× %s's" % (prog, fmt_ratio(m[0]), m[1])))
    big = bigheap_report.group(records)
    for ratio, prog, anchor in bigheap_report.behind(big, bigheap_report.allocator_order({}, big)):
        slow.append((ratio, "%s: CPU time %s× %s's" % (prog, fmt_ratio(ratio), anchor)))
    out = []
    for title, rows in (("Slower than the fastest anchor", slow),
                        ("Memory above the leanest anchor (synthetic > %.2f×, programs > %.2f×)"
                         % (SYNTHETIC_RSS_LIMIT, PROGRAM_RSS_LIMIT), fat)):
        rows.sort(reverse=True)
        if not rows:
            out.append("- %s: no row." % title)
            continue
        shown = "; ".join(text for _, text in rows[:SHOWN])
        more = " (and %d more)" % (len(rows) - SHOWN) if len(rows) > SHOWN else ""
        out.append("- %s, %d row(s): %s%s." % (title, len(rows), shown, more))
    return out


def _labels(record):
    """The chart group labels a record belongs to."""
    if record["kind"] == "timed":
        return [report.config_label((record["workload"], record["threads"]))]
    return [record["workload"]]


def missing_bars(specs, records):
    """One note per chart whose groups lack a bar: which allocator, where, and why."""
    why = {}
    for r in records:
        if r["status"] != "ok":
            for label in _labels(r):
                why.setdefault((r["allocator"], label), "%s: %s" % (r["status"], (r["message"] or "")[:100]))
    notes = []
    for spec in specs:
        gaps, absent = [], []
        baseline = spec["name"].rpartition("_vs_")[2] if "_vs_" in spec["name"] else None
        empty = [g for i, g in enumerate(spec["groups"]) if all(s["values"][i] is None for s in spec["series"])]
        for g in empty:
            reason = why.get((baseline, g)) if baseline else None
            gaps.append("any allocator in %s (%s)" % (g, "the baseline %s: %s" % (baseline, reason) if reason
                                                     else "no allocator has a figure there"))
        for s in spec["series"]:
            holes = [g for g, v in zip(spec["groups"], s["values"]) if v is None and g not in empty]
            if holes and len(holes) == len(spec["groups"]) - len(empty):
                absent.append(s["label"])
                continue
            for g in holes:
                reason = why.get((s["label"], g)) or spec.get("why_missing", {}).get(s["label"], {}).get(g)
                gaps.append("%s in %s (%s)" % (s["label"], g, reason or "no counted run, or no baseline figure"))
        if gaps or absent:
            parts = []
            if gaps:
                parts.append("no bar for " + "; ".join(gaps))
            if absent:
                parts.append("no bars at all for %s (not measured on these rows)" % ", ".join(absent))
            notes.append("- `%s` (%s): %s." % (spec["name"], spec["title"], "; ".join(parts)))
    return notes


def render(meta, records, allocators, specs):
    """The summary screen as Markdown lines."""
    out = ["## Summary", ""]
    every = list(allocators) + [a for a in bigheap_report.allocator_order(meta, bigheap_report.group(records))
                                if a not in allocators]
    rows = _geomean_rows(meta, records, every)
    if rows:
        columns = [a for a in OrderedDict((a, None) for _, cells in rows for a in cells)
                   if any(cells.get(a) is not None for _, cells in rows)]
        out += ["hakmem's geometric means against each allocator (synthetic rows: ratios of medians; programs: "
                "medians of per-round ratios). Below 1.00 is better for every figure but throughput.", "",
                md_table(["figure"] + columns, [[label] + [fmt_ratio(cells.get(a)) for a in columns]
                                                for label, cells in rows]), ""]
    verdicts = _verdicts(records, allocators)
    if verdicts:
        out += verdicts + [""]
    behind = _behind(records, allocators)
    if behind:
        out += ["Where hakmem is behind:", ""] + behind + [""]
    fails = report.failures(records)
    if fails:
        unexpected = report.unexpected_failures(records)
        out += ["- %d failed run(s), %d unexpected: see \"Failures\"." % (len(fails), len(unexpected)), ""]
    notes = missing_bars(specs or [], records)
    out += ["Charts with missing bars:" if notes else "Charts: every bar is there.", ""] + notes + ([""] if notes else [])
    return out
