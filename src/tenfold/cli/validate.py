"""`tenfold validate training` / `tenfold validate inference`: predict published runs with their own
layouts or deployments and report the error per row and as MAPE (overall, by GPU, by reliability)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from tenfold.cli.calibrate import (
    CALIBRATION_HELP,
    INFERENCE_CALIBRATION_HELP,
    calibration_label,
    user_calibration,
)
from tenfold.cli.output import fail, print_json, readable_file
from tenfold.perf.calibration import Calibration
from tenfold.perf.validation import serving as vi
from tenfold.perf.validation.rows import scored_rows
from tenfold.perf.validation.training import ValidationReport, default_runs_path, validate_training
from tenfold.report.format import fmt_number

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
    calibration: str = typer.Option("", "--calibration", help=INFERENCE_CALIBRATION_HELP),
) -> None:
    """Predict each serving row with its own deployment, formats and engine; print predicted, measured, the
    80 % range and the error per row (and the leave-one-source-out error where the stored cross-validation
    covers the row), then the MAPE overall, by GPU and by reliability, and how many measurements the ranges
    cover. Rows that cannot be predicted (no lengths, no GPU count, ...) are listed with the reason.

    Example: tenfold validate inference --runs src/tenfold/data/validation/inference_runs.csv --json
    """
    path = readable_file("--runs", runs) if runs else vi.default_runs_path()
    cal = user_calibration(calibration, kind="inference")
    try:
        report = vi.validate_inference(path, calibration=cal)
    except (ValueError, KeyError) as exc:
        raise fail(f"--runs {exc}") from None
    check_rows(report, path, "inference")
    show_report(
        report,
        title=f"inference runs: predicted vs measured ({path.name})",
        as_json=as_json,
        sample=user_sample(calibration, cal) if cal else sample_kind(path, vi.default_runs_path()),
    )


def check_rows(report: ValidationReport, path: Path, kind: str) -> None:
    """Exit 2 when no row of `path` could be predicted (a header-only file, or runs of the other kind):
    a MAPE over no rows is not an accuracy."""
    if report.rows:
        return
    why = "; ".join(sorted({w for _, w in report.unpredictable})[:2]) or "the file has no rows"
    raise fail(f"--runs {path}: no {kind} row could be predicted ({len(report.unpredictable)} rows; {why})")


IN_SAMPLE = (
    "in-sample for the rows marked fit (the calibration's free parameters were fitted on them); rows marked "
    "holdout were never fitted on; the CV columns are leave-one-source-out cross-validation (docs/perf.md)"
)
DEFECT = (
    "rows marked defect: their publisher's own tables show the run slowed by a software fault (a patch "
    "container of the same release, or a GPU no stronger in the same table, runs the same model at least "
    "1.3x faster); shown, never fitted, left out of the overall MAPE and coverage (docs/validation.md)"
)
NOT_FITTED = "rows from your file: not used in the fit, unless they repeat shipped rows"


def sample_kind(path: Path, shipped: Path) -> str:
    """Which kind of accuracy a report on `path` measures: in-sample for the shipped rows the calibration was
    fitted on, otherwise rows the fit did not see."""
    return IN_SAMPLE if path.resolve() == Path(str(shipped)).resolve() else NOT_FITTED


def predicted_cell(predicted: float, span: tuple[float, float] | None) -> str:
    """The predicted value, with the range over a row's unstated knobs under it when there is one
    ("152" over "(141-163)", which keeps the table within 80 columns): the error scores the midpoint."""
    if span is None:
        return f"{predicted:.4g}"

    def short(x: float) -> str:  # 3 significant digits, no exponent for large values
        return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"

    return f"{predicted:.4g}\n({short(span[0])}-{short(span[1])})"


def show_report(report: ValidationReport, *, title: str, as_json: bool, sample: str) -> None:
    """Per-row table (in-sample error, and the leave-one-source-out error where the stored cross-validation
    covers the row), MAPE table with both labelled, interval coverage, and the unpredicted rows with their
    reasons (or one JSON object with an `accuracy` field saying which)."""
    if as_json:
        print_json({**report.to_dict(), "accuracy": sample})
        return
    console = Console()
    has_cv = any(r.cv_error is not None for r in report.rows)
    # numbers never wrap or get cut; the one text column (run, hardware, metric, layout) takes the rest of
    # the width and folds, so the table fits 80 columns with the id still readable
    t = Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    t.add_column("run: id, GPUs, metric (reliability), layout used", overflow="fold", ratio=1)
    for col in ("measured", "predicted", "80 % range", "error", *(("CV error",) if has_cv else ())):
        t.add_column(col, justify="right", no_wrap=True)
    for r in report.rows:
        tag = "" if r.split == "fit" else f" {r.split}"
        t.add_row(
            f"{r.id}{tag}\n{r.num_gpus} x {r.gpu}, {r.metric} ({r.reliability})\n[dim]{r.layout}[/dim]",
            f"{r.measured:.4g}",
            predicted_cell(r.predicted, r.predicted_range),
            ""
            if r.interval is None
            else f"{fmt_number(r.interval[0], '.4g')}-\n{fmt_number(r.interval[1], '.4g')}",
            error_cell(r.error),
            *((error_cell(r.cv_error),) if has_cv else ()),
        )
    console.print(t)
    console.print(summary_table(report, has_cv))
    if report.cross_validation:
        cv = report.cross_validation
        console.print(
            f"cross-validated (CV): {cv['method']}; {cv['rows']} rows from {cv['sources']} sources, "
            f"MAPE {cv['mape']:.1%}, 80 % intervals cover {cv['coverage']:.0%} of rows"
        )
    if report.coverage == report.coverage:  # not NaN
        console.print(f"80 % intervals around the predictions above cover {report.coverage:.0%} of rows")
    console.print(f"accuracy: {sample}")
    if any(r.split == "defect" for r in report.rows):
        console.print(DEFECT)
    for rid, why in report.unpredictable:
        console.print(f"[yellow]not predicted[/yellow] {rid}: {why}")


def error_cell(error: float | None) -> str:
    """A signed error, coloured by size (blank when there is none)."""
    if error is None:
        return ""
    colour = "green" if abs(error) <= 0.05 else "yellow" if abs(error) <= 0.15 else "red"
    return f"[{colour}]{error:+.1%}[/{colour}]"


def summary_table(report: ValidationReport, has_cv: bool) -> Table:
    """MAPE overall and by split, GPU and reliability; a CV column beside the in-sample one. Rows marked
    `defect` have a row of their own and are left out of the others."""
    s = Table(title="mean absolute percentage error")
    s.add_column("group")
    s.add_column("rows", justify="right")
    s.add_column("MAPE", justify="right")
    if has_cv:
        s.add_column("CV MAPE", justify="right")
    scored = scored_rows(report.rows)
    groups: dict[str, list] = {"overall": scored}
    for r in report.rows:
        groups.setdefault(f"split {r.split}", []).append(r)
    for r in scored:
        for key in (f"gpu {r.gpu}", f"reliability {r.reliability}"):
            groups.setdefault(key, []).append(r)
    for name, rows in groups.items():
        if name.startswith("split") and all(r.split == "fit" for r in report.rows):
            continue  # one split: the overall row says it
        mape = sum(abs(r.error) for r in rows) / len(rows)
        cells = [name, str(len(rows)), f"{mape:.1%}"]
        if has_cv:
            cv = [abs(r.cv_error) for r in rows if r.cv_error is not None]
            cells.append(f"{sum(cv) / len(cv):.1%}" if cv else "")
        s.add_row(*cells)
    return s
