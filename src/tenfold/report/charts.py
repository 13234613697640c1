"""Charts of the planning results: step-time breakdown (stacked bars), memory per GPU by kind against the
GPU's capacity, and the serving throughput-versus-interactivity curve.

Each function takes result objects from `tenfold.perf` and returns a `Chart` (Plotly JSON built as plain
dicts, which is quicker than plotly's figure objects and is what the web API sends). Never imports torch.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from tenfold.perf.serving.results import InferenceCurve, InferenceEstimate
from tenfold.perf.training.estimate import TrainingEstimate
from tenfold.perf.training.search import SearchResult
from tenfold.report.page import Chart

# one colour per part, kept across charts so "compute" is always the same blue
COLORS = {
    "compute": "#3b6fb6",
    "tp": "#e0894a",
    "cp": "#c9a227",
    "ep": "#8b5fb8",
    "pp": "#5aa6a0",
    "fsdp": "#b85f7e",
    "bubble": "#9aa1ad",
    "dp": "#d25d4f",
    "optimizer": "#6d8f3a",
    "weights": "#3b6fb6",
    "grads": "#5aa6a0",
    "activations": "#e0894a",
    "other": "#9aa1ad",
    "workspace": "#c9a227",
    "kv": "#8b5fb8",
}
TRAIN_PARTS = (
    ("compute", "compute (incl. recompute)"),
    ("tp", "tensor-parallel comm"),
    ("cp", "context-parallel comm"),
    ("ep", "expert all-to-all"),
    ("pp", "pipeline p2p"),
    ("fsdp", "FSDP gathers"),
    ("bubble", "pipeline bubble"),
    ("dp", "data-parallel comm"),
    ("optimizer", "optimizer step"),
)
INFER_PARTS = (
    ("attn_proj", "attention projections", "#3b6fb6"),
    ("attention", "attention (KV read / prefill)", "#5aa6a0"),
    ("ffn", "FFN / experts", "#6d8f3a"),
    ("tp", "TP all-reduce", "#e0894a"),
    ("ep", "EP exchange", "#8b5fb8"),
    ("head", "output head", "#c9a227"),
    ("draft", "MTP draft passes", "#b85f7e"),
    ("overhead", "kernel + step overhead", "#9aa1ad"),
)
MEMORY_PARTS = ("weights", "grads", "optimizer", "activations", "other")
FONT = {"family": "system-ui, sans-serif", "size": 13}


def layout(title: str, x_title: str, y_title: str, **extra) -> dict:
    """A Plotly layout with the title and both axis titles (the units live in the axis titles)."""
    out = {
        "title": {"text": title},
        "xaxis": {"title": {"text": x_title}, "automargin": True},
        "yaxis": {"title": {"text": y_title}, "automargin": True},
        "font": FONT,
        "legend": {"orientation": "h", "y": -0.25},
        "margin": {"t": 60, "r": 20},
        "template": "plotly_white",
    }
    out.update(extra)
    return out


def error_bars(
    values: Sequence[float], ranges: Sequence[tuple[float, float] | None], scale: float = 1.0
) -> dict | None:
    """Plotly `error_y` with asymmetric arrays for bars of `values` (each range divided by `scale`), or None
    unless every bar has a finite range."""
    if not values or any(r is None for r in ranges):
        return None
    plus = [hi / scale - v for v, (_, hi) in zip(values, ranges, strict=True)]
    minus = [v - lo / scale for v, (lo, _) in zip(values, ranges, strict=True)]
    if not all(math.isfinite(x) and x >= 0 for x in (*plus, *minus)):
        return None
    return {"type": "data", "symmetric": False, "array": plus, "arrayminus": minus, "thickness": 1.5}


def with_error_bars(trace: dict, bars: dict | None) -> dict:
    """`trace` with `error_y` set (unchanged when `bars` is None)."""
    if bars is None:
        return trace
    return trace | {"error_y": bars}


def estimate_label(e: TrainingEstimate) -> str:
    return f"{e.hardware} {e.precision} · {e.layout.describe()}"


def _check(items: Sequence, labels: Sequence[str] | None, what: str) -> list[str]:
    if not items:
        raise ValueError(f"{what}: need at least one result")
    if labels is not None and len(labels) != len(items):
        raise ValueError(f"{what}: {len(labels)} labels for {len(items)} results")
    return list(labels) if labels is not None else []


def training_breakdown_chart(
    estimates: Sequence[TrainingEstimate], labels: Sequence[str] | None = None, *, key: str = "step_breakdown"
) -> Chart:
    """Stacked bars: where each plan's optimizer step goes (seconds, exposed time per part)."""
    names = _check(estimates, labels, "training_breakdown_chart")
    ok = [(i, e) for i, e in enumerate(estimates) if e.breakdown is not None]
    if not ok:
        raise ValueError("training_breakdown_chart: no estimate has a breakdown (all structurally invalid)")
    xs = [names[i] if names else estimate_label(e) for i, e in ok]
    data = []
    for part, label in TRAIN_PARTS:
        ys = [getattr(e.breakdown, f"{part}_s") for _, e in ok]
        if all(y == 0 for y in ys):
            continue  # a part no plan has (no CP, no EP) would only clutter the legend
        data.append(
            {
                "type": "bar",
                "name": label,
                "x": xs,
                "y": ys,
                "marker": {"color": COLORS[part]},
                "hovertemplate": "%{x}<br>" + label + ": %{y:.3f} s<extra></extra>",
            }
        )
    if data:  # the step time's 80 % range on top of each stack
        steps = [e.step_time_s for _, e in ok]
        ranges = [e.scaled_interval(s) for s, (_, e) in zip(steps, ok, strict=True)]
        totals = [sum(tr["y"][i] for tr in data) for i in range(len(ok))]
        bars = error_bars(totals, ranges)
        data[-1] = with_error_bars(data[-1], bars)
    # the reading: compute share of the slowest plan, and its largest overhead
    _, worst = max(ok, key=lambda ie: ie[1].step_time_s)
    b = worst.breakdown
    overheads = {label: getattr(b, f"{p}_s") for p, label in TRAIN_PARTS if p != "compute"}
    top_label, top_s = max(overheads.items(), key=lambda kv: kv[1])
    step = worst.step_time_s
    if len(ok) == 1:
        reading = (
            f"Compute is {b.compute_s / step:.0%} of the {step:.2f} s step on {worst.hardware}; the largest "
            f"overhead is {top_label} at {top_s:.2f} s ({top_s / step:.0%})."
        )
    else:
        _, best = min(ok, key=lambda ie: ie[1].step_time_s)
        reading = (
            f"Steps range from {best.step_time_s:.2f} s ({best.hardware}) to {step:.2f} s "
            f"({worst.hardware}); "
            f"on the slowest, compute is {b.compute_s / step:.0%} and {top_label} the largest overhead "
            f"({top_s / step:.0%})."
        )
    fig = {
        "data": data,
        "layout": layout("Step time by part", "plan", "seconds per optimizer step", barmode="stack"),
    }
    return Chart(
        key=key, title="Step time by part (exposed seconds per optimizer step)", reading=reading, figure=fig
    )


def training_memory_chart(
    estimates: Sequence[TrainingEstimate], labels: Sequence[str] | None = None, *, key: str = "memory"
) -> Chart:
    """Stacked bars of memory per GPU (busiest pipeline stage) by kind, with each GPU's capacity marked."""
    names = _check(estimates, labels, "training_memory_chart")
    ok = [(i, e) for i, e in enumerate(estimates) if e.memory is not None]
    if not ok:
        raise ValueError("training_memory_chart: no estimate has a memory breakdown")
    xs = [names[i] if names else estimate_label(e) for i, e in ok]
    data = [
        {
            "type": "bar",
            "name": part,
            "x": xs,
            "y": [getattr(e.memory, f"{part}_GiB") for _, e in ok],
            "marker": {"color": COLORS[part]},
            "hovertemplate": "%{x}<br>" + part + ": %{y:.1f} GiB<extra></extra>",
        }
        for part in MEMORY_PARTS
    ]
    data.append(_capacity_trace(xs, [e.memory.capacity_GiB for _, e in ok]))
    _, tight = max(ok, key=lambda ie: ie[1].memory.total_GiB / ie[1].memory.capacity_GiB)
    m = tight.memory
    biggest = max(MEMORY_PARTS, key=lambda p: getattr(m, f"{p}_GiB"))
    verb = "uses" if m.total_GiB <= m.capacity_GiB else "needs"
    reading = (
        f"The fullest GPU ({tight.hardware}, {tight.layout.describe()}) {verb} {m.total_GiB:.1f} of "
        f"{m.capacity_GiB:.0f} GiB ({m.total_GiB / m.capacity_GiB:.0%}); {biggest} is the largest part "
        f"({getattr(m, f'{biggest}_GiB'):.1f} GiB)."
    )
    fig = {
        "data": data,
        "layout": layout("Memory per GPU", "plan", "GiB per GPU (busiest stage)", barmode="stack"),
    }
    return Chart(key=key, title="Memory per GPU by kind against capacity (GiB)", reading=reading, figure=fig)


def _capacity_trace(xs: list[str], caps: list[float]) -> dict:
    """The capacity of each bar's GPU as a wide horizontal tick over the bar."""
    return {
        "type": "scatter",
        "mode": "markers",
        "name": "HBM capacity",
        "x": xs,
        "y": caps,
        "marker": {"symbol": "line-ew", "size": 44, "line": {"width": 3, "color": "#1d2330"}},
        "hovertemplate": "%{x}<br>capacity: %{y:.0f} GiB<extra></extra>",
    }


def search_charts(result: SearchResult) -> list[Chart]:
    """The best plans of a search: their step-time breakdown and memory, labelled by layout."""
    if not result.top:
        return []
    labels = [f"#{i} {e.layout.describe()}" for i, e in enumerate(result.top, 1)]
    return [training_breakdown_chart(result.top, labels), training_memory_chart(result.top, labels)]


def inference_label(e: InferenceEstimate | InferenceCurve) -> str:
    return f"{e.hardware} {e.precision} · {e.deployment.describe()}"


def inference_breakdown_chart(
    estimates: Sequence[InferenceEstimate],
    labels: Sequence[str] | None = None,
    *,
    key: str = "step_breakdown",
) -> Chart:
    """Stacked bars: one engine step on one GPU, by part (milliseconds)."""
    names = _check(estimates, labels, "inference_breakdown_chart")
    ok = [(i, e) for i, e in enumerate(estimates) if e.breakdown is not None]
    if not ok:
        raise ValueError("inference_breakdown_chart: no feasible estimate")
    xs = [names[i] if names else inference_label(e) for i, e in ok]
    data = []
    for part, label, color in INFER_PARTS:
        ys = [getattr(e.breakdown, f"{part}_s") * 1e3 for _, e in ok]
        if all(y == 0 for y in ys):
            continue
        data.append(
            {
                "type": "bar",
                "name": label,
                "x": xs,
                "y": ys,
                "marker": {"color": color},
                "hovertemplate": "%{x}<br>" + label + ": %{y:.2f} ms<extra></extra>",
            }
        )
    _, e = max(ok, key=lambda ie: ie[1].breakdown.step_s)
    parts = {label: getattr(e.breakdown, f"{p}_s") for p, label, _ in INFER_PARTS}
    top_label, top_s = max(parts.items(), key=lambda kv: kv[1])
    reading = (
        f"At concurrency {e.concurrency} on {e.hardware}, one engine step takes "
        f"{e.step_time_s * 1e3:.1f} ms; "
        f"{top_label} is the largest part ({top_s / e.breakdown.step_s:.0%})."
    )
    fig = {
        "data": data,
        "layout": layout("Engine step by part", "configuration", "milliseconds per step", barmode="stack"),
    }
    return Chart(
        key=key, title="Serving step time by part (ms per engine step, one GPU)", reading=reading, figure=fig
    )


def inference_memory_chart(
    estimates: Sequence[InferenceEstimate], labels: Sequence[str] | None = None, *, key: str = "memory"
) -> Chart:
    """Stacked bars: weights, workspace and the KV-cache budget per GPU, with capacity marked."""
    names = _check(estimates, labels, "inference_memory_chart")
    ok = [(i, e) for i, e in enumerate(estimates) if e.feasible and math.isfinite(e.weights_GiB)]
    if not ok:
        raise ValueError("inference_memory_chart: no feasible estimate")
    xs = [names[i] if names else inference_label(e) for i, e in ok]
    parts = (
        ("weights", "weights", "weights_GiB"),
        ("workspace", "workspace (runtime, activations, logits)", "workspace_GiB"),
        ("kv", "KV-cache budget", "kv_budget_GiB"),
    )
    data = [
        {
            "type": "bar",
            "name": label,
            "x": xs,
            "y": [getattr(e, attr) for _, e in ok],
            "marker": {"color": COLORS[color]},
            "hovertemplate": "%{x}<br>" + label + ": %{y:.1f} GiB<extra></extra>",
        }
        for color, label, attr in parts
    ]
    data.append(_capacity_trace(xs, [e.capacity_GiB for _, e in ok]))
    _, e = min(ok, key=lambda ie: ie[1].kv_budget_GiB)
    reading = (
        f"On {e.hardware} the weights take {e.weights_GiB:.1f} of {e.capacity_GiB:.0f} GiB per GPU; the "
        f"{e.kv_budget_GiB:.1f} GiB KV budget holds {e.capacity} sequences (limited by {e.limited_by})."
    )
    fig = {"data": data, "layout": layout("Memory per GPU", "configuration", "GiB per GPU", barmode="stack")}
    return Chart(
        key=key, title="Serving memory per GPU by kind against capacity (GiB)", reading=reading, figure=fig
    )


def throughput_at(curve: InferenceCurve, per_user: float) -> float | None:
    """The most output tok/s per GPU a configuration gives while every user still gets `per_user` tok/s:
    interpolated along the (unsaturated) curve, linear in log(interactivity), where the target lies on
    it; the curve's peak when even its busiest point is faster than the target; None when no point
    reaches the target."""
    pts = sorted(
        (p.output_tokens_per_s_per_user, p.output_tokens_per_s_per_gpu)
        for p in curve.points
        if not p.saturated and p.output_tokens_per_s_per_user > 0
    )
    if not pts or per_user > pts[-1][0]:
        return None
    if per_user <= pts[0][0]:
        return max(y for _, y in pts)
    for (x0, y0), (x1, y1) in itertools.pairwise(pts):
        if x0 <= per_user <= x1:
            if x1 == x0:
                return max(y0, y1)
            t = (math.log(per_user) - math.log(x0)) / (math.log(x1) - math.log(x0))
            return y0 + t * (y1 - y0)
    raise AssertionError("unreachable: per_user lies within the sorted points")


def log_ticks(values: list[float]) -> dict[str, list]:
    """Ticks at 1-2-5 steps over the values' range, labelled in full ("20", "200", "2k"): plotly's own
    log ticks label the in-between decades with a bare first digit, which reads as 2 where 20 is meant."""
    pos = [float(v) for v in values if v is not None and v > 0]
    if not pos:
        return {}
    lo, hi = math.floor(math.log10(min(pos))), math.ceil(math.log10(max(pos)))
    ticks = [m * 10.0**e for e in range(lo, hi + 1) for m in (1, 2, 5)]
    ticks = [t for t in ticks if min(pos) / 2.5 <= t <= max(pos) * 2.5]
    return {"tickvals": ticks, "ticktext": [_short(t) for t in ticks]}


def _short(v: float) -> str:
    for div, suffix in ((1e6, "M"), (1e3, "k")):
        if v >= div:
            return f"{v / div:g}{suffix}"
    return f"{v:g}"


def inference_curve_chart(
    curves: Sequence[InferenceCurve],
    labels: Sequence[str] | None = None,
    *,
    key: str = "curve",
    target_per_user: float | None = None,
) -> Chart:
    """Throughput per GPU against interactivity (tokens/s per user), one line per configuration; each
    point is one concurrency (hover shows it). Up and to the right is better. With `target_per_user` a
    dashed line marks that interactivity and the reading compares the curves there."""
    names = _check(curves, labels, "inference_curve_chart")
    data = []
    peaks = []
    for i, c in enumerate(curves):
        pts = [p for p in c.points if not p.saturated] or list(c.points)
        name = names[i] if names else inference_label(c)
        data.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": name,
                "x": [p.output_tokens_per_s_per_user for p in pts],
                "y": [p.output_tokens_per_s_per_gpu for p in pts],
                "text": [f"concurrency {p.concurrency}" for p in pts],
                "hovertemplate": "%{text}<br>%{x:,.1f} tok/s/user<br>%{y:,.0f} tok/s/GPU<extra>"
                + name
                + "</extra>",
            }
        )
        best = max(pts, key=lambda p: p.output_tokens_per_s_per_gpu)
        peaks.append((name, best))
    name, best = max(peaks, key=lambda nb: nb[1].output_tokens_per_s_per_gpu)
    reading = (
        f"Highest throughput: {name} at {best.output_tokens_per_s_per_gpu:,.0f} output tok/s per GPU "
        f"({best.output_tokens_per_s_per_user:,.1f} tok/s per user, concurrency {best.concurrency}); "
        "moving left trades interactivity for throughput."
    )
    if len(peaks) > 1:
        low_name, low = min(peaks, key=lambda nb: nb[1].output_tokens_per_s_per_gpu)
        ratio = best.output_tokens_per_s_per_gpu / max(low.output_tokens_per_s_per_gpu, 1e-12)
        reading += f" Peak ratio to {low_name}: {ratio:.1f}x."
    shapes = []
    if target_per_user is not None:
        at = [
            (n, throughput_at(c, target_per_user)) for n, c in zip([n for n, _ in peaks], curves, strict=True)
        ]
        reached = [(n, y) for n, y in at if y is not None]
        if reached:
            n_hi, y_hi = max(reached, key=lambda ny: ny[1])
            n_lo, y_lo = min(reached, key=lambda ny: ny[1])
            reading = (
                f"At {target_per_user:g} tok/s per user, {n_hi} delivers {y_hi:,.0f} output tok/s per GPU"
                + (f", {y_hi / max(y_lo, 1e-12):.1f}x {n_lo} ({y_lo:,.0f})" if len(reached) > 1 else "")
                + ""
                + (
                    f"; {len(at) - len(reached)} of {len(at)} curves never reach it"
                    if len(reached) < len(at)
                    else ""
                )
                + ". "
                + reading
            )
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                # plotly.js 3+ places shapes on a log axis by data value (checked in the browser test)
                "x0": target_per_user,
                "x1": target_per_user,
                "y0": 0,
                "y1": 1,
                "line": {"dash": "dash", "color": "#5a6272"},
            }
        )
    fig = {
        "data": data,
        "layout": layout(
            "Throughput vs interactivity",
            "output tokens/s per user (interactivity)",
            "output tokens/s per GPU",
            xaxis={
                "title": {"text": "output tokens/s per user (interactivity)"},
                "type": "log",
                "automargin": True,
                **log_ticks([x for tr in data for x in tr.get("x", [])]),
            },
            shapes=shapes,
        ),
    }
    return Chart(
        key=key,
        title="Throughput vs interactivity (output tokens/s per GPU against tokens/s per user)",
        reading=reading,
        figure=fig,
    )
