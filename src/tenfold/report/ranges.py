"""How sure the training numbers are, shown: the footnote that says where the 80 % ranges come from, the
JSON fields of one estimate's ranges (CLI and web API), and the speedup chart with its ratio ranges as error
bars (`charts.error_bars` draws the others).

The ranges themselves come from tenfold.perf.uncertainty (through `TrainingEstimate.interval` and
tenfold.cost.intervals); this module only shows them.
"""

from __future__ import annotations

import math

from tenfold.cost.results import Comparison, TrainingRow
from tenfold.perf.training.estimate import TrainingEstimate
from tenfold.perf.uncertainty import LEVEL
from tenfold.report.charts import error_bars, layout, with_error_bars
from tenfold.report.page import Chart

RANGE_NOTE = (
    "80 % ranges come from the training model's leave-one-source-out cross-validated error on published "
    "runs, by GPU generation and dense/MoE (tenfold.perf.uncertainty); a ratio between two GPUs counts "
    "the measured correlation of their errors"
)

SERVING_RANGE_NOTE = (
    "80 % ranges come from the serving model's leave-one-source-out cross-validated error on published "
    "measurements, by engine family and dense/MoE (tenfold.perf.uncertainty)"
)


def has_interval(e: TrainingEstimate) -> bool:
    """Whether the estimate carries a finite 80 % range (the calibration measured its uncertainty)."""
    return math.isfinite(e.interval_factor) and math.isfinite(e.step_time_s)


def training_intervals(e: TrainingEstimate) -> dict:
    """The JSON fields of the estimate's 80 % ranges: tokens_per_s_per_gpu_interval and
    step_time_s_interval as [low, high] (null when the calibration has no uncertainty), and the level."""
    if not has_interval(e):
        return {"tokens_per_s_per_gpu_interval": None, "step_time_s_interval": None, "interval_level": None}
    return {
        "tokens_per_s_per_gpu_interval": list(e.interval),
        "step_time_s_interval": list(e.scaled_interval(e.step_time_s)),
        "interval_level": LEVEL,
    }


def interval_note(c: Comparison) -> str:
    """The note saying where the ranges come from (training's or serving's) when any row of `c` carries
    a range, else ''."""
    if not any(getattr(r, "intervals", None) for r in c.rows):
        return ""
    return SERVING_RANGE_NOTE if c.kind == "serving" else RANGE_NOTE


def speedup_chart(c: Comparison, key: str) -> Chart | None:
    """Bars: each GPU's speedup over the baseline with its 80 % range as error bars (None for a serving
    comparison, or when no row has a speedup)."""
    rows = [r for r in c.rows if isinstance(r, TrainingRow) and r.feasible and math.isfinite(r.speedup)]
    if c.kind != "training" or not rows:
        return None
    ys = [r.speedup for r in rows]
    # the baseline's own speedup is 1 by definition: a zero-width bar
    ranges = [r.interval("speedup") or ((1.0, 1.0) if r.hardware == c.baseline else None) for r in rows]
    bars = error_bars(ys, ranges)
    trace = {
        "type": "bar",
        "name": f"speedup vs {c.baseline}",
        "x": [r.hardware for r in rows],
        "y": ys,
        "text": [f"{y:.2f}x" for y in ys],
        "textangle": 0,
        "marker": {"color": "#7a5fb0"},
        "hovertemplate": "%{x}: %{y:.2f}x " + c.baseline + "<extra></extra>",
    }
    best = max(rows, key=lambda r: r.speedup)
    reading = f"{best.hardware} is {best.speedup:.2f}x {c.baseline} per GPU-hour"
    rng = best.interval("speedup")
    if rng is not None:
        reading += f" (80 % range {rng[0]:.2f}-{rng[1]:.2f}x; error bars: the model's cross-validated error)"
    title = f"Speedup over {c.baseline} (x, baseline GPU-hours / GPU-hours)"
    fig = {
        "data": [with_error_bars(trace, bars)],
        "layout": layout(title, "GPU", f"x {c.baseline}", showlegend=False),
    }
    return Chart(key=key, title=title, reading=reading + ".", figure=fig)
