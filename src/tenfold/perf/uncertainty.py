"""How sure a training or serving estimate is: 80 % intervals from the model's cross-validated error.

The spread comes from leave-one-source-out cross-validation on the published runs
(`tenfold.perf.validation.crossval`): each run is predicted by a calibration fitted without any run of its
own publication or software release, and the error is measured as r = log(predicted / measured). Training
errors are grouped by GPU generation and by dense or MoE model (`group_key`), serving errors by engine
family and dense or MoE model (`serving_group_key`: the engines differ in kernels and scheduling more than
the GPUs do in what the model misses); each group's spread sigma_g is the 80th
percentile of |r| divided by z (a bias widens the interval rather than hiding; a few wild rows do not widen
every interval), shrunk toward the spread of all rows with `PRIOR_ROWS` pseudo-rows because some groups
hold only a handful of runs. An 80 % interval around a
prediction p is [p e^(-z sigma), p e^(z sigma)] with z the normal quantile (1.2816).

A ratio between two estimates (GB200 over H100 for the same run) has correlated errors: both sides share
the model, the software assumptions and the workload. `ratio_correlation` is measured from pairs of
published runs of the same model on different GPUs in the same software release, and the ratio's spread is
sqrt(sa^2 + sb^2 - 2 rho sa sb).

Hardware outside the validated generations (an engine without validated rows) gets the widest group
spread: nobody measured it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

LEVEL = 0.8
Z80 = 1.2815515655446004
"""Normal quantile for a two-sided 80 % interval (scipy.stats.norm.ppf(0.9))."""
PRIOR_ROWS = 4.0
"""Pseudo-rows of the pooled spread each group's spread is shrunk with (partial pooling)."""
GENERATION = {
    "ampere": "ampere",
    "hopper": "hopper",
    "blackwell": "blackwell",
    "blackwell-ultra": "blackwell",
}


def group_key(arch: str, moe: bool) -> str:
    """The uncertainty group of an architecture and model kind: "hopper/moe", "blackwell/dense", ...
    (architectures outside the validated generations map to "other/...")."""
    return f"{GENERATION.get(arch, 'other')}/{'moe' if moe else 'dense'}"


def engine_family(engine: str) -> str:
    """The engine family of a serving preset name: "trtllm-bench" -> "trtllm", "vllm" -> "vllm" (the
    part before the first dash: a preset is a family's settings for one kind of run)."""
    return engine.split("-", 1)[0] or "other"


def serving_group_key(engine: str, moe: bool) -> str:
    """The uncertainty group of a serving estimate: engine family and model kind ("trtllm/moe", ...)."""
    return f"{engine_family(engine)}/{'moe' if moe else 'dense'}"


@dataclass(frozen=True, kw_only=True)
class Uncertainty:
    """Spread of log(predicted / measured) by group, and the correlation of two GPUs' errors on one run.

    Fields: log_sigma (group key -> spread), pooled (spread of all rows), ratio_correlation (rho, see the
    module docstring), rows (how many runs measured each group), method (how it was measured).
    """

    log_sigma: Mapping[str, float]
    pooled: float
    ratio_correlation: float = 0.0
    rows: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    method: str = ""
    level: float = LEVEL

    def __post_init__(self) -> None:
        for k, v in {**self.log_sigma, "pooled": self.pooled}.items():
            if not (math.isfinite(v) and 0.0 < v < 2.0):
                raise ValueError(f"uncertainty log_sigma[{k!r}] must be in (0, 2), got {v}")
        if not -1.0 <= self.ratio_correlation <= 1.0:
            raise ValueError(
                f"uncertainty ratio_correlation must be in [-1, 1], got {self.ratio_correlation}"
            )

    def sigma(self, group: str) -> float:
        """Spread for a group key (`group_key(arch, moe)`); the widest group's for unvalidated hardware."""
        if group in self.log_sigma:
            return self.log_sigma[group]
        return max([self.pooled, *self.log_sigma.values()])

    def factor(self, group: str) -> float:
        """e^(z sigma): the 80 % interval of a throughput or a time v is [v / factor, v x factor]."""
        return math.exp(Z80 * self.sigma(group))

    def interval(self, value: float, group: str) -> tuple[float, float]:
        """80 % interval around a predicted quantity that scales like throughput (or its inverse)."""
        f = self.factor(group)
        return value / f, value * f

    def ratio_interval(self, ratio: float, group_a: str, group_b: str) -> tuple[float, float]:
        """80 % interval of ratio = estimate(a) / estimate(b), each side given by its group key."""
        sa, sb = self.sigma(group_a), self.sigma(group_b)
        var = max(sa * sa + sb * sb - 2.0 * self.ratio_correlation * sa * sb, 0.0)
        f = math.exp(Z80 * math.sqrt(var))
        return ratio / f, ratio * f

    def relative_halfwidth(self, group: str) -> float:
        """Half the interval's width relative to the value (for tornado bars): (f - 1/f) / 2."""
        f = self.factor(group)
        return (f - 1.0 / f) / 2.0


def spread(log_errors: Iterable[float]) -> float:
    """The sigma whose 80 % interval covers 80 % of these log errors: the 80th percentile of |r| over z
    (the normal sigma when errors are normal; a few wild rows do not widen every interval). NaN for none."""
    xs = sorted(abs(x) for x in log_errors)
    if not xs:
        return math.nan
    pos = LEVEL * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return (xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)) / Z80


def pooled_spreads(errors: Mapping[str, list[float]]) -> tuple[dict[str, float], float]:
    """Group key -> log errors  =>  (group spreads shrunk toward the pooled one, pooled spread)."""
    everything = [x for xs in errors.values() for x in xs]
    pooled = spread(everything)
    out = {}
    for key, xs in errors.items():
        n = len(xs)
        var = (n * spread(xs) ** 2 + PRIOR_ROWS * pooled**2) / (n + PRIOR_ROWS)
        out[key] = math.sqrt(var)
    return out, pooled


def uncertainty_from_dict(d: Mapping) -> Uncertainty:
    """From a calibration file's [uncertainty] table."""
    return Uncertainty(
        log_sigma=MappingProxyType({str(k): float(v) for k, v in d.get("log_sigma", {}).items()}),
        pooled=float(d["pooled"]),
        ratio_correlation=float(d.get("ratio_correlation", 0.0)),
        rows=MappingProxyType({str(k): int(v) for k, v in d.get("rows", {}).items()}),
        method=str(d.get("method", "")),
    )


def uncertainty_to_toml(u: Uncertainty) -> list[str]:
    """Lines of a calibration file's [uncertainty] section."""
    lines = ["[uncertainty]", f"pooled = {u.pooled:.4f}", f"ratio_correlation = {u.ratio_correlation:.3f}"]
    if u.method:
        lines.append(f'method = "{u.method}"')
    lines += ["", "[uncertainty.log_sigma]"]
    lines += [f'"{k}" = {v:.4f}' for k, v in sorted(u.log_sigma.items())]
    if u.rows:
        lines += ["", "[uncertainty.rows]"]
        lines += [f'"{k}" = {v}' for k, v in sorted(u.rows.items())]
    return lines
