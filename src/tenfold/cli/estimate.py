"""`tenfold estimate train` (one training plan) and `tenfold estimate infer` (one serving configuration)."""

from __future__ import annotations

import typer
from rich.console import Console

from tenfold.cli._perf_common import (
    EXIT_INFEASIBLE,
    curve_table,
    estimate_tables,
    fail,
    inference_tables,
    print_json,
)
from tenfold.perf import Deployment, estimate_inference, inference_curve
from tenfold.perf.training.estimate import estimate_training
from tenfold.perf.training.layout import Layout

app = typer.Typer(help="Estimate one training plan or one serving configuration.", no_args_is_help=True)


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


@app.command("infer")
def infer(
    model: str = typer.Option(..., "--model", "-m", help="catalog model (llama3-70b) or a TOML file"),
    gpu: str = typer.Option(
        ..., "--gpu", "-g", help="catalog accelerator (h200, b200, gb200, ...) or a TOML file"
    ),
    input_len: int = typer.Option(..., "--input-len", help="prompt tokens per request (ISL)"),
    output_len: int = typer.Option(..., "--output-len", help="generated tokens per request (OSL)"),
    concurrency: int = typer.Option(0, help="requests in flight (0: as many as fit, the max-load point)"),
    tp: int = typer.Option(1, help="attention tensor parallel"),
    dp: int = typer.Option(1, help="attention data parallel (replicas sharing the EP group; needs tp 1)"),
    ep: int = typer.Option(1, help="expert parallel over tp·dp GPUs (the rest is expert TP)"),
    precision: str = typer.Option("bf16", help="weights: bf16 | fp16 | fp8 | mxfp8 | nvfp4 | mxfp4"),
    activations: str = typer.Option("", help="GEMM input format (default: as the weights; mxfp4 -> mxfp8)"),
    attention_precision: str = typer.Option("", "--attention-precision", help="attention projections"),
    kv_precision: str = typer.Option("bf16", "--kv-precision", help="KV cache: bf16 | fp16 | fp8 | nvfp4"),
    engine: str = typer.Option("trtllm", help="serving engine preset: trtllm | trtllm-bench | vllm | sglang"),
    draft_tokens: int = typer.Option(0, "--draft-tokens", help="MTP speculative tokens per step"),
    accepted_tokens: float = typer.Option(1.0, "--accepted-tokens", help="mean tokens accepted per step"),
    usd_per_gpu_hour: float = typer.Option(-1.0, "--usd-per-gpu-hour", help="price (default: catalog)"),
    curve: bool = typer.Option(False, "--curve", help="also the throughput-vs-interactivity curve"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object instead of tables"),
) -> None:
    """Estimate one serving configuration: TTFT, TPOT, output tokens/s per GPU and per user, cost per
    million tokens (output and input+output), the step breakdown and memory per GPU.

    Example: tenfold estimate infer -m llama3-70b -g b200 --input-len 1024 --output-len 1024
    --precision nvfp4 --kv-precision fp8 --concurrency 64 --curve

    Exit codes: 0 feasible, 1 infeasible (the reason is printed with its numbers), 2 bad input.
    """
    kw = dict(
        input_len=input_len,
        output_len=output_len,
        precision=precision,
        activations=activations or None,
        attention_precision=attention_precision or None,
        kv_precision=kv_precision,
        engine=engine,
        draft_tokens=draft_tokens,
        accepted_tokens=accepted_tokens,
        usd_per_gpu_hour=None if usd_per_gpu_hour < 0 else usd_per_gpu_hour,
    )
    try:
        dep = Deployment(tp=tp, dp=dp, ep=ep)
        est = estimate_inference(model, gpu, dep, concurrency=concurrency or None, **kw)
        points = inference_curve(model, gpu, dep, **kw) if curve and est.feasible else None
    except ValueError as exc:
        raise fail(str(exc)) from None
    if as_json:
        d = est.to_dict()
        if points is not None:
            d["curve"] = points.to_dict()
        print_json(d)
    else:
        console = Console()
        for table in inference_tables(est):
            console.print(table)
        if points is not None:
            console.print(curve_table(points))
        for note in est.notes:
            console.print(f"[yellow]note:[/yellow] {note}")
    if not est.feasible:
        raise typer.Exit(EXIT_INFEASIBLE)
