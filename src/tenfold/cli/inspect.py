"""`tenfold inspect RUN_DIR`: the layers most at risk in low precision, from a run's telemetry."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from tenfold.cli.output import check_writable_dir


def inspect(
    run_dir: str = typer.Argument(..., help="a run folder written by `tenfold train` with telemetry on"),
    top: int = typer.Option(20, help="rows to print (most at risk first); 0: all"),
    what_if: bool = typer.Option(False, "--what-if", help="rank the what-if recipes' figures instead"),
    heatmap: str | None = typer.Option(
        None, help="heat-map, a self-contained HTML page (default: RUN_DIR/telemetry_heatmap.html)"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the table as JSON"),
) -> None:
    """Rank layers by risk (clipped + underflowed fraction, then lowest SQNR) and write a heat-map (HTML,
    Plotly inlined: opens without a network).

    Example: tenfold train --recipe nvfp4 --steps 200 --out runs && tenfold inspect runs/nvfp4
    """
    if top < 0:
        raise typer.BadParameter(f"--top must be >= 0, got {top}")
    if not Path(run_dir).is_dir():
        raise typer.BadParameter(f"RUN_DIR {run_dir!r} is not a folder (a run written by `tenfold train`)")
    page = Path(heatmap) if heatmap else Path(run_dir) / "telemetry_heatmap.html"
    if page.suffix.lower() not in (".html", ".htm"):
        raise typer.BadParameter(
            f"--heatmap {heatmap}: the heat-map is a self-contained HTML page (Plotly), no longer a PNG; "
            "give a path ending in .html"
        )
    try:
        if page.is_dir():
            raise ValueError(f"--heatmap {str(page)!r} is a folder; give a file name ending in .html")
        check_writable_dir(page.parent, "--heatmap's folder")
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    # torch (through the telemetry reader) only once the arguments are known to be good
    from tenfold.engine.telemetry.risk import heatmap_grid, load_records, risk_table, rows_to_dicts
    from tenfold.report.page import write_html
    from tenfold.report.runs import sqnr_heatmap_chart

    try:
        records = load_records(run_dir)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    rows = risk_table(records, what_if=what_if)
    layers, steps, grid = heatmap_grid(records)
    try:
        chart = sqnr_heatmap_chart(layers, steps, grid)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    page = write_html(
        page, title=f"Telemetry of {run_dir}", subtitle=f"{len(records)} records", charts=[chart]
    )
    shown = rows if top == 0 else rows[:top]
    if as_json:
        typer.echo(json.dumps({"rows": rows_to_dicts(shown), "heatmap": str(page), "total_rows": len(rows)}))
        return
    recipes = sorted({r.recipe for r in shown})
    title = f"{run_dir}: operands by risk ({len(shown)} of {len(rows)})"
    if len(recipes) == 1:
        title += f", {recipes[0]}"
    t = Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 1))
    cols = ["layer", "operand", *(["recipe"] if len(recipes) > 1 else []), "clipped max", "underflow max"]
    for col in (*cols, "SQNR min dB", "amax"):
        left = col in ("layer", "operand", "recipe")
        t.add_column(col.replace(" ", "\n"), justify="left" if left else "right", overflow="fold")
    for r in shown:
        sq = "exact" if r.sqnr_db_min is None else f"{r.sqnr_db_min:.1f}"
        t.add_row(
            r.layer,
            f"{r.gemm}.{r.tensor}",
            *([r.recipe] if len(recipes) > 1 else []),
            f"{r.clip_frac_max:.2%}",
            f"{r.underflow_frac_max:.2%}",
            sq,
            f"{r.amax_last:.3g}",
        )
    console = Console()
    console.print(t)
    console.print(f"heat-map: {page}")
