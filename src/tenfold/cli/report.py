"""`tenfold report RUN_DIR`: one self-contained HTML report of training runs (loss curves per recipe)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from tenfold.cli.output import check_writable_dir, fail, print_json

RUN_DIR = typer.Argument(..., help="a run folder from `tenfold train --out DIR` (or DIR itself)")
OUT = typer.Option(None, "--out", "-o", help="HTML file (default: RUN_DIR/report.html)")


def report(
    run_dir: Path = RUN_DIR,
    out: Path | None = OUT,
    as_json: bool = typer.Option(False, "--json", help="print what was written as one JSON object"),
) -> None:
    """Write a self-contained HTML report (Plotly inlined, no network when opened) of training runs:
    loss curves per recipe, a summary table, and the dynamic-range heat-map where telemetry exists.

    Example: tenfold train --recipe nvfp4 --steps 100 --model tiny --out runs; tenfold report runs

    Exit codes: 0 written, 2 bad input (no such folder, no metrics.jsonl, malformed rows).
    """
    from tenfold.report.runs import load_runs, run_charts, runs_report_html

    path = out or run_dir / "report.html"
    try:
        if path.is_dir():
            raise ValueError(f"--out {str(path)!r} is a folder; give an .html file name")
        if out is not None:
            check_writable_dir(path.parent, "--out's folder")
        runs = load_runs(run_dir)
        html = runs_report_html(runs, title=f"Training runs in {run_dir}")
    except (ValueError, OSError) as exc:
        raise fail(str(exc)) from None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html, encoding="utf-8")
    charts = run_charts(runs)
    if as_json:
        print_json(
            {
                "report": str(path),
                "runs": [r.name for r in runs],
                "charts": [{"key": c.key, "title": c.title, "reading": c.reading} for c in charts],
            }
        )
        return
    t = Table(title=f"report written to {path}")
    t.add_column("chart")
    t.add_column("reading")
    for c in charts:
        t.add_row(c.title, c.reading)
    Console().print(t)
