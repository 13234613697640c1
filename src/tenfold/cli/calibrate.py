"""`tenfold calibrate training` / `tenfold calibrate inference`: fit the model's free parameters to the
user's own measured runs, and `user_calibration()`, which reads the `--calibration` file the other commands
take (of either kind)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tenfold.cli.output import check_range, fail, print_json, progress_bar, readable_file, writable_file
from tenfold.perf.calibration import Calibration, calibration_to_toml
from tenfold.perf.validation.calibrate import CalibrationResult, calibrate_on_runs, load_user_cases
from tenfold.perf.validation.user import check_calibration_dict, describe, load_user_calibration

app = typer.Typer(help="Calibrate the models on your own measured runs.", no_args_is_help=True)

CALIBRATION_HELP = "a training calibration written by `tenfold calibrate training` (default: the shipped fit)"
INFERENCE_CALIBRATION_HELP = (
    "an inference calibration written by `tenfold calibrate inference` (default: the shipped fit)"
)
USED_WITH = {
    "training": "estimate train, search train, compare and validate training",
    "inference": "estimate infer, validate inference and compare --serve",
}


@app.callback()
def _group() -> None:
    """Calibrate the models on your own runs."""


def user_calibration(
    path: str | Path | None, flag: str = "--calibration", *, kind: str = "training"
) -> Calibration | None:
    """The checked calibration file `path` of `kind` (None when no path is given). Exit 2 naming the flag,
    the file and the reason when it is missing, not TOML, lacks a key of the kind or holds a value outside
    its physical range."""
    if not path:
        return None
    p = readable_file(flag, path)
    try:
        return load_user_calibration(p, kind=kind)
    except (ValueError, OSError) as exc:
        raise fail(f"{flag} {p}: {exc}") from None


def calibration_label(path: str | Path, cal: Calibration) -> str:
    """'your calibration FILE (fitted on N rows of RUNS, DATE)': what the outputs say they used."""
    return f"your calibration {Path(path).name} ({describe(cal)}), not the shipped fit"


@app.command("training")
def training(
    runs: str = typer.Option(..., "--runs", help="CSV of your measured runs (schema: docs/validation.md)"),
    out: str = typer.Option(..., "--out", help="calibration file to write (TOML)"),
    iters: int = typer.Option(300, "--iters", help="Nelder-Mead iterations per restart (2 restarts)"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object instead of tables"),
) -> None:
    """Fit the training model's free parameters (GEMM, attention, HBM and link efficiencies, overheads)
    to your own runs, starting from the shipped calibration; write them to --out; report each row's error
    before and after, each parameter's shipped and fitted value, and warnings for parameters your rows
    cannot identify (those keep the shipped value). Use the file with --calibration on `estimate train`,
    `search train`, `compare` and `validate training`.

    Example: tenfold calibrate training --runs my_runs.csv --out my_cal.toml

    Exit codes: 0 written, 2 bad input (a row that cannot be predicted is named; nothing is written).
    """
    calibrate_kind("training", runs, out, iters, as_json)


@app.command("inference")
def inference(
    runs: str = typer.Option(
        ..., "--runs", help="CSV of your measured serving runs (schema of inference_runs.csv)"
    ),
    out: str = typer.Option(..., "--out", help="calibration file to write (TOML)"),
    iters: int = typer.Option(300, "--iters", help="Nelder-Mead iterations per restart (2 restarts)"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object instead of tables"),
) -> None:
    """Fit the serving model's free parameters (GEMM, attention, HBM, MoE efficiencies, per-kernel and
    per-expert overheads) to your own serving measurements, starting from the shipped inference
    calibration; write them to --out; report each row's error before and after, each parameter's shipped
    and fitted value, and warnings for parameters your rows cannot identify (those keep the shipped value).
    Use the file with --calibration on `estimate infer`, `validate inference` and `compare --serve`.

    Example: tenfold calibrate inference --runs my_serving.csv --out my_serving_cal.toml

    Exit codes: 0 written, 2 bad input (a row that cannot be predicted is named; nothing is written).
    """
    calibrate_kind("inference", runs, out, iters, as_json)


def calibrate_kind(kind: str, runs: str, out: str, iters: int, as_json: bool) -> None:
    """`tenfold calibrate KIND`: check the inputs (exit 2, nothing written), fit, write, report."""
    check_range("--iters", iters, 1, 100_000)
    src = readable_file("--runs", runs)
    dest = writable_file("--out", out)
    try:
        cases = load_user_cases(src, kind=kind)
    except (ValueError, KeyError) as exc:
        raise fail(f"--runs {src}: {exc}") from None
    with progress_bar("fitting", hidden=as_json, unit="iterations") as progress:
        result = calibrate_on_runs(
            cases,
            iters=iters,
            source=src.name.replace('"', "_").replace("\\", "_"),
            progress=progress,
            kind=kind,
        )
    header = (
        f"Written by `tenfold calibrate {kind} --runs {src.name}` on {result.calibration.fit['date']}:\n"
        f"the shipped {kind} calibration refitted on {len(cases)} measured run(s) of {src.name}.\n"
        f"Use it with --calibration on {USED_WITH[kind]}."
    )
    text = calibration_to_toml(result.calibration, header=header)
    check_calibration_dict(tomllib.loads(text), kind=kind)  # what is written must load back
    dest.write_text(text)
    if as_json:
        print_json(result.to_dict() | {"out": str(dest)})
        return
    show_result(result, dest)


def show_result(result: CalibrationResult, dest: Path) -> None:
    """Per-row before/after errors, per-parameter shipped -> fitted values, the warnings."""
    console = Console()
    t = Table(title="your runs: error before and after calibrating", box=box.SIMPLE_HEAD)
    t.add_column("id", overflow="fold", ratio=1)
    for col in ("measured", "before", "after"):
        t.add_column(col, justify="right", no_wrap=True)
    for r in result.rows:
        t.add_row(r.id, f"{r.measured:.4g}", f"{r.before:+.1%}", f"{r.after:+.1%}")
    t.add_row("MAPE", "", f"{result.mape_before:.1%}", f"{result.mape_after:.1%}")
    console.print(t)
    p = Table(title="free parameters: shipped -> fitted", box=box.SIMPLE_HEAD)
    p.add_column("parameter", overflow="fold", ratio=1)
    for col in ("shipped", "fitted", "status"):
        p.add_column(col, justify="right", no_wrap=True)
    for x in result.parameters:
        p.add_row(x.name, f"{x.start:.4g}", f"{x.fitted:.4g}", x.status)
    console.print(p)
    for w in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(w)}")
    console.print(f"calibration written to {escape(str(dest))}")
