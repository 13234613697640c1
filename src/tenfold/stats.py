"""Paired statistics: the mean difference of paired observations, its standard error and a Student-t
95 % interval. Used for recipes compared over seeds (`tenfold.train.compare`, the benchmarks) and for a
training-aware sensitivity compared over held-out batches (`tenfold.engine.autoprecision.training`).
Standard library only, but for scipy's t quantile."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class PairedDiff:
    """Mean and spread of paired differences d_s = x_s - y_s over n seeds.

    Fields:
        n: number of pairs.
        mean: mean of d.
        se: standard error of the mean, sd(d, ddof=1) / sqrt(n) (nan with one pair).
        half_width: half-width of the Student-t 95 % interval, t_0.975(n-1) * se (nan with one pair).
        verdict: "indistinguishable" when the interval contains 0, else "worse" (mean > 0, i.e. a higher
            loss than the baseline) or "better"; "n/a" with one pair.
    """

    n: int
    mean: float
    se: float
    half_width: float
    verdict: str

    @property
    def low(self) -> float:
        return self.mean - self.half_width

    @property
    def high(self) -> float:
        return self.mean + self.half_width


def t_quantile_975(df: int) -> float:
    """Student-t 0.975 quantile with `df` degrees of freedom (scipy.stats.t.ppf)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    from scipy.stats import t  # scipy is a runtime dependency; imported here since it is slow to import

    return float(t.ppf(0.975, df))


def sample_std(values: Sequence[float]) -> float:
    """Sample standard deviation (ddof=1); nan for fewer than two values."""
    n = len(values)
    if n < 2:
        return math.nan
    m = sum(values) / n
    return math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1))


def paired_difference(x: Sequence[float], y: Sequence[float]) -> PairedDiff:
    """Statistics of d_s = x_s - y_s (x: the recipe's losses, y: the baseline's, in seed order).

    Student's paired t-test interval: mean(d) +- t_0.975(n-1) * sd(d) / sqrt(n) (e.g. NIST/SEMATECH
    e-Handbook of Statistical Methods, section 7.4.2.1, https://www.itl.nist.gov/div898/handbook/)."""
    if len(x) != len(y):
        raise ValueError(f"paired samples must have the same length, got {len(x)} and {len(y)}")
    if not x:
        raise ValueError("paired samples are empty")
    d = [a - b for a, b in zip(x, y, strict=True)]
    n = len(d)
    mean = sum(d) / n
    if n < 2:
        return PairedDiff(n=n, mean=mean, se=math.nan, half_width=math.nan, verdict="n/a")
    se = sample_std(d) / math.sqrt(n)
    half = t_quantile_975(n - 1) * se
    verdict = "indistinguishable" if abs(mean) <= half else ("worse" if mean > 0 else "better")
    return PairedDiff(n=n, mean=mean, se=se, half_width=half, verdict=verdict)
