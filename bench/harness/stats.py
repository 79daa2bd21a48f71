"""Statistics for benchmark figures: medians, spread, ratios and geometric means.

Everything here is plain arithmetic on lists of numbers; missing values are None and
propagate as None instead of raising, so a skipped allocator leaves a gap in a table
rather than breaking the report.
"""

import math


def median(values):
    """The median of a non-empty list; None for an empty one."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        return None
    mid = n // 2
    if n % 2 == 1:
        return xs[mid]
    return (xs[mid - 1] + xs[mid]) / 2


def mean(values):
    xs = list(values)
    if not xs:
        return None
    return sum(xs) / len(xs)


def stdev(values):
    """Sample standard deviation (n - 1); None for fewer than two values."""
    xs = list(values)
    if len(xs) < 2:
        return None
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def cv(values):
    """Coefficient of variation: sample standard deviation over mean."""
    xs = list(values)
    s = stdev(xs)
    m = mean(xs)
    if s is None or not m:
        return None
    return s / m


def ratio(value, baseline):
    """value / baseline, or None when either is missing or the baseline is zero."""
    if value is None or baseline is None or baseline == 0:
        return None
    return value / baseline


def geomean(values):
    """Geometric mean of the positive values given; None values are left out.

    Returns None when nothing is left. A zero or negative value has no logarithm and is a
    programming error here (ratios of positive figures are always positive).
    """
    xs = [x for x in values if x is not None]
    if not xs:
        return None
    if any(x <= 0 for x in xs):
        raise ValueError("geometric mean of a non-positive value")
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def paired_ratios(values, baselines):
    """value / baseline for every key (a round) that both dicts hold, the baseline
    positive, in key order: the per-round ratios of two allocators run interleaved."""
    return [values[k] / baselines[k] for k in sorted(values)
            if k in baselines and values[k] is not None and baselines[k] is not None and baselines[k] > 0]
