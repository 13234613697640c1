"""The report of training runs (`tenfold report RUN_DIR`): loss curves per recipe and a summary table.

A run directory is what `tenfold train --out DIR` writes: `DIR/<recipe>/metrics.jsonl` (one JSON object
per optimizer step: step, loss, lr, grad_norm, tokens_per_s, and val_loss on evaluation steps) and
`summary.json`; with telemetry, `telemetry.jsonl` (one object per GEMM operand per sampled step, written by
the engine's telemetry Recorder: step, layer, gemm, tensor, recipe, what_if, amax, clip_frac,
underflow_frac, sqnr_db, ...), drawn as the dynamic-range heat-map. RUN_DIR may be one recipe's folder or
the folder holding several. Read as JSON: no torch.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tenfold.jsonl import read_jsonl
from tenfold.report.charts import layout
from tenfold.report.format import fmt_number
from tenfold.report.page import Chart, HtmlTable, render_html


@dataclass(frozen=True, kw_only=True)
class Run:
    """One recipe's run: its name (folder), per-step rows, and summary.json (empty if absent)."""

    name: str
    path: Path
    steps: tuple[dict[str, Any], ...]
    summary: dict[str, Any] = field(default_factory=dict)
    telemetry: tuple[dict[str, Any], ...] = ()

    @property
    def evals(self) -> list[tuple[int, float]]:
        return [(int(r["step"]), float(r["val_loss"])) for r in self.steps if r.get("val_loss") is not None]


TELEMETRY_KEYS = ("step", "layer", "gemm", "tensor", "amax")


def load_run(path: str | Path) -> Run:
    """One run folder with a metrics.jsonl (and optionally telemetry.jsonl and summary.json)."""
    p = Path(path)
    metrics = p / "metrics.jsonl"
    if not metrics.is_file():
        raise ValueError(f"{p}: no metrics.jsonl (write one with `tenfold train --out {p.parent}`)")
    rows = read_jsonl(metrics, ("step", "loss"))
    if not rows:
        raise ValueError(f"{metrics}: no rows")
    tele = p / "telemetry.jsonl"
    # an empty telemetry file is a run with nothing quantized (bf16): no telemetry, not an error
    telemetry = read_jsonl(tele, TELEMETRY_KEYS) if tele.is_file() else []
    summary_path = p / "summary.json"
    summary = json.loads(summary_path.read_text(encoding="utf-8")) if summary_path.is_file() else {}
    return Run(
        name=str(summary.get("recipe") or p.name),
        path=p,
        steps=tuple(rows),
        summary=summary,
        telemetry=tuple(telemetry),
    )


def load_runs(run_dir: str | Path) -> list[Run]:
    """The run in `run_dir`, or every run in its subfolders (sorted by name)."""
    p = Path(run_dir)
    if not p.is_dir():
        raise ValueError(f"{p}: not a directory")
    if (p / "metrics.jsonl").is_file():
        return [load_run(p)]
    runs = [load_run(d) for d in sorted(p.iterdir()) if d.is_dir() and (d / "metrics.jsonl").is_file()]
    if not runs:
        raise ValueError(f"{p}: no run folders with a metrics.jsonl")
    return runs


def smooth(values: list[float], window: int) -> list[float]:
    """Trailing moving average over `window` steps (the first steps average what there is)."""
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def loss_chart(runs: list[Run], *, key: str = "loss") -> Chart:
    """Training loss (smoothed) and validation loss per recipe against the optimizer step."""
    data = []
    finals = []
    for run in runs:
        xs = [int(r["step"]) for r in run.steps]
        ys = [float(r["loss"]) for r in run.steps]
        w = max(1, min(20, len(ys) // 10))
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"{run.name} train (mean of {w})",
                "legendgroup": run.name,
                "x": xs,
                "y": smooth(ys, w),
                "hovertemplate": "step %{x}<br>train loss %{y:.4f}<extra>" + run.name + "</extra>",
            }
        )
        ev = run.evals
        if ev:
            data.append(
                {
                    "type": "scatter",
                    "mode": "markers",
                    "name": f"{run.name} validation",
                    "legendgroup": run.name,
                    "x": [s for s, _ in ev],
                    "y": [v for _, v in ev],
                    "marker": {"symbol": "diamond", "size": 8},
                    "hovertemplate": "step %{x}<br>val loss %{y:.4f}<extra>" + run.name + "</extra>",
                }
            )
            finals.append((run.name, ev[-1][1]))
        else:
            finals.append((run.name, ys[-1]))
    best_name, best = min(finals, key=lambda nv: nv[1])
    reading = f"Lowest final loss: {best_name} at {best:.4f} nats per byte"
    if len(finals) > 1:
        worst_name, worst = max(finals, key=lambda nv: nv[1])
        reading += f"; {worst_name} ends {worst - best:+.4f} ({(worst - best) / best:+.1%}) above it"
    reading += " (validation loss where the run evaluated, else the last training step)."
    fig = {
        "data": data,
        "layout": layout("Loss per recipe", "optimizer step", "cross-entropy loss (nats per byte)"),
    }
    return Chart(key=key, title="Loss curves per recipe (nats per byte)", reading=reading, figure=fig)


def runs_table(runs: list[Run]) -> HtmlTable:
    rows = []
    for r in runs:
        s = r.summary
        ev = r.evals
        rows.append(
            (
                r.name,
                str(len(r.steps)),
                fmt_number(float(r.steps[-1]["loss"]), ".4f"),
                fmt_number(ev[-1][1] if ev else s.get("final_val_loss", math.nan), ".4f"),
                fmt_number(s.get("tokens_per_s", math.nan), ",.0f"),
                fmt_number(s.get("wall_s", math.nan), ",.1f"),
                f"{s.get('converted_layers', '-')} / {s.get('kept_layers', '-')}",
            )
        )
    return HtmlTable(
        caption="Runs",
        columns=(
            "recipe",
            "steps",
            "final train loss",
            "final val loss",
            "tokens/s",
            "wall s",
            "quantized / kept",
        ),
        rows=tuple(rows),
    )


def dynamic_range_chart(run: Run, *, key: str | None = None) -> Chart:
    """Heat-map of log2(amax) for every GEMM operand (rows: layer and operand) at every sampled step
    (columns), from the run's own recipe (what-if records left out); the hover adds the clipped and
    underflowed fractions and the SQNR."""
    recs = [r for r in run.telemetry if not r.get("what_if")]
    if not recs:
        raise ValueError(f"{run.name}: no telemetry records of the run's own recipe")
    steps = sorted({int(r["step"]) for r in recs})
    rows = sorted({(str(r["layer"]), str(r["gemm"]), str(r["tensor"])) for r in recs})
    col = {s: j for j, s in enumerate(steps)}
    row = {k: i for i, k in enumerate(rows)}
    z: list[list[float | None]] = [[None] * len(steps) for _ in rows]
    text: list[list[str]] = [[""] * len(steps) for _ in rows]
    worst_under = (0.0, "")
    worst_clip = (0.0, "")
    for r in recs:
        i, j = row[(str(r["layer"]), str(r["gemm"]), str(r["tensor"]))], col[int(r["step"])]
        amax = float(r["amax"])
        z[i][j] = math.log2(amax) if amax > 0 else None
        under, clip = float(r.get("underflow_frac") or 0.0), float(r.get("clip_frac") or 0.0)
        sq = r.get("sqnr_db")
        sq_text = f"{sq:.1f} dB" if isinstance(sq, int | float) else "exact"
        text[i][j] = f"amax {amax:.3g}<br>clipped {clip:.2%}<br>underflow {under:.2%}<br>SQNR {sq_text}"
        label = f"{r['layer']} {r['gemm']}.{r['tensor']} (step {r['step']})"
        worst_under = max(worst_under, (under, label))
        worst_clip = max(worst_clip, (clip, label))
    flat = [v for line in z for v in line if v is not None]
    labels = [f"{layer} {gemm}.{tensor}" for layer, gemm, tensor in rows]
    reading = (
        f"Operand amax spans 2^{min(flat):.1f} to 2^{max(flat):.1f} ({max(flat) - min(flat):.1f} octaves) "
        f"over {len(rows)} operands and {len(steps)} sampled steps"
    )
    if worst_under[0] > 0:
        reading += f"; most underflow: {worst_under[1]} at {worst_under[0]:.2%}"
    if worst_clip[0] > 0:
        reading += f"; most clipping: {worst_clip[1]} at {worst_clip[0]:.2%}"
    reading += "."
    fig = {
        "data": [
            {
                "type": "heatmap",
                "x": steps,
                "y": labels,
                "z": z,
                "text": text,
                "colorscale": "Viridis",
                "colorbar": {"title": {"text": "log2 amax"}},
                "hovertemplate": "%{y}<br>step %{x}<br>%{text}<extra></extra>",
            }
        ],
        "layout": layout(
            f"Dynamic range: {run.name}",
            "optimizer step",
            "layer and GEMM operand",
            height=max(420, 60 + 14 * len(rows)),
        ),
    }
    return Chart(
        key=key or f"dynrange_{run.name}".replace(".", "_"),
        title=f"Dynamic range per GEMM operand, {run.name} (log2 of amax)",
        reading=reading,
        figure=fig,
    )


def sqnr_heatmap_chart(
    layers: list[str], steps: list[int], grid: list[list[float]], *, key: str = "sqnr_heatmap"
) -> Chart:
    """Heat-map of the lowest operand SQNR (dB) of each layer (rows) at each sampled step (columns), as
    `tenfold inspect` writes it: red = least precise; NaN cells (exact, or no record) are left blank.
    Takes the grid (`engine.telemetry.risk.heatmap_grid`) rather than the records, so that the report
    never imports the engine."""
    if not layers:
        raise ValueError("no records of the training recipe to plot")
    cells = [
        (v, layers[i], steps[j])
        for i, row in enumerate(grid)
        for j, v in enumerate(row)
        if isinstance(v, int | float) and math.isfinite(v)
    ]
    reading = f"{len(layers)} layers over {len(steps)} sampled steps"
    if cells:
        low, layer, step = min(cells)
        reading += f"; lowest SQNR {low:.1f} dB ({layer} at step {step}), highest {max(cells)[0]:.1f} dB"
    else:
        reading += "; every operand exact"
    fig = {
        "data": [
            {
                "type": "heatmap",
                "x": [str(s) for s in steps],
                "y": layers,
                "z": grid,
                "colorscale": "RdYlGn",
                "colorbar": {"title": {"text": "SQNR (dB)"}},
                "hovertemplate": "%{y}<br>step %{x}<br>lowest SQNR %{z:.1f} dB<extra></extra>",
            }
        ],
        "layout": layout(
            "Lowest operand SQNR per layer (dB): red = least precise",
            "training step",
            "layer",
            height=max(360, 60 + 18 * len(layers)),
            yaxis={"autorange": "reversed", "automargin": True, "title": {"text": "layer"}},
            xaxis={"type": "category", "automargin": True, "title": {"text": "training step"}},
        ),
    }
    return Chart(
        key=key, title="Lowest operand SQNR per layer and step (dB)", reading=reading + ".", figure=fig
    )


def run_charts(runs: list[Run]) -> list[Chart]:
    """Every chart of a set of runs: the loss curves, and a dynamic-range heat-map per run with telemetry."""
    out = [loss_chart(runs)]
    for i, run in enumerate(runs):
        if any(not r.get("what_if") for r in run.telemetry):
            out.append(dynamic_range_chart(run, key=f"dynrange_{i}"))
    return out


def runs_report_html(runs: list[Run], *, title: str = "Training runs") -> str:
    return render_html(
        title=title,
        subtitle=f"{len(runs)} run(s): " + ", ".join(r.name for r in runs),
        charts=run_charts(runs),
        tables=[runs_table(runs)],
    )
