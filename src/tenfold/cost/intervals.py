"""80 % ranges of a comparison row: throughput, time, GPU-hours and money, and the ratios to the baseline.

Every training number of a row scales with the modelled throughput, so each carries the estimate's own
range: a quantity v has [v / f, v x f] with f = `TrainingEstimate.interval_factor` (days, GPU-hours and
money move together; the throughput's range is `TrainingEstimate.interval`). A ratio to the baseline GPU
(speedup, cost ratios) takes `Uncertainty.ratio_interval` of the two rows' groups: the two estimates share
the model, the software assumptions and the workload, so their errors partly cancel (the module docstring
of tenfold.perf.uncertainty). Nothing is returned when the calibration carries no uncertainty.

A serving row's rates, latencies and $/M tokens carry the inference calibration's range for its engine
family and dense/MoE model (`serving_intervals`); its $/M tokens range scales the cost with the throughput
and so ignores the rounding of the instance count (at most one instance of the fleet).
"""

from __future__ import annotations

import math

from tenfold.perf.training.estimate import TrainingEstimate
from tenfold.perf.uncertainty import Uncertainty

SCALED = ("days", "gpu_hours", "rent_usd", "own_usd")
"""Row quantities proportional to GPU-hours, hence to 1 / throughput."""
RATIOS = ("speedup", "rent_cost_ratio", "own_cost_ratio")
INTERVAL_KEYS = ("tokens_per_s_per_gpu", *SCALED, *RATIOS)
"""Every quantity of a training row that can carry an 80 % range (JSON: `<key>_interval`)."""
SERVING_SCALED = (
    "tokens_per_s_per_gpu",
    "tokens_per_s_per_user",
    "ttft_ms",
    "tpot_ms",
    "rent_usd_per_m_tokens",
    "own_usd_per_m_tokens",
)
"""Serving row quantities that scale with the modelled step time (rates, latencies, cost per token)."""
SERVING_INTERVAL_KEYS = (*SERVING_SCALED, *RATIOS)


def _finite(lo: float, hi: float) -> bool:
    return math.isfinite(lo) and math.isfinite(hi)


def scaled_intervals(values: dict[str, float], factor: float) -> dict[str, tuple[float, float]]:
    """[v / f, v x f] for each finite value (empty when the factor is not a measured one, f >= 1)."""
    if not (math.isfinite(factor) and factor >= 1.0):
        return {}
    return {k: (v / factor, v * factor) for k, v in values.items() if math.isfinite(v)}


def serving_intervals(
    values: dict[str, float], group: str, uncertainty: Uncertainty | None
) -> dict[str, tuple[float, float]]:
    """Ranges of a serving row's SERVING_SCALED quantities for its uncertainty group ("trtllm/moe"); empty
    without uncertainty."""
    if uncertainty is None or not group:
        return {}
    return scaled_intervals(values, uncertainty.factor(group))


def estimate_intervals(est: TrainingEstimate, values: dict[str, float]) -> dict[str, tuple[float, float]]:
    """Ranges of the estimate's throughput and of each of `values` (quantities scaling with time, SCALED),
    from the estimate's interval factor; empty when the estimate has none."""
    f = est.interval_factor
    if not (math.isfinite(f) and f >= 1.0):
        return {}
    out = {}
    if _finite(*est.interval):
        out["tokens_per_s_per_gpu"] = (float(est.interval[0]), float(est.interval[1]))
    return out | scaled_intervals(values, f)


def ratio_intervals(
    ratios: dict[str, float], group: str, base_group: str, uncertainty: Uncertainty | None
) -> dict[str, tuple[float, float]]:
    """Ranges of ratios between a row (uncertainty group `group`) and the baseline row (`base_group`);
    empty without uncertainty."""
    if uncertainty is None or not group or not base_group:
        return {}
    out = {}
    for key, r in ratios.items():
        if math.isfinite(r):
            lo, hi = uncertainty.ratio_interval(r, group, base_group)
            out[key] = (lo, hi)
    return out
