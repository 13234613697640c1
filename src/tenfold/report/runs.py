"""The report of training runs (`tenfold report RUN_DIR`): loss curves per recipe and a summary table.

A run directory is what `tenfold train --out DIR` writes: `DIR/<recipe>/metrics.jsonl` (one JSON object
per optimizer step: step, loss, lr, grad_norm, tokens_per_s, and val_loss on evaluation steps) and
`summary.json`. RUN_DIR may be one recipe's folder or the folder holding several. Read as JSON: no torch.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tenfold.report.charts import layout
from tenfold.report.page import Chart, HtmlTable, render_html


@dataclass(frozen=True, kw_only=True)
class Run:
    """One recipe's run: its name (folder), per-step rows, and summary.json (empty if absent)."""

    name: str
    path: Path
    steps: tuple[dict[str, Any], ...]
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def evals(self) -> list[tuple[int, float]]:
        return [(int(r["step"]), float(r["val_loss"])) for r in self.steps if r.get("val_loss") is not None]


def load_run(path: str | Path) -> Run:
    """One run folder with a metrics.jsonl; ValueError naming the file and line if it is malformed."""
    p = Path(path)
    metrics = p / "metrics.jsonl"
    if not metrics.is_file():
        raise ValueError(f"{p}: no metrics.jsonl (write one with `tenfold train --out {p.parent}`)")
    rows = []
    for i, line in enumerate(metrics.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{metrics}:{i}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict) or "step" not in row or "loss" not in row:
            raise ValueError(f"{metrics}:{i}: a row needs 'step' and 'loss', got {line[:80]!r}")
        rows.append(row)
    if not rows:
        raise ValueError(f"{metrics}: no rows")
    summary_path = p / "summary.json"
    summary = json.loads(summary_path.read_text(encoding="utf-8")) if summary_path.is_file() else {}
    return Run(name=str(summary.get("recipe") or p.name), path=p, steps=tuple(rows), summary=summary)


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


def _fmt(v: Any, spec: str) -> str:
    if isinstance(v, int | float) and math.isfinite(v):
        return format(v, spec)
    return "-"


def runs_table(runs: list[Run]) -> HtmlTable:
    rows = []
    for r in runs:
        s = r.summary
        ev = r.evals
        rows.append(
            (
                r.name,
                str(len(r.steps)),
                _fmt(float(r.steps[-1]["loss"]), ".4f"),
                _fmt(ev[-1][1] if ev else s.get("final_val_loss", math.nan), ".4f"),
                _fmt(s.get("tokens_per_s", math.nan), ",.0f"),
                _fmt(s.get("wall_s", math.nan), ",.1f"),
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


def run_charts(runs: list[Run]) -> list[Chart]:
    """Every chart of a set of runs (the loss curves; the dynamic-range heat-map where telemetry exists)."""
    return [loss_chart(runs)]


def runs_report_html(runs: list[Run], *, title: str = "Training runs") -> str:
    return render_html(
        title=title,
        subtitle=f"{len(runs)} run(s): " + ", ".join(r.name for r in runs),
        charts=run_charts(runs),
        tables=[runs_table(runs)],
    )
