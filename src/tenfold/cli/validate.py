"""`tenfold validate training` / `tenfold validate inference`: predict published runs with their own
layouts or deployments and report the error per row and as MAPE (overall, by GPU, by reliability)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from tenfold.cli.calibrate import CALIBRATION_HELP, calibration_label, user_calibration
from tenfold.cli.output import fail, print_json, readable_file
from tenfold.perf.calibration import Calibration
from tenfold.perf.validation import serving as vi
from tenfold.perf.validation.training import ValidationReport, default_runs_path, validate_training

app = typer.Typer(help="Validate the models against published measurements.", no_args_is_help=True)


@app.callback()
def _group() -> None:
    """Validate against published measurements."""


@app.command("training")
def training(
    runs: str = typer.Option("", "--runs", help="CSV of runs (default: the shipped training_runs.csv)"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object with `rows` and `mape`"),
    calibration: str = typer.Option("", "--calibration", help=CALIBRATION_HELP),
) -> None:
    """Predict each row's metric with the row's own layout; print predicted, measured and error per row,
    then the mean absolute percentage error overall, by GPU and by reliability. Rows that cannot be
    predicted are listed with the reason.

    Example: tenfold validate training --runs src/tenfold/data/validation/training_runs.csv --json
    """
    path = readable_file("--runs", runs) if runs else default_runs_path()
    cal = user_calibration(calibration)
    try:
        report = validate_training(path, calibration=cal)
    except (ValueError, KeyError) as exc:
        raise fail(f"--runs {exc}") from None
    check_rows(report, path, "training")
    show_report(
        report,
        title=f"training runs: predicted vs measured ({path.name})",
        as_json=as_json,
        sample=user_sample(calibration, cal) if cal else sample_kind(path, default_runs_path()),
    )


def user_sample(path: str, cal: Calibration) -> str:
    """The accuracy label of rows scored with a user calibration: in-sample for the rows it was fitted on."""
    return (
        f"scored with {calibration_label(path, cal)}; rows that calibration was fitted on are in-sample "
        "for it"
    )


@app.command("inference")
def inference(
    runs: str = typer.Option("", "--runs", help="CSV of runs (default: the shipped inference_runs.csv)"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object with `rows` and `mape`"),
) -> None:
    """Predict each serving row with its own deployment, formats and engine; print predicted, measured and
    error per row, then the MAPE overall, by GPU and by reliability. Rows that cannot be predicted (no
    lengths, no GPU count, ...) are listed with the reason.

    Example: tenfold validate inference --runs src/tenfold/data/validation/inference_runs.csv --json
    """
    path = readable_file("--runs", runs) if runs else vi.default_runs_path()
    try:
        report = vi.validate_inference(path)
    except (ValueError, KeyError) as exc:
        raise fail(f"--runs {exc}") from None
    check_rows(report, path, "inference")
    show_report(
        report,
        title=f"inference runs: predicted vs measured ({path.name})",
        as_json=as_json,
        sample=sample_kind(path, vi.default_runs_path()),
    )


def check_rows(report: ValidationReport, path: Path, kind: str) -> None:
    """Exit 2 when no row of `path` could be predicted (a header-only file, or runs of the other kind):
    a MAPE over no rows is not an accuracy."""
    if report.rows:
        return
    why = "; ".join(sorted({w for _, w in report.unpredictable})[:2]) or "the file has no rows"
    raise fail(f"--runs {path}: no {kind} row could be predicted ({len(report.unpredictable)} rows; {why})")


IN_SAMPLE = (
    "in-sample: the calibration's free parameters were fitted on these rows; "
    "held-out figures (leave-one-out; fit on half, predict the other) are in docs/perf.md, docs/inference.md"
)
NOT_FITTED = "rows from your file: not used in the fit, unless they repeat shipped rows"


def sample_kind(path: Path, shipped: Path) -> str:
    """Which kind of accuracy a report on `path` measures: in-sample for the shipped rows the calibration was
    fitted on, otherwise rows the fit did not see."""
    return IN_SAMPLE if path.resolve() == Path(str(shipped)).resolve() else NOT_FITTED


def show_report(report: ValidationReport, *, title: str, as_json: bool, sample: str) -> None:
    """Per-row table, MAPE table labelled in-sample or not, and the unpredicted rows with their reasons (or
    one JSON object with an `accuracy` field saying which)."""
    if as_json:
        print_json({**report.to_dict(), "accuracy": sample})
        return
    console = Console()
    # numbers never wrap or get cut; the text columns fold, so the table fits 80 columns
    t = Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    numbers = ("GPUs", "measured", "predicted", "error")
    for col in ("id, GPU, metric (reliability)", *numbers, "layout used"):
        if col in numbers:
            t.add_column(col, justify="right", no_wrap=True)
        else:
            t.add_column(col, overflow="fold", ratio=1)
    for r in report.rows:
        colour = "green" if abs(r.error) <= 0.05 else "yellow" if abs(r.error) <= 0.15 else "red"
        t.add_row(
            f"{r.id}\n{r.gpu}, {r.metric} ({r.reliability})",
            str(r.num_gpus),
            f"{r.measured:.4g}",
            f"{r.predicted:.4g}",
            f"[{colour}]{r.error:+.1%}[/{colour}]",
            r.layout,
        )
    console.print(t)
    s = Table(title="mean absolute percentage error")
    s.add_column("group")
    s.add_column("rows", justify="right")
    s.add_column("MAPE", justify="right")
    counts: dict[str, int] = {}
    for r in report.rows:
        for key in (f"gpu {r.gpu}", f"reliability {r.reliability}"):
            counts[key] = counts.get(key, 0) + 1
    s.add_row("overall", str(len(report.rows)), f"{report.mape:.1%}")
    for g, v in report.mape_by_gpu.items():
        s.add_row(f"gpu {g}", str(counts[f"gpu {g}"]), f"{v:.1%}")
    for g, v in report.mape_by_reliability.items():
        s.add_row(f"reliability {g}", str(counts[f"reliability {g}"]), f"{v:.1%}")
    console.print(s)
    console.print(f"accuracy: {sample}")
    for rid, why in report.unpredictable:
        console.print(f"[yellow]not predicted[/yellow] {rid}: {why}")
