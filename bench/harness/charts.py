"""Grouped bar charts of the report's figures: PNG with matplotlib, else SVG by hand.

A chart spec is a dict:
  name    file name without extension
  title   chart title
  ylabel  y-axis label
  groups  one label per group of bars (a workload and thread count)
  series  [{"label": allocator, "values": [number or None per group]}]
  log     true: log2 y axis, bars drawn from `baseline` (for ratios); false: linear from 0
  baseline  the reference line (1.0 for ratios)

write_charts(specs, out_dir) uses matplotlib when this interpreter has it; otherwise, when
/usr/bin/python3 has it (the Debian python3-matplotlib package), it runs this file there;
otherwise it writes SVG with the small writer below. Run as a script, it reads
{"specs": [...], "out_dir": ...} on stdin and renders with matplotlib.
"""

import json
import math
import os
import subprocess
import sys
from xml.sax.saxutils import escape

COLOURS = {"hakmem": "#d62728", "hakmem-secure": "#ff9896", "glibc": "#7f7f7f", "mimalloc": "#1f77b4", "jemalloc": "#2ca02c",
           "tcmalloc": "#ff7f0e", "scudo": "#9467bd",
           # the large-heap rows' settings: a light shade of their allocator's colour
           "hakmem-nothp": "#f4a3a3", "glibc-hp": "#c7c7c7", "mimalloc-hp": "#aec7e8", "jemalloc-hp": "#98df8a"}
OTHER_COLOURS = ["#9467bd", "#8c564b", "#e377c2", "#17becf"]
SYSTEM_PYTHON = "/usr/bin/python3"


def colour(label, index):
    return COLOURS.get(label, OTHER_COLOURS[index % len(OTHER_COLOURS)])


def write_charts(specs, out_dir, force_svg=False):
    """Writes one file per spec into out_dir; returns the file names written."""
    os.makedirs(out_dir, exist_ok=True)
    if not force_svg:
        try:
            return _matplotlib_charts(specs, out_dir)
        except ImportError:
            pass
        names = _system_python_charts(specs, out_dir)
        if names is not None:
            return names
    return [_svg_chart(spec, out_dir) for spec in specs]


def _system_python_charts(specs, out_dir):
    if not os.path.exists(SYSTEM_PYTHON) or os.path.realpath(SYSTEM_PYTHON) == os.path.realpath(
            sys.executable):
        return None
    try:
        out = subprocess.run([SYSTEM_PYTHON, os.path.abspath(__file__)],
                             input=json.dumps({"specs": specs, "out_dir": out_dir}),
                             capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.split()


# ---- matplotlib ------------------------------------------------------------------------

def _matplotlib_charts(specs, out_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []
    for spec in specs:
        groups, series = spec["groups"], spec["series"]
        width = 0.8 / max(1, len(series))
        bars = len(groups) * max(1, len(series))
        fig, ax = plt.subplots(figsize=(min(16.0, max(6.4, 2.0 + 0.12 * bars)), 5.5))
        base = spec.get("baseline", 1.0) if spec.get("log") else 0.0
        for i, s in enumerate(series):
            xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
            heights = [(v - base) if v is not None else 0 for v in s["values"]]
            ax.bar(xs, heights, width, bottom=base, label=s["label"], color=colour(s["label"], i))
        if spec.get("log"):
            values = [v for s in series for v in s["values"] if v is not None and v > 0]
            ticks = log_ticks(min(values + [base]), max(values + [base]))
            ax.set_yscale("log", base=2)
            ax.set_ylim(ticks[0], ticks[-1])
            ax.set_yticks(ticks)
            ax.set_yticklabels([_tick_label(t) for t in ticks])
            ax.minorticks_off()
            ax.axhline(base, color="black", linewidth=0.8)
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels(groups, rotation=60, ha="right", fontsize=8)
        ax.set_ylabel(spec["ylabel"])
        ax.set_title(spec["title"])
        ax.legend(fontsize=8)
        fig.tight_layout()
        name = spec["name"] + ".png"
        fig.savefig(os.path.join(out_dir, name), dpi=110)
        plt.close(fig)
        names.append(name)
    return names


# ---- SVG fallback ----------------------------------------------------------------------

def log_ticks(lo, hi):
    """Powers of two (half powers for a narrow range) spanning [lo, hi], about 4 to 10."""
    a, b = math.floor(math.log2(lo)), math.ceil(math.log2(hi))
    if a == b:
        b += 1
    if b - a <= 3:
        return [2.0 ** (e / 2) for e in range(2 * a, 2 * b + 1)]
    step = max(1, math.ceil((b - a) / 10))
    return [2.0 ** e for e in range(a, b + 1, step)]


def _linear_ticks(hi):
    if hi <= 0:
        hi = 1.0
    raw = hi / 5
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    return [step * i for i in range(0, int(math.ceil(hi / step)) + 1)]


def _tick_label(v):
    return "%.3g" % v


def _svg_chart(spec, out_dir):
    groups, series = spec["groups"], spec["series"]
    log = bool(spec.get("log"))
    baseline = spec.get("baseline", 1.0)
    values = [v for s in series for v in s["values"] if v is not None and v > 0]
    if log:
        ticks = log_ticks(min(values + [baseline]), max(values + [baseline]))
    else:
        ticks = _linear_ticks(max(values + [0.0]))
    lo, hi = ticks[0], ticks[-1]

    left, right, top, bottom = 70, 130, 40, 150
    nseries, ngroups = max(1, len(series)), max(1, len(groups))
    plot_w = max(480, ngroups * (nseries * 10 + 14))
    group_w = plot_w / ngroups
    bar = min(24.0, (group_w - 14) / nseries)
    plot_h = 300
    width, height = int(left + plot_w + right), top + plot_h + bottom

    def y_of(v):
        if log:
            f = (math.log2(v) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
        else:
            f = (v - lo) / (hi - lo)
        return top + plot_h - max(0.0, min(1.0, f)) * plot_h

    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
           'font-size="11">' % (width, height),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="22" font-size="14" text-anchor="middle">%s</text>'
           % (width // 2, escape(spec["title"])),
           '<text transform="translate(16,%d) rotate(-90)" text-anchor="middle">%s</text>'
           % (top + plot_h // 2, escape(spec["ylabel"]))]
    for t in ticks:
        y = y_of(t)
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>' % (left, y, left + plot_w, y))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%s</text>' % (left - 6, y + 4, _tick_label(t)))
    base_y = y_of(baseline if log else 0.0)
    for g, label in enumerate(groups):
        x0 = left + g * group_w + (group_w - nseries * bar) / 2
        for i, s in enumerate(series):
            v = s["values"][g]
            if v is None or (log and v <= 0):
                continue
            y = y_of(v)
            out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %.4g</title></rect>'
                       % (x0 + i * bar, min(y, base_y), bar - 1, abs(base_y - y),
                          colour(s["label"], i), escape(s["label"]), escape(label), v))
        cx = x0 + len(series) * bar / 2
        out.append('<text transform="translate(%.1f,%d) rotate(-60)" text-anchor="end">%s</text>'
                   % (cx, top + plot_h + 12, escape(label)))
    out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="black"/>' % (left, base_y, left + plot_w, base_y))
    out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (left, top, left, top + plot_h))
    for i, s in enumerate(series):
        y = top + 10 + i * 18
        out.append('<rect x="%d" y="%d" width="12" height="12" fill="%s"/>'
                   % (left + plot_w + 16, y, colour(s["label"], i)))
        out.append('<text x="%d" y="%d">%s</text>' % (left + plot_w + 34, y + 10, escape(s["label"])))
    out.append("</svg>")
    name = spec["name"] + ".svg"
    with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
    return name


if __name__ == "__main__":
    request = json.load(sys.stdin)
    print("\n".join(_matplotlib_charts(request["specs"], request["out_dir"])))
