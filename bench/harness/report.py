#!/usr/bin/env python3
"""Regenerates report.md and the charts from a results file, and from nothing else.

usage: python3 bench/harness/report.py RESULTS.json|RESULTS.csv [--out DIR] [--svg]

The report goes next to the results file (or into --out): report.md, with one table per
figure (throughput, peak RSS, the memory-behaviour RSS, callgrind instructions per
malloc+free pair), ratios of medians to mimalloc and to glibc, geometric means of the
ratios over the suite, failures, the machine and the exact commands; and charts/ with
the ratio charts (PNG when matplotlib is available, else SVG).
"""

import argparse
import os
import sys
from collections import OrderedDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bigheap_report  # noqa: E402
import charts  # noqa: E402
import known_issues  # noqa: E402
import programs_report  # noqa: E402
import results  # noqa: E402
import stats  # noqa: E402
import summary  # noqa: E402
from tables import fmt_cv, fmt_num, fmt_ratio, md_table  # noqa: E402

BASELINES = ("mimalloc", "glibc")
# The hardened build against the allocators picked for hardening (issue 35's targets):
# throughput >= 0.85x glibc's and >= 1.5x scudo's, peak RSS <= 1.15x glibc's (geometric
# means over the suite).
HARDENED = "hakmem-secure"
HARDENED_TARGETS = (("glibc", "throughput", 0.85, max), ("scudo", "throughput", 1.5, max),
                    ("glibc", "peak RSS", 1.15, min))
ANCHORS = ("glibc", "mimalloc", "jemalloc", "tcmalloc")  # the allocators hakmem is measured against
MEMORY_KEYS = ("rss_peak_kib", "rss_after_free_kib", "rss_after_continue_kib")


# ---- analysis --------------------------------------------------------------------------

def allocator_order(meta, records):
    """The allocators of every section but the large-heap programs' (bigheap_report)."""
    names = [a["name"] for a in meta.get("allocators", []) if not a.get("large_heap_only")]
    for r in records:
        if r["allocator"] not in names and r["allocator"] != "none" and r["kind"] != bigheap_report.KIND:
            names.append(r["allocator"])
    return names


def group_timed(records):
    """{(workload, threads): {allocator: [counted ok records]}}, in the order run."""
    groups = OrderedDict()
    for r in records:
        if r["kind"] != "timed":
            continue
        by_alloc = groups.setdefault((r["workload"], r["threads"]), OrderedDict())
        runs = by_alloc.setdefault(r["allocator"], [])
        if not r["warmup"] and r["status"] == "ok":
            runs.append(r)
    return groups


def summarise(runs, value):
    xs = [value(r) for r in runs if value(r) is not None]
    if not xs:
        return None
    return {"n": len(xs), "median": stats.median(xs), "min": min(xs), "max": max(xs),
            "cv": stats.cv(xs)}


def figure(groups, value):
    """{config: {allocator: summary}} for one figure (value picks it from a record)."""
    return OrderedDict((config, OrderedDict((a, summarise(runs, value)) for a, runs in by_alloc.items()))
                       for config, by_alloc in groups.items())


def ratios(fig, baseline):
    """{config: {allocator: median / baseline's median}}."""
    out = OrderedDict()
    for config, by_alloc in fig.items():
        base = by_alloc.get(baseline)
        base_median = base["median"] if base else None
        out[config] = {a: stats.ratio(s["median"] if s else None, base_median) for a, s in by_alloc.items()}
    return out


def geomeans(ratio_table, allocators):
    return {a: stats.geomean(row.get(a) for row in ratio_table.values()) for a in allocators}


def callgrind_per_pair(records):
    """{loop: {allocator: instructions per malloc+free pair}} from the N and zero runs."""
    runs = OrderedDict()
    for r in records:
        if r["kind"] == "callgrind" and r["status"] == "ok" and r["instructions"] is not None:
            runs.setdefault(r["workload"], OrderedDict()).setdefault(r["allocator"], {})[r["iterations"]] = r
    table = OrderedDict()
    for loop, by_alloc in runs.items():
        table[loop] = OrderedDict()
        for alloc, by_iters in by_alloc.items():
            zero = by_iters.get(0)
            counted = [n for n in by_iters if n > 0]
            if zero is None or not counted:
                table[loop][alloc] = None
                continue
            n = max(counted)
            table[loop][alloc] = (by_iters[n]["instructions"] - zero["instructions"]) / n
    return table


def callgrind_ratios(table, baseline):
    return OrderedDict((loop, {a: stats.ratio(v, row.get(baseline)) for a, v in row.items()})
                       for loop, row in table.items())


def against_best_anchor(medians, best):
    """(hakmem's value / the best anchor's, that anchor) from {allocator: value};
    best is max for throughput, min for memory and instructions. None if either is missing."""
    anchors = [(v, a) for a, v in medians.items() if a in ANCHORS and v is not None and v > 0]
    mine = medians.get("hakmem")
    if not anchors or mine is None:
        return None
    value, name = best(anchors)
    return mine / value, name


def rounds_at_target(by_alloc, anchor, value, ok):
    """(rounds where ok(hakmem's value / anchor's value of the same round), rounds with both),
    or None. Rounds are interleaved, so each pair ran in the same state of the machine."""
    def per_round(runs):
        return {r["round"]: value(r) for r in runs if value(r) is not None}
    mine, theirs = per_round(by_alloc.get("hakmem", [])), per_round(by_alloc.get(anchor, []))
    both = [rnd for rnd in mine if rnd in theirs and theirs[rnd] > 0]
    if not both:
        return None
    return sum(1 for rnd in both if ok(mine[rnd] / theirs[rnd])), len(both)


def failures(records):
    """Runs that went wrong, except the cachegrind pass's: valgrind cannot run every
    allocator, so a program failing under it is reported but is no failure of the run."""
    return [r for r in records if r["status"] != "ok" and r["kind"] != "cachegrind"]


def valgrind_failures(records):
    return [r for r in records if r["status"] != "ok" and r["kind"] == "cachegrind"]


def unexpected_failures(records):
    return [r for r in failures(records) if known_issues.match(r) is None]


# ---- formatting ------------------------------------------------------------------------

def config_label(config):
    workload, threads = config
    return "%s t=%d" % (workload, threads)


def value_table(fig, allocators, scale=1.0, unit_digits=3):
    rows = []
    for config, by_alloc in fig.items():
        cells = []
        for a in allocators:
            s = by_alloc.get(a)
            if s is None:
                cells.append("n/a")
            else:
                cells.append("%s%s [%s–%s]" % (fmt_num(s["median"] / scale, unit_digits), fmt_cv(s),
                                               fmt_num(s["min"] / scale, unit_digits),
                                               fmt_num(s["max"] / scale, unit_digits)))
        rows.append([config_label(config)] + cells)
    return md_table(["workload"] + list(allocators), rows)


def ratio_table(table, allocators, label=config_label, first="workload"):
    rows = [[label(config)] + [fmt_ratio(row.get(a)) for a in allocators] for config, row in table.items()]
    gm = geomeans(table, allocators)
    rows.append(["**geometric mean**"] + ["**%s**" % fmt_ratio(gm[a]) for a in allocators])
    return md_table([first] + list(allocators), rows)


def hardened_section(thr, rss, allocators):
    """hakmem-secure against glibc and scudo, row by row, and the geometric means against
    the targets."""
    out = ["## The hardened build against the hardened anchors", "",
           "%s's median over glibc's and scudo's in the same rounds (scudo: LLVM's hardened "
           "allocator, Debian's libclang-rt-19-dev), and the geometric means against the "
           "targets: throughput at least 0.85x glibc's and 1.5x scudo's, peak RSS at most "
           "1.15x glibc's." % HARDENED, ""]
    anchors = [a for a in ("glibc", "scudo") if a in allocators]
    if not anchors:
        return out + ["No anchor ran: nothing to compare.", ""]
    thr_r = {a: ratios(thr, a) for a in anchors}
    rss_r = {a: ratios(rss, a) for a in anchors}
    header = ["workload"] + ["throughput / %s" % a for a in anchors] + ["peak RSS / %s" % a for a in anchors]
    rows = [[config_label(c)] + [fmt_ratio(thr_r[a][c].get(HARDENED)) for a in anchors]
            + [fmt_ratio(rss_r[a][c].get(HARDENED)) for a in anchors] for c in thr]
    gm = [geomeans(thr_r[a], [HARDENED])[HARDENED] for a in anchors]
    gm += [geomeans(rss_r[a], [HARDENED])[HARDENED] for a in anchors]
    rows.append(["**geometric mean**"] + ["**%s**" % fmt_ratio(g) for g in gm])
    out += [md_table(header, rows), ""]
    for anchor, figure_name, target, better in HARDENED_TARGETS:
        if anchor not in anchors:
            out.append("- %s / %s: %s did not run." % (figure_name, anchor, anchor))
            continue
        table = thr_r[anchor] if figure_name == "throughput" else rss_r[anchor]
        value = geomeans(table, [HARDENED])[HARDENED]
        met = value is not None and (value >= target if better is max else value <= target)
        out.append("- %s / %s, geometric mean: %s (target %s %.2f): %s"
                   % (figure_name, anchor, fmt_ratio(value), ">=" if better is max else "<=", target,
                      "met" if met else "**missed**"))
    out.append("")
    return out


# ---- charts ----------------------------------------------------------------------------

def chart_specs(thr_ratios, rss_ratios, cg_table, cg_ratios, allocators, baseline):
    specs = []

    def ratio_spec(name, title, ylabel, table, label=config_label):
        configs = list(table)
        return {"name": name, "title": title, "ylabel": ylabel, "log": True, "baseline": 1.0,
                "groups": [label(c) for c in configs],
                "series": [{"label": a, "values": [table[c].get(a) for c in configs]} for a in allocators]}

    if thr_ratios:
        specs.append(ratio_spec("throughput_vs_%s" % baseline, "Throughput relative to %s" % baseline,
                                "ratio of medians (higher is faster)", thr_ratios))
    if rss_ratios:
        specs.append(ratio_spec("peak_rss_vs_%s" % baseline, "Peak RSS relative to %s" % baseline,
                                "ratio of medians (lower is leaner)", rss_ratios))
    if cg_ratios:
        specs.append(ratio_spec("callgrind_vs_%s" % baseline,
                                "Instructions per malloc+free pair relative to %s" % baseline,
                                "ratio (lower is cheaper)", cg_ratios, label=str))
    if cg_table:
        loops = list(cg_table)
        specs.append({"name": "callgrind_instructions", "title": "Instructions per malloc+free pair",
                      "ylabel": "instructions (callgrind)", "log": False, "baseline": 0.0,
                      "groups": loops,
                      "series": [{"label": a, "values": [cg_table[l].get(a) for l in loops]}
                                 for a in allocators]})
    return specs


# ---- the report ------------------------------------------------------------------------

def render(meta, records, chart_files, chart_dir="charts", specs=None):
    allocators = allocator_order(meta, records)
    groups = group_timed(records)
    thr = figure(groups, lambda r: r["throughput"])
    rss = figure(groups, lambda r: r["peak_rss_kib"])
    cg = callgrind_per_pair(records)
    out = ["# hakmem benchmark report", ""]
    out += summary.render(meta, records, allocators, specs)

    mode = meta.get("mode", "unknown")
    out.append("Mode **%s**: %s warm-up round(s) and %s counted round(s) per workload, allocators "
               "interleaved in every round (%s). Generated by `bench/harness/report.py` from the "
               "results file alone; every run is in results.json / results.csv."
               % (mode, meta.get("warmup", "?"), meta.get("rounds", "?"), ", ".join(allocators)))
    if meta.get("phase_seconds"):
        out.append("Time taken: " + ", ".join("%s %.0f s" % kv for kv in meta["phase_seconds"].items()) + ".")
    out.append("")
    for note in meta.get("scale_notes", []):
        out.append("- " + note)
    for s in meta.get("skipped", []):
        out.append("- **%s skipped**: %s" % (s["name"], s["note"]))
    for note in meta.get("notes", []):
        out.append("- " + note)
    out.append("")
    out.append("Cells are median [min–max] with the coefficient of variation (±CV) over the "
               "counted rounds; ratios are ratios of medians. A ratio table's last row is the "
               "geometric mean over the workloads where both figures exist.")
    out.append("")

    def ratio_sections(title, fig, better):
        for base in BASELINES:
            if base in allocators:
                out.append("#### %s relative to %s (%s)" % (title, base, better))
                out.append("")
                out.append(ratio_table(ratios(fig, base), allocators))
                out.append("")

    if thr:
        out += ["## Figure 1: throughput (operations per second)", "",
                "The workload's own ops/s (see bench/README.md for what one op is in each).", "",
                value_table(thr, allocators), ""]
        ratio_sections("Throughput", thr, "higher is faster")
    if rss:
        out += ["## Figure 2: peak RSS (MiB)", "",
                "Peak resident set of the whole process (its VmHWM, reported by the workload at exit).", "",
                value_table(rss, allocators, scale=1024.0), ""]
        ratio_sections("Peak RSS", rss, "lower is leaner")

    # Rows whose workloads report their page faults (files written before that have none).
    faults = OrderedDict((config, by_alloc) for config, by_alloc in
                         figure(groups, lambda r: r.get("minor_faults")).items()
                         if any(s is not None for s in by_alloc.values()))
    if faults:
        out += ["## Minor page faults (thousands)", "",
                "Minor page faults of the whole workload process (getrusage at its end). The "
                "kernel's count; an allocator that returns free memory after a delay (hakmem) "
                "faults more when a loaded machine makes the run slower.", "",
                value_table(faults, allocators, scale=1000.0), ""]

    mem = [(config, by_alloc) for config, by_alloc in groups.items() if config[0].startswith("memory_behaviour")]
    if mem:
        out += ["## Memory behaviour: does RSS fall back? (MiB, medians)", "",
                "RSS read by the workload from /proc/self/statm: at the peak of the working set, "
                "right after freeing it, and after continuing with small allocations for "
                "continue_ms (300 ms in quick and full mode).", ""]
        rows = []
        for config, by_alloc in mem:
            for a in allocators:
                runs = by_alloc.get(a, [])
                med = [stats.median([r["result"].get(k) for r in runs if r["result"].get(k) is not None])
                       for k in MEMORY_KEYS]
                kept = stats.ratio(med[2], med[0])
                rows.append([config_label(config), a] + [fmt_num(m / 1024.0 if m is not None else None)
                                                         for m in med]
                            + ["n/a" if kept is None else "%.0f%%" % (100 * kept)])
        out += [md_table(["workload", "allocator", "peak", "after free", "after continuing",
                          "still held (of peak)"], rows), ""]

    if cg:
        out += ["## Figure 3: instructions per malloc+free pair (callgrind)", "",
                "(instructions(N iterations) - instructions(0 iterations)) / N, one run each "
                "(deterministic). Includes the loop's own few instructions of bookkeeping and "
                "checking, the same for every allocator.", ""]
        rows = [[loop] + [fmt_num(row.get(a), 4) for a in allocators] for loop, row in cg.items()]
        out += [md_table(["loop"] + list(allocators), rows), ""]
        for base in BASELINES:
            if base in allocators:
                out.append("#### Instructions relative to %s (lower is cheaper)" % base)
                out.append("")
                out.append(ratio_table(callgrind_ratios(cg, base), allocators, label=str, first="loop"))
                out.append("")

    anchors_here = [a for a in ANCHORS if a in allocators]
    if "hakmem" in allocators and anchors_here and (thr or cg):
        out += ["## hakmem against the best anchor, row by row", "",
                "hakmem's median over the fastest (throughput) or leanest (peak RSS) of %s in the "
                "same rounds, and its instructions per pair over the fewest of theirs; the anchor "
                "is named after each ratio. The project's targets are throughput ≥ 1.00, peak RSS "
                "≤ 1.25 and instructions ≤ 0.80 on every row; rows that miss one are marked *. "
                "The rounds columns count the counted rounds in which hakmem met the target "
                "against that anchor's figure of the same round (rounds are interleaved, so each "
                "pair shares the machine's state): a row that misses in every round misses "
                "consistently; one that meets the target in some rounds is within the machine's "
                "noise."
                % ", ".join(anchors_here), ""]

        def cell(pair, ok):
            if pair is None:
                return "n/a"
            return "%s (%s)%s" % (fmt_ratio(pair[0]), pair[1], "" if ok(pair[0]) else " *")

        def rounds_cell(config, pair, value, ok):
            counted = rounds_at_target(groups[config], pair[1], value, ok) if pair else None
            return "%d of %d" % counted if counted else "n/a"

        rows = []
        for config in thr:
            t = against_best_anchor({a: s["median"] if s else None for a, s in thr[config].items()}, max)
            m = against_best_anchor({a: s["median"] if s else None for a, s in rss[config].items()}, min)
            thr_ok, rss_ok = (lambda r: r >= 1.0), (lambda r: r <= 1.25)
            rows.append([config_label(config), cell(t, thr_ok),
                         rounds_cell(config, t, lambda r: r["throughput"], thr_ok),
                         cell(m, rss_ok), rounds_cell(config, m, lambda r: r["peak_rss_kib"], rss_ok)])
        if rows:
            out += [md_table(["workload", "throughput / fastest anchor", "rounds at target",
                              "peak RSS / leanest anchor", "rounds at target"], rows), ""]
        rows = [[loop, cell(against_best_anchor(row, min), lambda r: r <= 0.80)] for loop, row in cg.items()]
        if rows:
            out += [md_table(["loop", "instructions / fewest of the anchors"], rows), ""]

    out += programs_report.render(meta, records, allocators)
    out += bigheap_report.render(meta, records)
    if HARDENED in allocators and thr:
        out += hardened_section(thr, rss, allocators)

    if chart_files:
        out += ["## Charts", ""]
        out += ["![%s](%s/%s)" % (f, chart_dir, f) for f in chart_files]
        out.append("")

    fails = failures(records)
    out += ["## Failures", ""]
    if not fails:
        out += ["None: every run exited 0 with a RESULT line (a real program: with the expected "
                "output).", ""]
    else:
        rows = []
        for r in fails:
            issue = known_issues.match(r)
            rows.append([r["allocator"], r["workload"], r["threads"], r["round"], r["status"],
                         r["exit_status"], (r["message"] or "").replace("|", "\\|"),
                         ("known: " + issue.why) if issue else "**unexpected**"])
        out += [md_table(["allocator", "workload", "threads", "round", "status", "exit", "message",
                          "verdict"], rows), ""]
    under_valgrind = valgrind_failures(records)
    if under_valgrind:
        out += ["Under valgrind (the real programs' cachegrind pass; recorded, not counted as failures):", "",
                md_table(["allocator", "program", "status", "exit", "message"],
                         [[r["allocator"], r["workload"], r["status"], r["exit_status"],
                           (r["message"] or "").replace("|", "\\|")] for r in under_valgrind]), ""]

    m = meta.get("machine", {})
    out += ["## Machine", "",
            "- uname: `%s`" % m.get("uname", "?"),
            "- CPU: %s; nproc: %s" % (m.get("cpu", "?"), m.get("nproc", "?")),
            "- date: %s" % m.get("date", "?"),
            "- git commit: %s%s" % (m.get("git_commit", "?"), " (uncommitted changes)" if m.get("git_dirty") else ""),
            "- Python %s; %s" % (m.get("python", "?"), m.get("valgrind", "?"))]
    for a in meta.get("allocators", []):
        out.append("- %s: %s%s%s" % (a["name"], a.get("preload") or "(nothing preloaded)",
                                     " (package version %s)" % a["version"] if a.get("version") else "",
                                     "".join(" %s=%s" % kv for kv in sorted((a.get("settings") or {}).items()))))
    out.append("")

    out += ["## Commands", ""]
    if meta.get("harness_command"):
        out += ["The harness:", "", "```", meta["harness_command"], "```", ""]
    out += ["Every distinct workload command (each ran once per round):", "", "```"]
    seen = OrderedDict()
    for runs in meta.get("program_references", {}).values():
        for ref in runs:
            seen.setdefault(ref["command"], None)
    for r in records:
        seen.setdefault(r["command"], None)
    out += list(seen) + ["```", ""]
    return "\n".join(out)


def generate(results_path, out_dir=None, force_svg=False):
    """Writes report.md and charts/ for a results file; returns the report's path."""
    meta, records = results.load(results_path)
    out_dir = out_dir or os.path.dirname(os.path.abspath(results_path))
    allocators = allocator_order(meta, records)
    baseline = "mimalloc" if "mimalloc" in allocators else "glibc"
    groups = group_timed(records)
    cg = callgrind_per_pair(records)
    specs = chart_specs(ratios(figure(groups, lambda r: r["throughput"]), baseline),
                        ratios(figure(groups, lambda r: r["peak_rss_kib"]), baseline),
                        cg, callgrind_ratios(cg, baseline), allocators, baseline)
    specs += programs_report.chart_specs(records, allocators)
    specs += bigheap_report.chart_specs(records, meta)
    chart_dir = os.path.join(out_dir, "charts")
    chart_files = charts.write_charts(specs, chart_dir, force_svg=force_svg) if specs else []
    path = os.path.join(out_dir, "report.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write(render(meta, records, chart_files, specs=specs))
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description="Regenerate report.md and charts from a results file.")
    parser.add_argument("results", help="results.json (or results.csv, which has no machine details)")
    parser.add_argument("--out", help="directory for report.md and charts/ (default: beside the results)")
    parser.add_argument("--svg", action="store_true", help="write SVG charts even if matplotlib is there")
    args = parser.parse_args(argv)
    print(generate(args.results, args.out, force_svg=args.svg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
