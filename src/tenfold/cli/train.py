"""`tenfold train`: train the reference GPT byte-level under a low-precision recipe."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tenfold.cli.output import check_memory, check_writable_dir

if TYPE_CHECKING:
    from tenfold.train import TrainConfig

# torch and the engine are imported inside the command, so that `tenfold` starts without torch for the
# planning commands; the help therefore names the recipes and sizes itself (a test keeps it in sync).
RECIPE_HELP = (
    "recipe: bf16, fp8_delayed, fp8_current, fp8_rowwise, fp8_block, mxfp8, mxfp8_floor, nvfp4, "
    "nvfp4_no_rht, nvfp4_no_sr, nvfp4_no_2d, nvfp4_no_hp_layers, nvfp4_4over6, nvfp4_4over6_weights, "
    "nvfp4_4over6_activations, nvfp4_row_scaled, mxfp4, mxfp8_2d"
)
SIZE_HELP = "model size: tiny, small, base"
PLOT_NAME = "loss.html"  # loss curves, the runs table and the telemetry heat-map (tenfold.report.runs)
# what a run folder holds once `train` (and `inspect`, `sensitivity`) wrote it: --overwrite clears these
RUN_FILES = (
    "metrics.jsonl",
    "summary.json",
    "weights.pt",
    PLOT_NAME,
    "telemetry.jsonl",
    "tb",
    "policy.toml",
    "telemetry_heatmap.html",
)


def check_train_args(*, data: str | None, lr: float, run_dir: Path, out: str, overwrite: bool) -> None:
    """The checks that need no torch, so that a bad flag exits in well under a second."""
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"--lr must be a finite number > 0, got {lr}")
    if data is not None:
        p = Path(data)
        if p.is_dir():
            raise ValueError(f"--data {data!r} is a folder; give a text file")
        if not p.is_file():
            raise ValueError(f"--data {data!r} does not exist")
        if not os.access(p, os.R_OK):
            raise ValueError(f"--data {data!r} is not readable")
        if p.stat().st_size == 0:
            raise ValueError(f"--data {data!r} is empty")
    check_writable_dir(Path(out), "--out")
    check_writable_dir(run_dir, "--out")
    if run_dir.is_dir() and any(run_dir.iterdir()) and not overwrite:
        raise ValueError(
            f"--out: run folder {str(run_dir)!r} already holds a run; pass --overwrite to replace it "
            "or choose another --out"
        )


def clear_run(run_dir: Path) -> None:
    """Remove what an earlier run wrote in `run_dir` (RUN_FILES), so no stale file sits beside new ones."""
    for name in RUN_FILES:
        p = run_dir / name
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink(missing_ok=True)


def train(
    recipe: str = typer.Option("bf16", "--recipe", "-r", help=RECIPE_HELP),
    policy: str | None = typer.Option(
        None, "--policy", help="per-layer precision policy TOML (from `tenfold policy`); replaces --recipe"
    ),
    data: str | None = typer.Option(
        None, help="text file (default: the standard library's source, no download)"
    ),
    steps: int = typer.Option(200, help="optimizer steps"),
    model: str = typer.Option("small", help=SIZE_HELP),
    n_layers: int | None = typer.Option(None, help="override the size's number of blocks"),
    d_model: int | None = typer.Option(None, help="override the size's width"),
    seq_len: int | None = typer.Option(None, help="override the size's sequence length"),
    batch_size: int = typer.Option(16, help="sequences per step"),
    lr: float = typer.Option(2e-3, help="peak learning rate (cosine decay, linear warm-up)"),
    eval_every: int = typer.Option(50, help="steps between validation passes (0: only at the end)"),
    seed: int = typer.Option(0, help="initialisation, data and stochastic-rounding seed"),
    backend: str = typer.Option("auto", help="GEMM backend: auto | emulated | native"),
    compile_model: bool = typer.Option(False, "--compile", help="wrap the model in torch.compile"),
    threads: int | None = typer.Option(None, help="torch CPU threads (default: torch's choice)"),
    telemetry_every: int = typer.Option(
        100, help="record quantization telemetry every N steps into telemetry.jsonl and tb/ (0: off)"
    ),
    what_if: list[str] = typer.Option(  # noqa: B008
        [], "--what-if", help="also record telemetry as if this recipe were used (repeatable)"
    ),
    out: str = typer.Option("runs", help="output folder (a subfolder per recipe)"),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="replace an earlier run in the same folder (its files are removed first)"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the summary as JSON (no progress bar)"),
) -> None:
    """Train a small GPT (pre-norm, SwiGLU, RoPE) on bytes with a recipe; write metrics and a loss plot
    (loss.html: the `tenfold report` page of this run).

    Example: tenfold train --recipe nvfp4 --steps 300 --model tiny --out runs

    With --policy FILE.toml each layer the policy lists runs in its own format (nvfp4, mxfp8 or bf16);
    the run folder is named after the file. An existing run folder is refused unless --overwrite.
    The first steps compile the quantization kernels; the reported throughput leaves them out.
    """
    run_dir = Path(out) / (Path(policy).stem if policy else recipe)  # TrainConfig.label, without torch
    try:
        check_train_args(data=data, lr=lr, run_dir=run_dir, out=out, overwrite=overwrite)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    import torch

    from tenfold.engine.recipes import RECIPE_NAMES
    from tenfold.engine.telemetry.recorder import Recorder
    from tenfold.train import TrainConfig, Trainer

    try:
        cfg = TrainConfig(
            recipe=recipe,
            model=model,
            n_layers=n_layers,
            d_model=d_model,
            seq_len=seq_len,
            steps=steps,
            batch_size=batch_size,
            lr=lr,
            eval_every=eval_every,
            seed=seed,
            data=data,
            backend=backend,
            policy=policy,
            compile=compile_model,
        )
        if threads is not None:
            if threads < 1:
                raise ValueError(f"threads must be >= 1, got {threads}")
            torch.set_num_threads(threads)
        if telemetry_every < 0:
            raise ValueError(f"telemetry-every must be >= 0, got {telemetry_every}")
        name = cfg.label
        check_memory(cfg.memory_bytes(), f"a {cfg.model} GPT step (d_model, batch-size, seq-len as given)")
        unknown = [r for r in what_if if r not in RECIPE_NAMES]
        if unknown:
            raise ValueError(f"--what-if {unknown[0]!r} is not a recipe; valid: {', '.join(RECIPE_NAMES)}")
        trainer = Trainer(cfg)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    if overwrite:
        clear_run(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    recorder = None
    if telemetry_every:
        recorder = Recorder(run_dir, every=telemetry_every, what_if=tuple(what_if), keep=False)
        trainer.attach_recorder(recorder)
    console = Console(stderr=True)
    if not as_json and _compiles(cfg):
        console.print(
            f"{name}: the first {cfg.timed_from} step(s) compile the quantization kernels (torch.compile; "
            "minutes on a CPU, once per shape); tok/s leaves them out"
        )
    with Progress(
        TextColumn(f"[bold]{name}[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]:.4f}"),
        TextColumn("{task.fields[tps]:,.0f} tok/s"),
        TimeElapsedColumn(),
        console=console,
        disable=as_json,
        transient=False,
    ) as progress:
        task = progress.add_task("train", total=steps, loss=float("nan"), tps=0.0)

        def on_step(row: dict[str, float]) -> None:
            progress.update(task, advance=1, loss=row["loss"], tps=row["tokens_per_s"])

        result = trainer.run(on_step=on_step)
    if recorder is not None:
        recorder.close()
    summary = write_run(run_dir, name, cfg, trainer, result, telemetry=recorder is not None)
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    print_summary(summary, name, run_dir)


def write_run(run_dir: Path, name: str, cfg, trainer, result, *, telemetry: bool) -> dict:
    """Write the run's files (metrics, weights, summary, the loss-curve page) and return the summary."""
    from tenfold.report.runs import load_run, runs_report_html
    from tenfold.train import write_metrics
    from tenfold.train.trainer import WEIGHTS_NAME

    write_metrics([*result.steps], run_dir / "metrics.jsonl")
    trainer.save_weights(run_dir / WEIGHTS_NAME)
    summary = {
        **result.summary(),
        "conversion": result.conversion.to_dict(),
        "files": {
            k: str(run_dir / f)
            for k, f in (
                ("metrics", "metrics.jsonl"),
                ("plot", PLOT_NAME),
                ("weights", WEIGHTS_NAME),
                ("telemetry", "telemetry.jsonl"),
            )
            if k != "telemetry" or telemetry
        },
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    plot_title = f"{name}: {cfg.model} GPT, {cfg.tokens_per_step} tokens/step"
    (run_dir / PLOT_NAME).write_text(
        runs_report_html([load_run(run_dir)], title=plot_title), encoding="utf-8"
    )
    return summary


def print_summary(summary: dict, name: str, run_dir: Path) -> None:
    """The run's summary as a table: final losses, throughput, wall time, layers quantized, outputs."""
    table = Table(title=f"tenfold train: {name}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key in ("final_train_loss", "final_val_loss", "tokens_per_s", "wall_s"):
        table.add_row(key, f"{summary[key]:,.4f}" if "loss" in key else f"{summary[key]:,.1f}")
    table.add_row("layers quantized / kept", f"{summary['converted_layers']} / {summary['kept_layers']}")
    table.add_row("outputs", str(run_dir))
    Console().print(table)


def _compiles(cfg: TrainConfig) -> bool:
    """Whether this run's first steps compile kernels (torch.compile of the model or of the quantizers)."""
    from tenfold.train.trainer import quant_path_for

    quantized = cfg.policy or cfg.recipe != "bf16"
    kernels = quantized and quant_path_for(cfg) in ("auto", "compiled")
    return bool(cfg.timed_from) and (cfg.compile or kernels)
