"""The rich report of `tenfold compare`: the side-by-side table, then cost, days and energy per GPU as bars,
the step-time breakdown and memory of each GPU's chosen plan, the throughput-versus-interactivity curves,
and the cost tornado. `comparison_charts` is also what the web API sends for a comparison.
"""

from __future__ import annotations

import math
from pathlib import Path

from tenfold.cost.results import Comparison, ComparisonSet, ServingRow, TrainingRow
from tenfold.cost.tornado import Tornado
from tenfold.perf.errors import Infeasible
from tenfold.perf.serving.curve import inference_curve
from tenfold.perf.serving.results import InferenceCurve
from tenfold.perf.serving.search import search_inference
from tenfold.report.charts import (
    error_bars,
    inference_curve_chart,
    layout,
    training_breakdown_chart,
    training_memory_chart,
    with_error_bars,
)
from tenfold.report.format import fmt_number, fmt_range, usd
from tenfold.report.page import Chart, HtmlTable, render_html
from tenfold.report.ranges import interval_note, speedup_chart

RENT_COLOR, OWN_COLOR = "#e0894a", "#3b6fb6"
# the serving outlook drawn for a training comparison: NVIDIA's 30x-claim interactivity (20 tok/s per user,
# https://www.nvidia.com/en-us/data-center/gb200-nvl72/ footnote) and 5 s TTFT limit, at the 1k/1k chat shape
# of SemiAnalysis InferenceMAX's input/output sets (https://github.com/InferenceMAX/InferenceMAX)
OUTLOOK = {"input_len": 1024, "output_len": 1024, "min_tokens_per_s_per_user": 20.0, "max_ttft_ms": 5000.0}


UNCALIBRATED_MARK = "(uncalibrated)"


def uncalibrated_note(c: Comparison) -> str:
    """The note under a comparison whose rows include hardware no published run calibrated ('' if none)."""
    names = [d["hardware"] for d in c.summary() if not d["calibrated"]]
    if not names:
        return ""
    return (
        f"{UNCALIBRATED_MARK} {', '.join(names)}: no published measured runs of this architecture "
        "were fitted; its numbers use a conservative efficiency (the lowest fitted at that operand width), "
        "so treat them as rough, likely pessimistic, not as a prediction"
    )


def comparison_rows(c: Comparison) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    """The side-by-side numbers of one comparison as (column headers, rows of formatted cells): one row per
    GPU, the plan in the last column, or for a GPU without a plan dashes and the reason there. Days and the
    ratios carry their 80 % range in brackets where the calibration measured one ("3.70x (3.10-4.30)").
    The HTML report, the web API and `tenfold compare` all render these cells, so they always agree."""
    serving = c.kind == "serving"
    cols = ["GPU", "precision", "GPUs", "days", "tok/s/GPU" if serving else "MFU", "GPU-hours"]
    cols += ["rent $M", "own $M", "MWh", "tCO2", f"speedup vs {c.baseline}", "rent cost", "own cost"]
    cols += ["$/M tok (rent)"] if serving else []
    cols += ["plan"]
    rows = []
    for d in c.summary():
        gpu = d["hardware"] if d["calibrated"] else f"{d['hardware']} {UNCALIBRATED_MARK}"
        if not d["feasible"]:
            rows.append((gpu, *["-"] * (len(cols) - 2), d["reason"]))
            continue
        r = [
            gpu,
            d["precision"],
            f"{d['num_gpus']:,}",
            fmt_range(d["days"], d.get("days_interval"), ",.1f"),
            fmt_range(d["tokens_per_s_per_gpu"], d.get("tokens_per_s_per_gpu_interval"), ",.0f")
            if serving
            else fmt_number(d["mfu"], ".1%"),
            fmt_number(d["gpu_hours"], ",.0f"),
            fmt_number(d["rent_usd"] / 1e6, ",.2f"),
            fmt_number(d["own_usd"] / 1e6, ",.2f"),
            fmt_number(d["facility_MWh"], ",.0f"),
            fmt_number(d["co2_t"], ",.0f"),
            fmt_range(d["speedup"], d.get("speedup_interval"), ".2f", "x"),
            fmt_range(d["rent_cost_ratio"], d.get("rent_cost_ratio_interval"), ".2f", "x"),
            fmt_range(d["own_cost_ratio"], d.get("own_cost_ratio_interval"), ".2f", "x"),
        ]
        if serving:
            # its range is in the JSON (`rent_usd_per_m_tokens_interval`); the cost ratios beside it carry
            # theirs, and a third bracket would not fit 80 columns
            r.append(fmt_number(d["rent_usd_per_m_tokens"], ",.3f"))
        rows.append((*r, d["plan"]))
    return tuple(cols), tuple(rows)


def comparison_table(c: Comparison) -> HtmlTable:
    """The side-by-side numbers of one comparison (`comparison_rows`) as an HTML table with its notes."""
    columns, rows = comparison_rows(c)
    return HtmlTable(
        caption=c.title,
        columns=columns,
        rows=rows,
        notes=(
            *c.notes,
            *filter(None, [uncalibrated_note(c), interval_note(c)]),
            f"carbon at {c.grid_g_per_kWh:g} g CO2/kWh",
        ),
    )


def _money_scale(values: list[float]) -> tuple[float, str]:
    big = max((abs(v) for v in values if math.isfinite(v)), default=0.0)
    return (1e6, "million US$") if big >= 1e6 else (1e3, "thousand US$")


def _feasible(c: Comparison) -> list[TrainingRow | ServingRow]:
    return [r for r in c.rows if r.feasible and r.money is not None]


def _bars(rows: list, key: str, ys: list[float], scale: float = 1.0) -> dict | None:
    """Error bars of the rows' 80 % ranges of `key` (None where no row has a range of it)."""
    ranges = [r.interval(key) for r in rows]
    return error_bars(ys, ranges, scale)


def cost_chart(c: Comparison, key: str) -> Chart:
    """Grouped bars: rented and owned cost of the whole job per GPU type (millions of dollars)."""
    rows = _feasible(c)
    xs = [r.hardware for r in rows]
    scale, unit = _money_scale([v for r in rows for v in (r.money.rent_usd, r.money.own_usd)])
    data = []
    for name, attr, color, verb in (
        (f"rent ({c.settings.rent_basis})", "rent_usd", RENT_COLOR, "rented"),
        ("own", "own_usd", OWN_COLOR, "owned"),
    ):
        ys = [getattr(r.money, attr) / scale for r in rows]
        trace = {
            "type": "bar",
            "name": name,
            "x": xs,
            "y": ys,
            "marker": {"color": color},
            "hovertemplate": "%{x}: %{y:,.2f} " + unit + f" {verb}<extra></extra>",
        }
        data.append(with_error_bars(trace, _bars(rows, attr, ys, scale)))
    priced = [r for r in rows if math.isfinite(r.money.own_usd)] or rows
    best = min(priced, key=lambda r: r.money.own_usd if math.isfinite(r.money.own_usd) else r.money.rent_usd)
    base = next((r for r in rows if r.hardware == c.baseline), None)
    reading = f"Cheapest to own: {best.hardware} at {usd(best.money.own_usd)}"
    if base is not None and best is not base and math.isfinite(best.own_cost_ratio):
        reading += f", {best.own_cost_ratio:.2f}x the {c.baseline} cost ({usd(base.money.own_usd)})"
    reading += f"; renting ({c.settings.rent_basis}) costs {usd(best.money.rent_usd)} on it."
    fig = {"data": data, "layout": layout(f"Job cost: {c.title}", "GPU", unit, barmode="group")}
    return Chart(
        key=key, title=f"Job cost per GPU type, rented and owned ({unit})", reading=reading, figure=fig
    )


def days_chart(c: Comparison, key: str) -> Chart:
    """Bars: wall-clock days per GPU type (training), or GPUs needed for the load (serving)."""
    rows = _feasible(c)
    xs = [r.hardware for r in rows]
    if c.kind == "training":
        ys = [r.days for r in rows]
        text = [f"{r.num_gpus:,} GPUs, {r.precision}" for r in rows]
        fast = min(rows, key=lambda r: r.days)
        slow = max(rows, key=lambda r: r.days)
        reading = (
            f"{fast.hardware} finishes in {fast.days:,.1f} days on {fast.num_gpus:,} GPUs, "
            f"{slow.days / fast.days:.1f}x sooner than {slow.hardware} ({slow.days:,.1f} days)."
        )
        rng = fast.interval("days")
        if rng is not None:
            reading += f" 80 % range for {fast.hardware}: {rng[0]:,.1f}-{rng[1]:,.1f} days (error bars)."
        title, y_title = "Days to train per GPU type (wall-clock days)", "days"
        hover = text
    else:
        ys = [r.num_gpus for r in rows]
        # the bar shows the layout ("TP2 x 31"), the hover the whole plan with its concurrency
        text = [r.plan.split(" at ")[0] for r in rows]
        hover = [f"{r.instances:,} instances: {r.plan}" for r in rows]
        few = min(rows, key=lambda r: r.num_gpus)
        many = max(rows, key=lambda r: r.num_gpus)
        reading = (
            f"{few.hardware} carries the load with {few.num_gpus:,} GPUs, "
            f"{many.num_gpus / few.num_gpus:.1f}x fewer than {many.hardware} ({many.num_gpus:,})."
        )
        title, y_title = "GPUs needed for the serving load (count)", "GPUs"
    trace = {
        "type": "bar",
        "name": y_title,
        "x": xs,
        "y": ys,
        "text": text,
        "customdata": hover,
        "textangle": 0,
        "marker": {"color": "#5aa6a0"},
        "hovertemplate": "%{x}: %{y:,.1f} " + y_title + "<br>%{customdata}<extra></extra>",
    }
    data = [with_error_bars(trace, _bars(rows, "days", ys) if c.kind == "training" else None)]
    fig = {"data": data, "layout": layout(title, "GPU", y_title, showlegend=False)}
    return Chart(key=key, title=title, reading=reading, figure=fig)


def energy_chart(c: Comparison, key: str) -> Chart:
    """Bars: facility energy (MWh, IT x PUE) per GPU type; the hover adds tonnes of CO2."""
    rows = [r for r in _feasible(c) if r.money.footprint is not None]
    if not rows:
        raise ValueError("energy_chart: no row has an energy footprint")
    data = [
        {
            "type": "bar",
            "name": "facility energy",
            "x": [r.hardware for r in rows],
            "y": [r.money.footprint.facility_MWh for r in rows],
            "text": [f"{r.money.footprint.co2_t:,.0f} t CO2" for r in rows],
            "marker": {"color": "#6d8f3a"},
            "hovertemplate": "%{x}: %{y:,.0f} MWh<br>%{text}<extra></extra>",
        }
    ]
    lo = min(rows, key=lambda r: r.money.footprint.facility_MWh)
    hi = max(rows, key=lambda r: r.money.footprint.facility_MWh)
    fp_lo, fp_hi = lo.money.footprint, hi.money.footprint
    reading = (
        f"{lo.hardware} uses the least energy: {fp_lo.facility_MWh:,.0f} MWh ({fp_lo.co2_t:,.0f} t CO2), "
        f"{fp_hi.facility_MWh / max(fp_lo.facility_MWh, 1e-12):.1f}x less than {hi.hardware}; "
        f"carbon at {c.grid_g_per_kWh:g} g CO2/kWh."
    )
    fig = {
        "data": data,
        "layout": layout("Facility energy per GPU type", "GPU", "MWh at the facility (IT x PUE)"),
    }
    return Chart(key=key, title="Energy per GPU type (MWh at the facility)", reading=reading, figure=fig)


def tornado_chart(tornado: Tornado, hardware: str, key: str) -> Chart:
    """Horizontal bars around the base cost: each input swept low to high, widest swing on top."""
    bars = [b for b in tornado.bars if math.isfinite(b.swing_usd)]
    if not bars:
        raise ValueError(f"tornado_chart: no finite bar for {hardware}")
    scale, unit = _money_scale([tornado.base_cost_usd])
    base = tornado.base_cost_usd / scale
    labels = [f"{b.label} ({b.low_value:g} to {b.high_value:g} {b.unit})".replace(" )", ")") for b in bars]
    data = [
        {
            "type": "bar",
            "orientation": "h",
            "name": name,
            "y": labels,
            "x": [getattr(b, attr) / scale - base for b in bars],
            "base": [base] * len(bars),
            "marker": {"color": color},
            "hovertemplate": "%{y}<br>" + name + ": %{x:+,.2f} " + unit + "<extra></extra>",
        }
        for name, attr, color in (
            ("input at its low value", "cost_at_low_usd", "#5aa6a0"),
            ("input at its high value", "cost_at_high_usd", "#d25d4f"),
        )
    ]
    top = bars[0]
    reading = (
        f"Around a base of {usd(tornado.base_cost_usd)} ({tornado.basis}), {top.label} moves the {hardware} "
        f"cost most: {usd(top.cost_at_low_usd)} at {top.low_value:g} to {usd(top.cost_at_high_usd)} at "
        f"{top.high_value:g}."
    )
    fig = {
        "data": data,
        "layout": layout(
            f"Cost sensitivity: {hardware} ({tornado.basis})",
            f"{unit} (bars start at the base cost)",
            "input and its range",
            barmode="overlay",
            yaxis={"autorange": "reversed", "automargin": True, "title": {"text": "input and its range"}},
        ),
    }
    return Chart(
        key=key,
        title=f"Cost tornado, {hardware} {tornado.basis}ed ({unit})",
        reading=reading,
        figure=fig,
    )


def serving_curves(c: Comparison) -> tuple[list[InferenceCurve], list[str], str]:
    """Throughput-vs-interactivity curves of each GPU: for a serving comparison at each row's chosen
    deployment and precision; for a training comparison the serving outlook (OUTLOOK) of the same model,
    each GPU at its best deployment in its lowest supported precision. Returns (curves, labels, what)."""
    curves, labels = [], []
    w = c.workload
    if c.kind == "serving":
        for r in _feasible(c):
            p = r.point
            curves.append(
                inference_curve(
                    p.model,
                    p.hardware,
                    p.deployment,
                    input_len=w.input_len,
                    output_len=w.output_len,
                    precision=p.precision,
                    kv_precision=p.kv_precision,
                    engine=w.engine,
                )
            )
            labels.append(f"{p.hardware} {p.precision} {p.deployment.describe()}")
        what = f"the compared load (ISL {w.input_len} / OSL {w.output_len})"
        return curves, labels, what
    for r in c.rows:
        prec = r.precision if r.feasible else ""
        if not prec:
            continue
        try:
            s = search_inference(w.model, r.hardware, precision=prec, **OUTLOOK)
        except ValueError:
            continue
        if s.best is None:
            continue
        b = s.best
        curves.append(
            inference_curve(
                w.model,
                r.hardware,
                b.deployment,
                input_len=OUTLOOK["input_len"],
                output_len=OUTLOOK["output_len"],
                precision=b.precision,
                kv_precision=b.kv_precision,
            )
        )
        labels.append(f"{r.hardware} {b.precision} {b.deployment.describe()}")
    what = (
        f"serving outlook for {w.model}: ISL/OSL {OUTLOOK['input_len']}/{OUTLOOK['output_len']}, each GPU "
        f"in its training precision at the deployment with the most tok/s/GPU at >= "
        f"{OUTLOOK['min_tokens_per_s_per_user']:g} tok/s/user"
    )
    return curves, labels, what


def comparison_charts(c: Comparison, prefix: str = "c0", *, curves: bool = True) -> list[Chart]:
    """Every chart of one comparison (keys start with `prefix`). Empty when no GPU has a plan."""
    rows = _feasible(c)
    if not rows:
        return []
    out = [cost_chart(c, f"{prefix}_cost"), days_chart(c, f"{prefix}_days")]
    speed = speedup_chart(c, f"{prefix}_speedup")
    if speed is not None:
        out.append(speed)
    if any(r.money.footprint is not None for r in rows):
        out.append(energy_chart(c, f"{prefix}_energy"))
    if c.kind == "training":
        ests = [r.estimate for r in rows if r.estimate is not None]
        labels = [f"{r.hardware} {r.precision}" for r in rows if r.estimate is not None]
        if ests:
            out.append(training_breakdown_chart(ests, labels, key=f"{prefix}_step"))
            out.append(training_memory_chart(ests, labels, key=f"{prefix}_memory"))
    if curves:
        try:
            cs, labels, what = serving_curves(c)
        except Infeasible:
            cs = []
        if cs:
            target = (
                c.workload.min_tokens_per_s_per_user
                if c.kind == "serving"
                else OUTLOOK["min_tokens_per_s_per_user"]
            )
            ch = inference_curve_chart(cs, labels, key=f"{prefix}_curve", target_per_user=target)
            out.append(
                Chart(key=ch.key, title=ch.title, reading=f"{ch.reading} Curves: {what}.", figure=ch.figure)
            )
    owned = [r for r in rows if r.money.tornado_own is not None and math.isfinite(r.money.own_usd)]
    if owned:
        pick = min(owned, key=lambda r: r.money.own_usd)
        out.append(tornado_chart(pick.money.tornado_own, pick.hardware, f"{prefix}_tornado"))
    return out


def comparison_report_html(result: Comparison | ComparisonSet) -> str:
    """The whole report of a comparison (or the embedded default's set) as one self-contained HTML page."""
    comps = result.comparisons if isinstance(result, ComparisonSet) else (result,)
    title = result.title
    charts: list[Chart] = []
    for i, c in enumerate(comps):
        for ch in comparison_charts(c, f"c{i}"):
            if len(comps) > 1:  # say which workload each chart belongs to
                ch = Chart(
                    key=ch.key,
                    title=f"{c.workload.label or c.workload.model}: {ch.title}",
                    reading=ch.reading,
                    figure=ch.figure,
                )
            charts.append(ch)
    subtitle = "GPUs compared: " + ", ".join(r.hardware for r in comps[0].rows)
    return render_html(
        title=title,
        subtitle=subtitle,
        charts=charts,
        tables=[comparison_table(c) for c in comps],
        notes=[
            "Every number is a model estimate (tenfold.perf + tenfold.cost); see docs/ for the validation "
            "against published runs."
        ],
    )


def write_comparison_report(result: Comparison | ComparisonSet, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(comparison_report_html(result), encoding="utf-8")
    return p
