"""`tenfold estimate train`: step time, throughput, MFU and memory of one training plan."""

from __future__ import annotations

import typer
from rich.console import Console

from tenfold.cli._perf_common import EXIT_INFEASIBLE, estimate_tables, fail, print_json
from tenfold.perf.layout import Layout
from tenfold.perf.training import estimate_training

app = typer.Typer(help="Estimate one plan (training now; inference later).", no_args_is_help=True)


@app.callback()
def _group() -> None:
    """Estimate one plan."""


@app.command("train")
def train(
    model: str = typer.Option(..., "--model", "-m", help="catalog model (llama3-70b) or a TOML file"),
    gpu: str = typer.Option(
        ..., "--gpu", "-g", help="catalog accelerator (h100-sxm, gb200, ...) or a TOML file"
    ),
    seq_len: int = typer.Option(..., "--seq-len", help="tokens per sequence"),
    global_batch: int = typer.Option(..., "--global-batch", help="sequences per optimizer step"),
    tp: int = typer.Option(1, help="tensor parallel"),
    pp: int = typer.Option(1, help="pipeline parallel"),
    dp: int = typer.Option(0, help="data parallel (0: num-gpus / (tp·pp·cp))"),
    cp: int = typer.Option(1, help="context parallel"),
    ep: int = typer.Option(1, help="expert parallel (MoE)"),
    vp: int = typer.Option(1, help="virtual pipeline stages (interleaved 1F1B)"),
    micro_batch: int = typer.Option(1, "--micro-batch", help="sequences per micro-batch"),
    recompute: str = typer.Option("none", help="none | selective | full"),
    zero: int = typer.Option(-1, help="ZeRO stage 0-3 (3 = FSDP); -1: the software's default"),
    num_gpus: int = typer.Option(0, "--num-gpus", help="cluster size (checked against the layout)"),
    precision: str = typer.Option("bf16", help="bf16 | fp16 | fp8 | mxfp8 | nvfp4"),
    software: str = typer.Option("megatron-core", help="software stack preset"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object instead of tables"),
) -> None:
    """Estimate one training plan: step time with breakdown, tokens/s/GPU, MFU, memory per GPU.

    Example: tenfold estimate train -m llama3-70b -g h100-sxm --seq-len 8192 --global-batch 256
    --tp 4 --pp 8 --vp 5 --dp 2 --precision fp8

    Exit codes: 0 feasible, 1 infeasible (the reason is printed), 2 bad input.
    """
    try:
        if dp == 0:
            if not num_gpus or num_gpus % (tp * pp * cp):
                raise ValueError(f"give --dp, or --num-gpus divisible by tp·pp·cp = {tp * pp * cp}")
            dp = num_gpus // (tp * pp * cp)
        layout = Layout(
            tp=tp,
            pp=pp,
            dp=dp,
            cp=cp,
            ep=ep,
            vp=vp,
            micro_batch=micro_batch,
            recompute=recompute,
            zero=None if zero < 0 else zero,
        )
        est = estimate_training(
            model,
            gpu,
            layout,
            seq_len=seq_len,
            global_batch=global_batch,
            precision=precision,
            num_gpus=num_gpus or None,
            software=software,
        )
    except ValueError as exc:
        raise fail(str(exc)) from None
    if as_json:
        print_json(est.to_dict())
    else:
        console = Console()
        for table in estimate_tables(est):
            console.print(table)
        for note in est.notes:
            console.print(f"[yellow]note:[/yellow] {note}")
    if not est.feasible:
        raise typer.Exit(EXIT_INFEASIBLE)
