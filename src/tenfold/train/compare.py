"""Comparing recipes across seeds: recipe specs with overrides, and paired statistics over seeds.

A recipe spec is a registry name optionally followed by field overrides,
``"fp8_block:accumulate=hopper_fp8,promote_interval=0"`` or ``"nvfp4:hp_tail=0.25"``; `parse_recipe_spec`
turns it into (name, options) for `TrainConfig(recipe=..., recipe_options=...)`.

Two recipes trained from the same seed share the initial weights, the batches and the validation batches,
so their loss difference d_s is a paired observation; the spread of d over seeds is much smaller than the
spread of either loss. `paired_difference` gives the mean of d, its standard error and a Student-t 95 %
interval (the right interval for a handful of seeds: with 3 seeds t_0.975 = 4.30, not 2).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

Option = tuple[str, bool | int | float | str]


def parse_value(text: str) -> bool | int | float | str:
    """An override's value: true/false as bool, then int, then float, else the text itself."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text.strip()


def parse_recipe_spec(spec: str) -> tuple[str, tuple[Option, ...]]:
    """``"name"`` or ``"name:field=value,field=value"`` -> (name, ((field, value), ...)) sorted by field.

    Checks the syntax only; `TrainConfig` (or `recipe(name, **dict(options))`) checks names and fields."""
    name, sep, rest = spec.strip().partition(":")
    if not name:
        raise ValueError(f"recipe spec {spec!r} has no recipe name (form: name[:field=value,...])")
    options: dict[str, bool | int | float | str] = {}
    if sep:
        for item in rest.split(","):
            key, eq, value = item.partition("=")
            key = key.strip()
            if not eq or not key or not value.strip():
                raise ValueError(
                    f"recipe spec {spec!r}: option {item!r} is not field=value (form: name[:field=value,...])"
                )
            if key in options:
                raise ValueError(f"recipe spec {spec!r}: option {key!r} is given twice")
            options[key] = parse_value(value)
        if not options:
            raise ValueError(f"recipe spec {spec!r}: no options after ':'")
    return name, tuple(sorted(options.items()))


def format_recipe_spec(name: str, options: Sequence[Option] = ()) -> str:
    """The canonical spec text (options sorted by field): the inverse of `parse_recipe_spec`."""
    if not options:
        return name
    return name + ":" + ",".join(f"{k}={v}" for k, v in sorted(options))


def split_specs(text: str) -> list[str]:
    """A --recipes list -> specs: ``"bf16,nvfp4:hp_tail=0.25,seed=1,mxfp8"`` -> ``["bf16",
    "nvfp4:hp_tail=0.25,seed=1", "mxfp8"]``.

    Items are separated by ',' (or ';' or spaces); an item holding '=' (never part of a recipe name) is one
    more option of the spec before it."""
    specs: list[str] = []
    for item in re.split(r"[,;\s]+", text):
        if not item:
            continue
        if "=" in item and ":" not in item:
            if not specs:
                raise ValueError(f"recipe list {text!r} starts with an option {item!r}, not a recipe name")
            specs[-1] += "," + item
        else:
            specs.append(item)
    return specs


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
