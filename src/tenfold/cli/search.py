"""`tenfold search train`: the fastest parallel layouts for a model, a cluster and a global batch."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tenfold.cli.calibrate import CALIBRATION_HELP, calibration_label, user_calibration
from tenfold.cli.output import EXIT_INFEASIBLE, check_range, fail, print_json, progress_bar
from tenfold.perf.defaults import MAX_BATCH, MAX_GPUS, MAX_SEQ, MAX_VP, TRAINING
from tenfold.perf.errors import Infeasible
from tenfold.perf.specs.models import load_model
from tenfold.perf.training.estimate import TrainingEstimate
from tenfold.perf.training.export import FRAMEWORKS, export_plan
from tenfold.perf.training.search import SearchResult, search_training
from tenfold.report.format import fmt_number
from tenfold.report.ranges import RANGE_NOTE, has_interval, training_intervals

app = typer.Typer(help="Search parallel layouts (training now; inference later).", no_args_is_help=True)


@app.callback()
def _group() -> None:
    """Search parallel layouts."""


def range_table(top: tuple[TrainingEstimate, ...]) -> Table:
    """How sure each of the top plans is: its tokens/s/GPU and step time with their 80 % ranges."""
    t = Table(title="80 % ranges of the plans above (the model's cross-validated error)")
    for col in ("#", "tokens/s/GPU", "80 % range", "step s", "80 % range"):
        t.add_column(col, justify="right", no_wrap=True)
    for i, e in enumerate(top, 1):
        r = training_intervals(e)
        tok, step = r["tokens_per_s_per_gpu_interval"], r["step_time_s_interval"]
        t.add_row(
            str(i),
            fmt_number(e.tokens_per_s_per_gpu, ",.0f"),
            f"{tok[0]:,.0f}-{tok[1]:,.0f}" if tok else "-",
            fmt_number(e.step_time_s, ".3f"),
            f"{step[0]:.3f}-{step[1]:.3f}" if step else "-",
        )
    return t


def plan_tables(result: SearchResult, num_gpus: int, seq_len: int, global_batch: int) -> list[Table]:
    """The top plans, the rejected plans by first reason, and (with a measured uncertainty) the top plans'
    80 % ranges."""
    t = Table(
        title=f"{result.model} on {num_gpus} x {result.hardware}, seq {seq_len}, batch {global_batch}, "
        f"{result.precision}: best {len(result.top)} of {result.evaluated:,} plans "
        f"({result.elapsed_s:.2f} s)"
    )
    for col in (
        "#",
        "layout",
        "step s",
        "tokens/s/GPU",
        "MFU bf16",
        "compute",
        "exposed comm",
        "bubble",
        "mem GiB",
    ):
        t.add_column(col.replace(" ", "\n"), justify="left" if col == "layout" else "right", overflow="fold")
    for i, e in enumerate(result.top, 1):
        b = e.breakdown
        comm = b.tp_s + b.cp_s + b.ep_s + b.pp_s + b.fsdp_s + b.dp_s
        t.add_row(
            str(i),
            e.layout.describe(),
            f"{e.step_time_s:.3f}",
            f"{e.tokens_per_s_per_gpu:,.0f}",
            f"{e.mfu_bf16:.1%}",
            f"{b.compute_s:.2f}",
            f"{comm:.2f}",
            f"{b.bubble_s:.2f}",
            f"{e.memory.total_GiB:.1f}",
        )
    r = Table(title=f"rejected plans by first reason ({result.valid:,} valid, {result.fits:,} fit in memory)")
    r.add_column("reason")
    r.add_column("plans", justify="right")
    for k, v in sorted(result.rejected.items(), key=lambda kv: -kv[1]):
        r.add_row(k, f"{v:,}")
    tables = [t, r]
    if any(has_interval(e) for e in result.top):
        tables.append(range_table(result.top))
    return tables


@app.command("train")
def train(
    model: str = typer.Option(..., "--model", "-m", help="catalog model or a TOML file"),
    gpu: str = typer.Option(..., "--gpu", "-g", help="catalog accelerator or a TOML file"),
    num_gpus: int = typer.Option(..., "--num-gpus", "-n", help="GPUs in the cluster"),
    seq_len: int = typer.Option(TRAINING.seq_len, "--seq-len", help="tokens per sequence"),
    global_batch: int = typer.Option(
        TRAINING.global_batch, "--global-batch", help="sequences per optimizer step"
    ),
    precision: str = typer.Option(TRAINING.precision, help="bf16 | fp16 | fp8 | mxfp8 | nvfp4"),
    software: str = typer.Option(TRAINING.software, help="software stack preset"),
    top: int = typer.Option(5, help="how many plans to show"),
    max_vp: int = typer.Option(TRAINING.max_vp, "--max-vp", help="largest virtual-pipeline depth tried"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object instead of tables"),
    export: str = typer.Option(
        "", "--export", help="print the best plan's launch arguments: megatron|nemo|torchtitan"
    ),
    headroom: float | None = typer.Option(
        None, "--headroom", help="GiB per GPU left outside the model (default: what the framework needs)"
    ),
    calibration: str = typer.Option("", "--calibration", help=CALIBRATION_HELP),
) -> None:
    """Enumerate every (tp, pp, vp, dp, cp, ep, micro-batch, recompute, ZeRO) plan, prune by the layout
    rules and by memory, rank the rest by step time.

    Example: tenfold search train -m llama3.1-405b -g h100-sxm -n 16384 --seq-len 8192 --global-batch 2048

    Exit codes: 0 found a plan, 1 no plan fits, 2 bad input.
    """
    check_range("--num-gpus", num_gpus, 1, MAX_GPUS)
    check_range("--seq-len", seq_len, 1, MAX_SEQ)
    check_range("--global-batch", global_batch, 1, MAX_BATCH)
    check_range("--top", top, 1)
    check_range("--max-vp", max_vp, 1, MAX_VP)
    cal = user_calibration(calibration)
    try:
        if export and export not in FRAMEWORKS:
            raise ValueError(f"unknown --export {export!r}; choose one of {', '.join(FRAMEWORKS)}")
        with progress_bar("searching", hidden=as_json, unit="(tp, pp, cp)") as progress:
            result = search_training(
                model,
                gpu,
                num_gpus,
                seq_len=seq_len,
                global_batch=global_batch,
                precision=precision,
                software=software,
                top_k=top,
                max_vp=max_vp,
                headroom_GiB=headroom,
                calibration=cal,
                progress=progress,
            )
    except ValueError as exc:
        raise fail(str(exc)) from None
    text = ""
    if export and result.top:
        try:
            text = export_plan(result.top[0], export, layers=load_model(model).layers)
        except Infeasible as exc:
            raise fail(f"--export {export}: {exc}", EXIT_INFEASIBLE) from None
    if as_json:
        extra = ({"export": text} if export else {}) | (
            {"calibration": calibration_label(calibration, cal)} if cal else {}
        )
        d = result.to_dict()
        d["top"] = [t | training_intervals(e) for t, e in zip(d["top"], result.top, strict=True)]
        print_json(d | extra)
        export = ""
    else:
        out = Console()
        for table in plan_tables(result, num_gpus, seq_len, global_batch):
            out.print(table)
        if any(has_interval(e) for e in result.top):
            out.print(escape(RANGE_NOTE), style="dim")
        if cal:
            out.print(f"calibration: {escape(calibration_label(calibration, cal))}")
    if not result.top:
        raise typer.Exit(EXIT_INFEASIBLE)
    if export:
        Console(soft_wrap=True, highlight=False).print(escape(text))
