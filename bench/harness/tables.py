"""Formatting numbers and Markdown tables for the reports."""


def fmt_num(v, digits=3):
    if v is None:
        return "n/a"
    if v == 0:
        return "0"
    if abs(v) >= 1e5 or abs(v) < 1e-2:
        return "%.*e" % (digits - 1, v)
    return "%.*g" % (digits, v)


def fmt_ratio(v):
    return "n/a" if v is None else "%.2f" % v


def fmt_cv(s):
    return "" if s is None or s["cv"] is None else " ±%.1f%%" % (100 * s["cv"])


def md_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
